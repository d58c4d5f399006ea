"""``async-spark score --model RUN_DIR --data SOURCE``: a trained model's metrics on other rows.

``train --out DIR`` writes ``DIR/model.npz`` (weights on the raw columns); this reads it back
without pickle and scores any data ``train`` reads (LIBSVM, Parquet, the built-ins), block by
block in this process: the checking pass that ``train`` makes on the driver before it starts
Spark, then the scoring pass, so no Spark session is needed. The metrics are
:class:`async_spark.models.scoring.HeldOutScores`'s: accuracy, log loss and (two classes) the ROC
area for a classifier; RMSE, MAE and R² for least squares. The last line is ``RESULT {json}``;
``--out FILE`` also writes the JSON, atomically.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

__all__ = ["add_score_arguments", "run_score"]


def add_score_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``async-spark score``."""
    p.add_argument(
        "--model",
        required=True,
        help="a folder written by train --out (its model.npz), or the model.npz itself",
    )
    p.add_argument(
        "--data",
        required=True,
        help="LIBSVM or Parquet path, or builtin:NAME, with the model's features and raw labels",
    )
    p.add_argument("--format", default="auto", help="libsvm | parquet | auto (default: auto)")
    p.add_argument("--out", default=None, help="also write the metrics to this JSON file")
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def run_score(args: argparse.Namespace) -> int:
    """``async-spark score``: print the metrics and the ``RESULT`` line; exit code 0."""
    from async_spark.data.dataset import open_dataset
    from async_spark.data.errors import DataError
    from async_spark.models.scoring import HeldOutScores, read_saved_model

    saved = read_saved_model(args.model)
    # the model's d: LIBSVM rows may stop short of it; a larger index is an error naming its line
    try:
        source, _ = open_dataset(
            args.data,
            _blocks_for(args.data),
            format=args.format,
            num_features=saved.model.num_features,  # LIBSVM rows are padded to the model's d
            loss=None,
        )
    except DataError as exc:
        if exc.option != "num_features":
            raise
        raise DataError(exc.render(lambda _: f"the model {saved.path}")) from None
    scores = HeldOutScores(saved)
    where = args.data
    for b in range(source.num_blocks):
        block = source.load(b)
        scores.add(block.X, block.y, where, block.row_offset)
    metrics = {"model": str(saved.path), "data": where, **scores.metrics()}
    print(_summary_line(metrics, saved.classes))
    if args.out is not None:
        from async_spark.solvers.outputs import atomic_write

        text = (json.dumps(metrics, indent=2, sort_keys=True) + "\n").encode()
        atomic_write(args.out, lambda fh: fh.write(text))
    print("RESULT " + json.dumps(metrics, sort_keys=True))
    return 0


BLOCK_BYTES = 64 << 20  # of file per block: what one block of the pass holds decoded, roughly


def _blocks_for(spec: str) -> int:
    """Blocks for a pass over ``spec``: one per 64 MiB of its files (a built-in: one)."""
    path = Path(spec[len("file://") :] if spec.startswith("file://") else spec)
    if path.is_dir():
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    elif path.is_file():
        size = path.stat().st_size
    else:
        return 1
    return max(1, min(256, size // BLOCK_BYTES))


def _summary_line(metrics: dict[str, Any], classes: tuple[float, ...]) -> str:
    def shown(key: str) -> str:
        value = metrics.get(key)
        return "n/a" if value is None else f"{value:.6g}"

    head = f"{metrics['rows']} rows of {metrics['data']}, model {metrics['model']}"
    if metrics["loss"] == "squares":
        return f"{head} (least squares): RMSE {shown('rmse')}, MAE {shown('mae')}, R² {shown('r2')}"
    kind = "logistic" if metrics["loss"] == "logistic" else "softmax"
    text = (
        f"{head} ({kind}, {len(classes)} classes): accuracy {shown('accuracy')}, "
        f"log loss {shown('log_loss')}"
    )
    if metrics["loss"] == "logistic":
        text += f", ROC area {shown('auc')}"
    return text

"""``--mlflow`` for ``async-spark train`` and ``async-spark hylo``: what a run logs.

One MLflow run per trained method: the configuration and data shape as params; the objective at
each evaluated snapshot as a series (step = model version, timestamp = training time); the
summary's figures as metrics; the run's output folder (``summary.json``, ``trace.jsonl``,
``model.npz`` or ``model.pt``) as artifacts. The run is created before training starts, so a
missing package or an unreachable server is reported before any work is done; a failure while
logging after training leaves the outputs on disk and is reported as a warning.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from async_spark.reporting.tracking import MlflowRun

__all__ = [
    "add_tracking_arguments",
    "open_run",
    "open_runs",
    "log_hylo_run",
    "finish",
]


def add_tracking_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("MLflow tracking (needs: pip install 'async-spark[tracking]')")
    g.add_argument("--mlflow", action="store_true", help="log the run to MLflow")
    g.add_argument(
        "--mlflow-experiment",
        default=None,
        help="experiment name (default: $MLFLOW_EXPERIMENT_NAME or async-spark)",
    )
    g.add_argument(
        "--mlflow-uri", default=None, help="tracking URI (default: $MLFLOW_TRACKING_URI)"
    )


def open_run(args: argparse.Namespace, run_name: str, tags: dict[str, str]) -> MlflowRun | None:
    if not getattr(args, "mlflow", False):
        return None
    return MlflowRun(
        run_name, experiment=args.mlflow_experiment, tracking_uri=args.mlflow_uri, tags=tags
    )


def open_runs(
    args: argparse.Namespace, names_and_tags: list[tuple[str, dict[str, str]]]
) -> list[MlflowRun | None]:
    """One run per entry, or none: if opening one fails, those already open end FAILED."""
    runs: list[MlflowRun | None] = []
    try:
        for name, tags in names_and_tags:
            runs.append(open_run(args, name, tags))
    except BaseException:
        for run in runs:
            finish(run, None, "FAILED")
        raise
    return runs


def log_hylo_run(run: MlflowRun, out_dir: str, params: dict[str, Any] | None = None) -> None:
    """Params, per-epoch metrics and the output folder of a HyLo run written to ``out_dir``.

    An interrupted run has no ``summary.json`` yet: its ``params`` and finished epochs are logged.
    """
    import json

    folder = Path(out_dir)
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    run.log_params(summary.get("config", params or {}))
    metrics_path = folder / "metrics.jsonl"
    if metrics_path.exists():
        records = [json.loads(line) for line in metrics_path.read_text().splitlines() if line]
        for key in ("train_loss", "test_loss", "test_accuracy", "lr", "damping"):
            run.log_series(
                key,
                ((r["epoch"], r[key], r.get("train_seconds", 0.0)) for r in records if key in r),
            )
    tta = summary.get("time_to_accuracy") or {}
    sustained = summary.get("time_to_sustained_accuracy") or {}
    run.log_metrics(
        {
            "final_test_accuracy": summary.get("test_accuracy"),
            "best_test_accuracy": summary.get("best_test_accuracy"),
            "wall_seconds": summary.get("wall_seconds"),
            **{f"time_to_accuracy_{k}": v for k, v in tta.items()},
            **{f"time_to_sustained_accuracy_{k}": v for k, v in sustained.items()},
        }
    )
    if summary:
        run.set_tags({"diverged": summary.get("diverged", False)})
    if folder.exists():
        run.log_artifacts(folder)


def finish(
    run: MlflowRun | None,
    log: Callable[[MlflowRun], None] | None,
    status: str = "FINISHED",
) -> None:
    """``log(run)``, then end the run; a tracking failure is a warning, not lost work."""
    if run is None:
        return
    try:
        if log is not None:
            log(run)
        run.end(status)
    except Exception as exc:
        message = " ".join(str(exc).split())[:300]
        print(f"warning: MLflow logging of run {run.run_id} failed: {message}", file=sys.stderr)
        try:
            run.end("FAILED")
        except Exception:  # the server is gone: nothing more to tell it
            run.ended = True

"""One Spark application, two stages next to each other:

1. **prepare** -- Spark generates a 10-class signal-classification dataset on the executors
   (``mapInPandas``, seeded per partition), standardizes it with Spark aggregates, splits it and
   writes ``train/`` and ``test/`` Parquet (features: ``array<float>`` of length 40, label);
2. **linear** -- multinomial logistic regression with ASAGA on the asynchronous engine
   (:func:`async_spark.solvers.linear.train_linear`) over the Parquet blocks;
3. **deep** -- the MNIST-1D CNN with HyLo on a barrier stage (GPU executors when CUDA is available,
   else CPU ranks with gloo); each rank reads one partition of the training DataFrame;
4. **report** -- both models (``linear/model.npz``, ``hylo/model.pt``) and ``report.json`` /
   ``report.md`` with test accuracy and wall time of each.

    spark-submit --master spark://host:7077 jobs/pipeline.py --out /shared/run1 \\
        [--rows 20000] [--ranks 2] [--epochs 5] [--device auto|cpu|cuda]

``--out`` must be visible to every executor (shared file system) on a real cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

LENGTH, CLASSES = 40, 10


def _generate(seed: int) -> Any:
    """mapInPandas function: rows ``id`` -> (features, label) from a fixed random teacher."""

    def gen(batches: Any) -> Any:
        import pandas as pd

        teacher = np.random.default_rng(seed).standard_normal((LENGTH, CLASSES))
        for pdf in batches:
            ids = pdf["id"].to_numpy()
            if ids.size == 0:
                continue
            rng = np.random.default_rng([seed, int(ids[0])])
            t = np.linspace(0, 1, LENGTH)
            freq = rng.uniform(1, 4, size=(ids.size, 1))
            x = np.sin(2 * np.pi * freq * t) + rng.standard_normal((ids.size, LENGTH))
            x = (3.0 * x + 1.0).astype(np.float32)  # unscaled, so that standardizing matters
            y = (x @ teacher).argmax(1)
            yield pd.DataFrame({"id": ids, "features": list(x), "label": y.astype(np.int64)})

    return gen


def prepare(spark: Any, out: Path, rows: int, seed: int, partitions: int) -> dict[str, Any]:
    """Generate, standardize (Spark aggregates), split and write Parquet; return the paths."""
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    raw = spark.range(rows, numPartitions=partitions).mapInPandas(
        _generate(seed), "id long, features array<float>, label long"
    )
    exploded = raw.select(F.posexplode("features").alias("j", "v"))
    stats = exploded.groupBy("j").agg(F.mean("v").alias("m"), F.stddev_pop("v").alias("s"))
    ordered = sorted(stats.collect(), key=lambda r: r["j"])
    mean = [float(r["m"]) for r in ordered]
    std = [max(float(r["s"]), 1e-6) for r in ordered]
    m_col = F.array(*[F.lit(v) for v in mean])
    s_col = F.array(*[F.lit(v) for v in std])
    scaled = raw.select(
        "id",
        F.zip_with("features", m_col, lambda a, b: a - b).alias("c"),
        "label",
    ).select(
        "id",
        F.zip_with("c", s_col, lambda a, b: (a / b).cast("float")).alias("features"),
        "label",
    )
    train, test = scaled.randomSplit([0.8, 0.2], seed=seed)
    paths = {"train": str(out / "data" / "train"), "test": str(out / "data" / "test")}
    train.select("features", "label").write.mode("overwrite").parquet(paths["train"])
    test.select("features", "label").write.mode("overwrite").parquet(paths["test"])
    return {**paths, "prepare_seconds": time.perf_counter() - t0, "rows": rows}


def _parquet_xy(path: str) -> tuple[np.ndarray, np.ndarray]:
    from async_spark.gpu.data import _read_parquet

    return _read_parquet(path, "features", "label")


def linear_stage(
    spark: Any, data: dict[str, Any], out: Path, partitions: int, max_updates: int, seed: int
) -> dict[str, Any]:
    """Multinomial logistic regression with ASAGA on the engine, evaluated on the test set."""
    from async_spark.solvers.config import TrainConfig
    from async_spark.solvers.linear import train_linear
    from async_spark.solvers.outputs import load_linear_model, write_run

    cfg = TrainConfig(
        data=data["train"],
        format="parquet",
        loss="softmax",
        method="asaga",
        partitions=partitions,
        max_updates=max_updates,
        seed=seed,
        quiet=True,
        out=str(out / "linear"),
    )
    t0 = time.perf_counter()
    result = train_linear(cfg, spark=spark)
    wall = time.perf_counter() - t0
    write_run(result, cfg.out)
    model = load_linear_model(Path(cfg.out) / "model.npz")
    x, y = _parquet_xy(data["test"])
    scores = x.astype(np.float64) @ np.asarray(model["weights"]).T + model["intercept"]
    classes = np.asarray(model["classes"]) if len(model["classes"]) else np.arange(CLASSES)
    acc = float(np.mean(classes[scores.argmax(1)] == y))
    return {
        "method": "asaga",
        "model": "softmax regression",
        "test_accuracy": acc,
        "final_objective": result.final_objective,
        "updates": result.updates,
        "stage_seconds": wall,
        "train_seconds": result.wall_seconds,
        "path": str(Path(cfg.out) / "model.npz"),
    }


def hylo_stage(
    spark: Any, data: dict[str, Any], out: Path, ranks: int, epochs: int, device: str, seed: int
) -> dict[str, Any]:
    """The MNIST-1D CNN with HyLo on a barrier stage reading the training DataFrame."""
    from async_spark.gpu.data import ShardSource, dataframe_shards
    from async_spark.gpu.hylo_stage import train_hylo_spark

    source = ShardSource(
        kind="parquet", data=data["train"], model="cnn1d", seed=seed, test_path=data["test"]
    )
    config = {
        "model": "cnn1d",
        "data": "synthetic",  # validated placeholder: the rows come from `source`
        "optimizer": "hylo",
        "epochs": epochs,
        "batch_size": 64 * ranks,
        "workers": ranks,
        "device": device,
        "seed": seed,
        "inv_update_steps": 5,
        "timeout": 600.0,
        "out": str(out / "hylo"),
    }
    df = spark.read.parquet(data["train"])
    summary = train_hylo_spark(
        config, spark, launcher="barrier", source=source, data=dataframe_shards(df, ranks)
    )
    return {
        "method": "hylo",
        "model": "cnn1d",
        "device": summary["device"],
        "ranks": ranks,
        "test_accuracy": summary["test_accuracy"],
        "stage_seconds": summary["stage_seconds"],
        "startup_seconds": summary["startup_seconds"],
        "train_seconds": summary["wall_seconds"],
        "path": str(out / "hylo" / "model.pt"),
    }


def run_pipeline(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    """All stages on one SparkSession; writes ``report.json`` and ``report.md`` into ``out``."""
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    data = prepare(spark, out, args.rows, args.seed, args.partitions)
    linear = linear_stage(spark, data, out, args.partitions, args.max_updates, args.seed)
    deep = hylo_stage(spark, data, out, args.ranks, args.epochs, device, args.seed)
    report = {
        "application": spark.sparkContext.applicationId,
        "master": spark.sparkContext.master,
        "data": data,
        "linear": linear,
        "hylo": deep,
    }
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    lines = [
        "# Pipeline report",
        "",
        f"Spark application `{report['application']}` on `{report['master']}`; "
        f"{data['rows']} rows prepared in {data['prepare_seconds']:.1f} s.",
        "",
        "| stage | model | test accuracy | stage seconds | training seconds | model file |",
        "|---|---|---|---|---|---|",
        f"| ASAGA (engine) | {linear['model']} | {linear['test_accuracy']:.4f} | "
        f"{linear['stage_seconds']:.1f} | {linear['train_seconds']:.1f} | {linear['path']} |",
        f"| HyLo ({deep['device']}, {deep['ranks']} ranks) | {deep['model']} | "
        f"{deep['test_accuracy']:.4f} | {deep['stage_seconds']:.1f} | "
        f"{deep['train_seconds']:.1f} | {deep['path']} |",
        "",
    ]
    (out / "report.md").write_text("\n".join(lines))
    return report


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--rows", type=int, default=20000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--ranks", type=int, default=2, help="HyLo ranks (GPUs with --device cuda)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--max-updates", type=int, default=2000, help="ASAGA updates")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--master", default=None)
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from pyspark.sql import SparkSession

    from async_spark.engine.session import build_session

    conf = list(args.conf)
    if not any(c.startswith("spark.barrier.sync.timeout=") for c in conf):
        conf.append("spark.barrier.sync.timeout=600s")
    owned = SparkSession.getActiveSession() is None
    spark = build_session(args.master, app_name="async-spark pipeline", conf=conf)
    try:
        report = run_pipeline(spark, args)
    finally:
        if owned:
            spark.stop()
    print(Path(args.out, "report.md").read_text())
    print("RESULT " + json.dumps({k: report[k]["test_accuracy"] for k in ("linear", "hylo")}))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())

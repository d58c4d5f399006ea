"""Command-line glue: ``async-spark hylo ... --spark`` and ``spark-submit jobs/train_hylo.py``.

The ``hylo`` subcommand keeps its options (:func:`async_spark.hylo.cli_args.add_arguments`);
:func:`add_spark_hylo_arguments` adds the Spark ones, and :func:`run_spark_hylo` runs the training
on a Spark stage (``--workers`` ranks) and writes the same ``summary.json``, ``metrics.jsonl`` and
``model.pt`` into ``--out``. No pyspark or torch import happens at parse time.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_spark_hylo_arguments", "run_spark_hylo", "parse_gpus"]


def parse_gpus(text: str) -> float:
    """``--gpus-per-task``: a number > 0 (fractions allowed, whole numbers above 1)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not v > 0 or (v > 1 and v != int(v)):
        raise argparse.ArgumentTypeError(
            f"--gpus-per-task must be a fraction in (0, 1] or a whole number, got {text!r}"
        )
    return v


def add_spark_hylo_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--spark``, ``--launcher``, ``--master``, ``--conf`` and the stage's options."""
    g = parser.add_argument_group("Spark stage (with --spark)")
    g.add_argument(
        "--spark",
        action="store_true",
        help="run the --workers ranks as a Spark barrier stage (GPU executors with --device cuda)",
    )
    g.add_argument(
        "--launcher",
        choices=("barrier", "torchdistributor"),
        default="barrier",
        help="barrier: our barrier stage (ranks read their Spark partitions); "
        "torchdistributor: pyspark.ml.torch's TorchDistributor (torchrun per task)",
    )
    g.add_argument(
        "--master", default=None, help="Spark master URL (default: spark-submit's, else local[*])"
    )
    g.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Spark configuration (repeatable)",
    )
    g.add_argument(
        "--gpus-per-task", type=parse_gpus, default=1.0, help="GPUs per rank (stage profile)"
    )
    g.add_argument("--cpus-per-task", type=int, default=1, help="CPUs per rank (stage profile)")
    g.add_argument(
        "--train-parquet",
        default=None,
        metavar="PATH",
        help="train on a Parquet dataset (features: flat numeric list, label) read by Spark",
    )
    g.add_argument("--test-parquet", default=None, metavar="PATH", help="its test set")
    return parser


def _session_conf(args: argparse.Namespace) -> list[str]:
    conf = list(args.conf or [])
    keys = {c.partition("=")[0].strip() for c in conf}
    if "spark.barrier.sync.timeout" not in keys:  # allGather must not wait a year
        conf.append(f"spark.barrier.sync.timeout={int(max(60, args.timeout))}s")
    if "spark.dynamicAllocation.enabled" not in keys:  # barrier stages need it off
        conf.append("spark.dynamicAllocation.enabled=false")
    return conf


def run_spark_hylo(args: argparse.Namespace) -> int:
    """Run the HyLo training of ``args`` on a Spark stage; print the summary as JSON."""
    from async_spark.hylo.cli_args import config_from_args

    config = config_from_args(args)
    if args.test_parquet and not args.train_parquet:
        raise ValueError("--test-parquet needs --train-parquet")
    from pyspark.sql import SparkSession

    from async_spark.engine.session import build_session

    from .data import ShardSource, dataframe_shards
    from .hylo_stage import train_hylo_spark

    owned = SparkSession.getActiveSession() is None
    spark = build_session(args.master, app_name="async-spark hylo", conf=_session_conf(args))
    try:
        source = None
        data: Any = None
        if args.train_parquet:
            source = ShardSource(
                kind="parquet",
                data=args.train_parquet,
                model=args.model,
                seed=args.seed,
                test_path=args.test_parquet,
            )
            config["data"] = "synthetic"  # placeholder for validation; the source decides
            if args.launcher == "barrier":
                df = spark.read.parquet(args.train_parquet)
                data = dataframe_shards(df, args.workers)
        summary = train_hylo_spark(
            config,
            spark,
            launcher=args.launcher,
            source=source,
            data=data,
            gpus_per_task=args.gpus_per_task,
            cpus_per_task=args.cpus_per_task,
        )
    finally:
        if owned:
            spark.stop()
    shown = {k: v for k, v in summary.items() if k != "rank_logs"}
    print(json.dumps(shown, indent=2, default=str))
    for _rank, lines in sorted(summary.get("rank_logs", {}).items()):
        for line in lines:
            print(line, file=sys.stderr)
    return 0

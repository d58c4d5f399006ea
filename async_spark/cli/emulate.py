"""``async-spark emulate``: a training run on P emulated workers in virtual time.

The flags of ``async-spark train`` plus ``--workers P`` and the cost model; the same outputs
(``summary.json``, ``trace.jsonl`` in virtual seconds, ``model.npz``) with an ``emulator`` section
in ``summary.json``. ``--calibrate`` measures the cost model on the real Spark engine of this
machine instead and writes it to ``--out`` (a JSON file). See :mod:`async_spark.engine.emulator`.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import IO, Any, cast

from async_spark.cli._common import parse_float, parse_int, spark_session
from async_spark.cli.train import add_train_arguments, method_names, print_results, train_configs

__all__ = ["add_emulate_arguments", "cost_model_from_args", "run_emulate"]

DEFAULT_COST_FILE = "cost_model.json"


def _driver_seconds(text: str) -> float | str:
    if text == "measured":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds or 'measured', got {text!r}"
        ) from None


def add_emulate_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``async-spark train`` plus the emulator's."""
    add_train_arguments(p)
    # --partitions follows --workers (one block per emulated worker, as in ASYNC).
    p.set_defaults(partitions=None)
    g = p.add_argument_group("emulator")
    g.add_argument(
        "--workers",
        type=parse_int,
        default=None,
        help="P: emulated workers, one block and one core each (e.g. 32, 256, 1024); sets "
        "--partitions",
    )
    g.add_argument(
        "--cost-model",
        default=None,
        metavar="FILE",
        help="JSON cost model (from --calibrate); default: measured in-process compute, no overhead",
    )
    g.add_argument(
        "--task-overhead", type=parse_float, default=None, help="seconds of fixed cost per task"
    )
    g.add_argument(
        "--bandwidth",
        type=parse_float,
        default=None,
        help="bytes per second for model and results (e.g. 1.25e9 = 10 Gbit/s; default infinite)",
    )
    g.add_argument(
        "--latency", type=parse_float, default=None, help="one-way message latency, seconds"
    )
    g.add_argument(
        "--cores",
        type=parse_int,
        default=None,
        help="C: the workers share C cores (local[P] on a C-core machine); default: one core each",
    )
    g.add_argument(
        "--driver-seconds",
        type=_driver_seconds,
        default=None,
        help="driver time per result (update, dispatch), seconds or 'measured' (default: the "
        "cost model's, else 0)",
    )
    g.add_argument(
        "--message-seconds",
        type=parse_float,
        default=None,
        help="the transport's own driver CPU per task (frames and sockets, or a job's "
        "submission), seconds (default: the cost model's, else 0)",
    )
    g.add_argument(
        "--calibrate",
        action="store_true",
        help="measure the cost model on the real Spark engine (--master), with the tasks of the "
        f"first --method, and write it to --out (default {DEFAULT_COST_FILE})",
    )


def cost_model_from_args(args: argparse.Namespace) -> Any:
    """The cost model: ``--cost-model`` (or the defaults) with the flags' overrides."""
    from async_spark.engine.emulator import CostModel

    cost = CostModel.load(args.cost_model) if args.cost_model else CostModel()
    driver = args.driver_seconds
    changes = (
        ("--task-overhead", "task_overhead_seconds", args.task_overhead),
        ("--bandwidth", "bandwidth_bytes_per_second", args.bandwidth),
        ("--latency", "latency_seconds", args.latency),
        ("--cores", "cores", args.cores),
        ("--message-seconds", "message_seconds", args.message_seconds),
        ("--driver-seconds", "driver_seconds", None if driver == "measured" else driver),
    )
    for flag, field, value in changes:
        if value is None and not (flag == "--driver-seconds" and driver == "measured"):
            continue
        try:
            cost = cost.replace(**{field: value})
        except ValueError as exc:
            raise ValueError(f"{flag}: {exc}") from None
    return cost


def _run_calibration(args: argparse.Namespace) -> int:
    from async_spark.data.dataset import open_dataset
    from async_spark.solvers.config import LINEAR_METHODS
    from async_spark.solvers.emulation import calibrate
    from async_spark.solvers.validation import check_choice

    partitions = args.partitions or args.workers or 2
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"--partitions must be an integer >= 1, got {partitions!r}")
    out = args.out or DEFAULT_COST_FILE
    if Path(out).is_dir():
        raise ValueError(f"--out: with --calibrate it names a JSON file, {out!r} is a folder")
    methods = method_names(args.method)
    if not methods:
        raise ValueError("--method must name the method whose tasks --calibrate measures")
    check_choice("method", methods[0], LINEAR_METHODS)
    source, desc = open_dataset(
        args.data,
        partitions,
        format=args.format,
        num_features=args.num_features,
        standardize=args.standardize,
        loss=args.loss,
    )
    with spark_session(args.master, "async-spark emulate --calibrate", args.conf) as spark:
        cost = calibrate(
            spark,
            source,
            desc,
            loss=cast(str, desc.loss),  # --loss, "auto" resolved by the labels
            method=methods[0],
            seed=args.seed,
            out=out,
            transport=args.transport,
        )
    print(json.dumps(cost.to_dict(), indent=2, sort_keys=True))
    print(f"cost model written to {out}", file=sys.stderr)
    return 0


def _write_json(obj: Any, fh: IO[bytes]) -> None:
    fh.write((json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def run_emulate(args: argparse.Namespace) -> int:
    """Run each ``--method`` on ``--workers`` emulated workers (or calibrate with ``--calibrate``)."""
    if args.calibrate:
        return _run_calibration(args)
    from async_spark.solvers.emulation import virtual_engine_factory
    from async_spark.solvers.linear import train_linear
    from async_spark.solvers.outputs import atomic_write, write_run

    if args.workers is None:
        raise ValueError("--workers is required: the number of emulated workers P (>= 1)")
    if isinstance(args.workers, bool) or not isinstance(args.workers, int) or args.workers < 1:
        raise ValueError(f"--workers must be an integer >= 1, got {args.workers!r}")
    if args.partitions is None:
        args.partitions = args.workers
    elif args.partitions != args.workers:
        raise ValueError(
            f"--partitions ({args.partitions}) must equal --workers ({args.workers}): each "
            "emulated worker holds one block (omit --partitions)"
        )
    if getattr(args, "resume", None) is not None:
        raise ValueError("--resume is not supported by emulate (a virtual run is cheap to redo)")
    cost = cost_model_from_args(args)
    configs = train_configs(args)
    dataset = configs[0].open_data()
    rows = []
    results: list[Any] = []
    for cfg in configs:
        result = train_linear(cfg, dataset=dataset, engine_factory=virtual_engine_factory(cost))
        summary = result.summary()
        summary["emulator"] = result.engine_snapshot.get("emulator", {})
        summary["time_unit"] = "virtual seconds"
        if cfg.out is not None:
            write_run(result, cfg.out)
            atomic_write(Path(cfg.out) / "summary.json", functools.partial(_write_json, summary))
        rows.append(summary)
        results.append(result)
    print(f"# emulated: {args.workers} workers, times in virtual seconds; cost model: {cost}")
    print_results(rows, results)
    return 0

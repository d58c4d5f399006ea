"""The ASYNC experiment on this machine: asynchronous vs synchronous SGD and SAGA under stragglers.

For each number of blocks P and straggler model, the synchronous method (sgd, saga) and its
asynchronous counterpart (asgd, asaga) run for the same training budget on the same blocks, in
one Spark application with ``local[P]`` (P task slots sharing this machine's cores, so a
sleeping straggler holds a slot but no core). Objectives of snapshots are evaluated after each
run, off the clock. The figure is the speedup to the same objective:

    target   = the larger (worse) of the two final objectives, so both reach it
    speedup  = time of the synchronous run to target / time of the asynchronous run to target

Part of that speedup is algorithmic, not asynchrony: a synchronous update combines P results
into one large mini-batch step while the asynchronous method takes P small steps. So each pair
also runs *without* stragglers; ``straggler gain = speedup / speedup without stragglers`` is what
asynchrony wins against stragglers, and that is what the ceiling bounds.

**Ceiling.** The asynchronous run can at most keep the cores busy: it processes P results in the
time of a synchronous round *without* stragglers (rounds are core-bound then). So the best
possible speedup is  round time with stragglers / round time without, both measured here with the
synchronous method (``ceiling`` column). The measured speedup is reported beside it.

**Straggler delays** are multiples of the *task time on a dedicated core*: the median time of a
single gradient task run alone through Spark (dispatch to result), measured before the runs.
ASYNC measured its mean task time on workers that each had their own core; measuring it here with
8 tasks sharing 2 cores would count the queueing as task time.

Usage:
    python benchmarks/async_speedup.py [--quick] [--partitions 8,16]
        [--stragglers intensity:0.3,intensity:0.6,intensity:1.0,cloud] [--budget SECONDS]
    python benchmarks/async_speedup.py --smoke   # seconds: P = 2, tiny data, 3 s runs (no figure)
Last line: ``RESULT asaga_speedup_cloud <x>`` (P = the first of --partitions).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from async_spark.data.dataset import open_dataset
from async_spark.engine import AsyncEngine, Policy, build_session
from async_spark.engine.spark import SparkTransport
from async_spark.models.linear import init_params
from async_spark.solvers import TrainConfig, build_model, train_linear
from async_spark.solvers.methods import method as method_row
from async_spark.solvers.worker import LinearTask, TaskArgs, sample_rows

PAIRS = {"saga": "asaga", "sgd": "asgd"}


DEFAULT_DATA = "builtin:synthetic?n=100000&d=10000&nnz=50&seed=0"
SMOKE_DATA = "builtin:synthetic?n=4000&d=200&nnz=10&seed=0"


def dedicated_core_task_seconds(sc, source, desc, cfg: TrainConfig, tasks: int = 24) -> float:
    """Median dispatch-to-result time of one gradient task at a time (no queueing)."""
    model = build_model(cfg, desc)
    theta = init_params(model)
    computation = method_row(cfg.method).computation
    task = LinearTask(source, model, cfg.seed, computation)

    def args(ticket):
        rows = desc.rows_per_block[ticket.block]
        idx = sample_rows(cfg.seed, ticket.block, ticket.block_task, rows, cfg.batch_fraction)
        old = np.zeros((idx.size, *model.scalar_shape)) if computation == "saga" else None
        return TaskArgs(ticket.block_task, cfg.batch_fraction, old)

    seconds = []
    with AsyncEngine(
        SparkTransport(sc),
        task,
        num_blocks=desc.num_blocks,
        policy=Policy.asynchronous(),
        max_in_flight=1,
        initial_model=theta,
        task_args=args,
        run_name="calibrate",
    ) as eng:
        for r in eng.results():
            if r.block_task > 0:  # a block's first task loads it
                seconds.append(r.seconds)
            if len(seconds) >= tasks:
                break
    return float(statistics.median(seconds))


def time_to(snapshots: list[tuple[float, int, float]], target: float) -> float | None:
    for seconds, _, objective in snapshots:
        if objective <= target:
            return seconds
    return None


def round_seconds(sync_run) -> float:
    """Mean time between synchronous updates, the first two rounds (block loading) left out."""
    times = [t["seconds"] for t in sync_run.trace if t["version"] > 0 and t.get("accepted", True)]
    gaps = np.diff(times)[2:]
    return float(np.mean(gaps)) if gaps.size else sync_run.wall_seconds / sync_run.updates


def speedup_of(sync_run, async_run) -> float | None:
    """Time of the synchronous run to the common target over the asynchronous run's."""
    target = max(sync_run.final_objective, async_run.final_objective)
    if target >= sync_run.snapshots[0][2]:
        return None  # one of the runs made no progress at all: no common target
    ts, ta = time_to(sync_run.snapshots, target), time_to(async_run.snapshots, target)
    return ts / ta if ts and ta else None


def run_pair(
    spark,
    dataset,
    base: TrainConfig,
    sync: str,
    stragglers: str,
    budget: float,
    straggler_base: float,
    snapshots: int = 40,
):
    out = {}
    for method in (sync, PAIRS[sync]):
        cfg = dataclasses.replace(
            base,
            **{
                "method": method,
                "stragglers": stragglers,
                "straggler_base": straggler_base,
                "time_budget": budget,
                "eval_every": budget / snapshots,
            },
        )
        out[method] = train_linear(cfg, spark=spark, dataset=dataset)
    return out


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--smoke", action="store_true", help="tiny sizes, seconds: checks the script runs"
    )
    ap.add_argument("--partitions", default=None, help="comma list (default 8,16; quick: 8)")
    ap.add_argument(
        "--stragglers", default=None, help="comma list (default: ASYNC's four; quick: cloud)"
    )
    ap.add_argument(
        "--methods",
        default=None,
        help="synchronous methods, comma list (default saga,sgd; quick: saga)",
    )
    ap.add_argument(
        "--budget", type=float, default=None, help="seconds per run (default 20; quick 8)"
    )
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--batch-fraction", type=float, default=0.5)
    ap.add_argument(
        "--step",
        type=float,
        default=0.5,
        help="one constant step for both methods of a pair, as ASYNC ran them (the automatic "
        "steps differ: a synchronous round may take the larger mini-batch step)",
    )
    ap.add_argument("--l2", type=float, default=1e-4)
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    calibration_tasks, snapshots = 24, 40
    if args.smoke:
        args.quick = True
        args.partitions, args.budget = args.partitions or "2", args.budget or 3.0
        if args.data == DEFAULT_DATA:
            args.data = SMOKE_DATA
        calibration_tasks, snapshots = 6, 8
    partitions = [int(p) for p in (args.partitions or ("8" if args.quick else "8,16")).split(",")]
    models = (
        args.stragglers
        or ("cloud" if args.quick else "intensity:0.3,intensity:0.6,intensity:1.0,cloud")
    ).split(",")
    methods = (args.methods or ("saga" if args.quick else "saga,sgd")).split(",")
    budget = args.budget or (8.0 if args.quick else 20.0)

    spark = build_session(
        f"local[{max(partitions)}]", app_name="async-speedup", conf={"spark.ui.enabled": "false"}
    )
    rows = []
    try:
        for P in partitions:
            dataset = open_dataset(args.data, P, loss="logistic")
            base = TrainConfig(
                data=args.data,
                loss="logistic",
                partitions=P,
                l2=args.l2,
                batch_fraction=args.batch_fraction,
                quiet=True,
                seed=0,
            )
            for sync in methods:
                cal_cfg = dataclasses.replace(base, **{"method": sync})
                task_s = dedicated_core_task_seconds(
                    spark.sparkContext, *dataset, cal_cfg, tasks=calibration_tasks
                )
                clean = run_pair(spark, dataset, base, sync, "none", budget, task_s, snapshots)
                round_clean = round_seconds(clean[sync])
                baseline = speedup_of(clean[sync], clean[PAIRS[sync]])
                for model in models:
                    res = run_pair(spark, dataset, base, sync, model, budget, task_s, snapshots)
                    s, a = res[sync], res[PAIRS[sync]]
                    round_slow = round_seconds(s)
                    speedup = speedup_of(s, a)
                    ceiling = round_slow / round_clean
                    gain = speedup / baseline if speedup and baseline else None
                    rows.append(
                        {
                            "P": P,
                            "pair": f"{PAIRS[sync]}/{sync}",
                            "stragglers": model,
                            "task_seconds": task_s,
                            "round_clean": round_clean,
                            "round_slow": round_slow,
                            "ceiling": ceiling,
                            "speedup": speedup,
                            "speedup_without_stragglers": baseline,
                            "straggler_gain": gain,
                            "gain_of_ceiling": None if gain is None else gain / ceiling,
                            "sync_updates": s.updates,
                            "async_updates": a.updates,
                            "async_mean_staleness": a.summary()["mean_staleness"],
                            "sync_final": s.final_objective,
                            "async_final": a.final_objective,
                        }
                    )
                    r = rows[-1]

                    def fmt(x, spec=".2f"):
                        return "-" if x is None else format(x, spec)

                    print(
                        f"P={P:3d} {r['pair']:11s} {model:14s} task={task_s * 1e3:5.1f}ms "
                        f"round {round_clean:.3f}->{round_slow:.3f}s ceiling={ceiling:5.2f} "
                        f"speedup={fmt(speedup):>5s} (no stragglers {fmt(baseline)}; "
                        f"gain {fmt(gain)} = {fmt(r['gain_of_ceiling'], '.0%')} of ceiling) "
                        f"updates {s.updates}/{a.updates} staleness "
                        f"{r['async_mean_staleness']:.1f} final "
                        f"{s.final_objective:.5f}/{a.final_objective:.5f}",
                        flush=True,
                    )
    finally:
        spark.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    headline = [
        r
        for r in rows
        if r["P"] == partitions[0] and r["stragglers"] == "cloud" and r["pair"].startswith("asaga")
    ]
    value = headline[0]["speedup"] if headline and headline[0]["speedup"] else float("nan")
    print(f"RESULT asaga_speedup_cloud {value:.3f}")
    return value


if __name__ == "__main__":
    t0 = time.monotonic()
    main(sys.argv[1:])
    print(f"# {time.monotonic() - t0:.0f} s", file=sys.stderr)

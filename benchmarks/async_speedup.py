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
single gradient task run alone through Spark (dispatch to result) on the runs' transport, measured
before the runs. ASYNC measured its mean task time on workers that each had their own core;
measuring it here with 8 tasks sharing 2 cores would count the queueing as task time.

**Repeats.** Every configuration runs ``--repeats`` times (default 3; ``--smoke``: 1). A repeat
runs the pair without stragglers, then the pair under each straggler model; the two methods of
a pair swap order from one repeat to the next, so a drift of this shared machine's load falls on
both alike. The task time on a dedicated core is measured once per P and method (the straggler
delays stay the same in every repeat). Each figure is reported as the median of the repeats with
their [min, max]; the straggler gain and the ceiling are taken within a repeat (its own run
without stragglers) before the median. A repeat without a common target has no speedup: the
median is of the repeats that have one, and the summary says how many.

Usage:
    python benchmarks/async_speedup.py [--quick] [--partitions 8,16] [--repeats 3]
        [--stragglers intensity:0.3,intensity:0.6,intensity:1.0,cloud] [--budget SECONDS]
    python benchmarks/async_speedup.py --smoke   # seconds: P = 2, tiny data, 1.5 s runs, 1 repeat
Last line: ``RESULT asaga_speedup_cloud <x>``: the median over the repeats of ASAGA's speedup
over SAGA under the cloud model (P = the first of --partitions).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import format_median_range, median_range, print_table  # noqa: E402

from async_spark.data.dataset import open_dataset  # noqa: E402
from async_spark.engine import AsyncEngine, Policy, build_session  # noqa: E402
from async_spark.engine.resident import ResidentTransport  # noqa: E402
from async_spark.engine.spark import SparkTransport  # noqa: E402
from async_spark.models.linear import init_params  # noqa: E402
from async_spark.solvers import TrainConfig, build_model, train_linear  # noqa: E402
from async_spark.solvers.methods import method as method_row  # noqa: E402
from async_spark.solvers.worker import LinearTask, TaskArgs, sample_rows  # noqa: E402

PAIRS = {"saga": "asaga", "sgd": "asgd"}


DEFAULT_DATA = "builtin:synthetic?n=100000&d=10000&nnz=50&seed=0"
SMOKE_DATA = "builtin:synthetic?n=4000&d=200&nnz=10&seed=0"


def make_transport(spark, name: str):
    """The transport the runs use (``TrainConfig.transport``), for the calibration."""
    if name == "resident":
        return ResidentTransport(spark)
    return SparkTransport(spark.sparkContext)


def dedicated_core_task_seconds(spark, source, desc, cfg: TrainConfig, tasks: int = 24) -> float:
    """Median dispatch-to-result time of one gradient task at a time (no queueing), on the
    transport the runs use: a straggler's delay is a multiple of the task time the run sees (a
    job-per-task calibration made it ~115 ms where a resident task takes a few, so every delay
    was 30-40 times the intended multiple)."""
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
        make_transport(spark, cfg.transport),
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
    reverse: bool = False,
):
    """The synchronous method and its asynchronous counterpart, one after the other (the
    asynchronous one first when ``reverse``), each for ``budget`` seconds of training."""
    out = {}
    pair = (sync, PAIRS[sync])
    for method in reversed(pair) if reverse else pair:
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


# one repeat's figures of a configuration; over the repeats each is summarized by its median
FIGURES = (
    "round_clean",
    "round_slow",
    "ceiling",
    "speedup",
    "speedup_without_stragglers",
    "straggler_gain",
    "gain_of_ceiling",
    "sync_updates",
    "async_updates",
    "async_mean_staleness",
    "sync_final",
    "async_final",
)


def run_figures(clean, res, sync: str) -> dict[str, float | None]:
    """One repeat's figures from its pair without stragglers (``clean``) and with (``res``)."""
    s, a = res[sync], res[PAIRS[sync]]
    round_clean, round_slow = round_seconds(clean[sync]), round_seconds(s)
    speedup = speedup_of(s, a)
    baseline = speedup_of(clean[sync], clean[PAIRS[sync]])
    ceiling = round_slow / round_clean
    gain = speedup / baseline if speedup and baseline else None
    return {
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


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A configuration's figures over its repeats: each figure's median (``None`` when no repeat
    has it), its ``[min, max]`` under ``<figure>_range`` and the repeats themselves under
    ``runs``."""
    out: dict[str, Any] = {"repeats": len(runs)}
    for key in FIGURES:
        med, lo, hi, n = median_range(r[key] for r in runs)
        out[key] = med if n else None
        out[f"{key}_range"] = [lo, hi] if n else None
        out[f"{key}_runs_with"] = n
    out["runs"] = runs
    return out


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def _print_summary(rows: list[dict[str, Any]]) -> None:
    def span(r, key, spec=".2f"):
        return format_median_range([run[key] for run in r["runs"]], spec)

    print(f"medians [min, max] of {rows[0]['repeats'] if rows else 0} repeats:")
    print_table(
        (
            "P",
            "pair",
            "stragglers",
            "task ms",
            "round clean s",
            "round slow s",
            "ceiling",
            "speedup",
            "no stragglers",
            "gain",
            "of ceiling",
            "sync updates",
            "async updates",
            "staleness",
            "sync final",
            "async final",
        ),
        (
            (
                r["P"],
                r["pair"],
                r["stragglers"],
                f"{r['task_seconds'] * 1e3:.1f}",
                span(r, "round_clean", ".3f"),
                span(r, "round_slow", ".3f"),
                span(r, "ceiling"),
                span(r, "speedup"),
                span(r, "speedup_without_stragglers"),
                span(r, "straggler_gain"),
                span(r, "gain_of_ceiling", ".0%"),
                span(r, "sync_updates", ".0f"),
                span(r, "async_updates", ".0f"),
                span(r, "async_mean_staleness", ".1f"),
                span(r, "sync_final", ".5f"),
                span(r, "async_final", ".5f"),
            )
            for r in rows
        ),
    )


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
        help="one step for both methods of a pair, as ASYNC ran them (SAGA's rule constant, "
        "SGD's gamma/sqrt(k); the automatic steps differ: a synchronous round may take the "
        "larger mini-batch step)",
    )
    ap.add_argument("--l2", type=float, default=1e-4)
    ap.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="runs of every configuration, the pair's order swapped each time; figures are "
        "medians with [min, max] (default 3; smoke: 1)",
    )
    ap.add_argument(
        "--json", default=None, help="also write the figures (medians, ranges, runs) to this file"
    )
    args = ap.parse_args(argv)
    repeats = args.repeats if args.repeats is not None else (1 if args.smoke else 3)
    if repeats < 1:
        ap.error(f"--repeats must be at least 1, got {repeats}")
    calibration_tasks, snapshots = 24, 40
    if args.smoke:
        args.quick = True
        args.partitions, args.budget = args.partitions or "2", args.budget or 1.5
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
                step=args.step,  # one step for both methods of a pair (SGD's rule: sqrt, ASYNC's)
                quiet=True,
                seed=0,
            )
            for sync in methods:
                pair = f"{PAIRS[sync]}/{sync}"
                cal_cfg = dataclasses.replace(base, **{"method": sync})
                task_s = dedicated_core_task_seconds(
                    spark, *dataset, cal_cfg, tasks=calibration_tasks
                )
                runs: dict[str, list[dict[str, Any]]] = {model: [] for model in models}
                for rep in range(repeats):
                    reverse = rep % 2 == 1  # swap the pair's order: drift hits both alike
                    clean = run_pair(
                        spark, dataset, base, sync, "none", budget, task_s, snapshots, reverse
                    )
                    for model in models:
                        res = run_pair(
                            spark, dataset, base, sync, model, budget, task_s, snapshots, reverse
                        )
                        r = run_figures(clean, res, sync)
                        runs[model].append(r)
                        print(
                            f"[{rep + 1}/{repeats}] P={P:3d} {pair:11s} {model:14s} "
                            f"task={task_s * 1e3:5.1f}ms round {r['round_clean']:.3f}->"
                            f"{r['round_slow']:.3f}s ceiling={r['ceiling']:5.2f} "
                            f"speedup={_fmt(r['speedup']):>5s} (no stragglers "
                            f"{_fmt(r['speedup_without_stragglers'])}; gain "
                            f"{_fmt(r['straggler_gain'])} = {_fmt(r['gain_of_ceiling'], '.0%')} "
                            f"of ceiling) updates {r['sync_updates']}/{r['async_updates']} "
                            f"staleness {r['async_mean_staleness']:.1f} final "
                            f"{r['sync_final']:.5f}/{r['async_final']:.5f}",
                            flush=True,
                        )
                for model in models:
                    rows.append(
                        {
                            "P": P,
                            "pair": pair,
                            "stragglers": model,
                            "task_seconds": task_s,
                            **summarize(runs[model]),
                        }
                    )
    finally:
        spark.stop()
    _print_summary(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    headline = [
        r
        for r in rows
        if r["P"] == partitions[0] and r["stragglers"] == "cloud" and r["pair"].startswith("asaga")
    ]
    value = headline[0]["speedup"] if headline and headline[0]["speedup"] else float("nan")
    if headline:
        print(
            f"asaga/saga, cloud, P={partitions[0]}: speedup "
            f"{format_median_range([r['speedup'] for r in headline[0]['runs']], '.3f')}"
        )
    print(f"RESULT asaga_speedup_cloud {value:.3f}")
    return value


if __name__ == "__main__":
    t0 = time.monotonic()
    main(sys.argv[1:])
    print(f"# {time.monotonic() - t0:.0f} s", file=sys.stderr)

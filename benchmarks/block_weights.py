"""Asynchronous SGD and momentum with and without block weights, side by side in one run.

One result per update makes a block that answers more often count more, so asynchronous SGD and
momentum head for the blocks' losses weighted by their speeds, not the objective
(``solvers.loop.BlockShares``; ``docs/steps.md``, "Block weights"). This runs each method with
defaults on a ``local-cluster`` of two executors, alternately with block weights (the default)
and without (``block_weights=False``), unthrottled and with one executor throttled by
SIGSTOP/SIGCONT (``--duty`` of its speed), and reports per condition and method the medians
(ranges) over ``--repeats`` pairs of: seconds to 1e-3 and 1e-4 relative suboptimality from the
call (fixed costs in; "> budget" when not reached), the relative suboptimality at the end of the
budget, and the slow block's share of the results.

Usage: python benchmarks/block_weights.py [--smoke] [--datasets rcv1-like-2e4]
       [--methods asgd,aag] [--repeats 3] [--budget S] [--duty 0.5]

Last lines: ``RESULT block_weights_end_gap_ratio_unthrottled <x>`` and
``RESULT block_weights_end_gap_ratio_throttled <x>``: the median over methods and pairs of the
gap at the end without weights over the gap with them (> 1: the weights end closer).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402
from _common import (  # noqa: E402
    Throttle,
    executor_pids,
    format_median_range,
    print_table,
    spark_session,
)

from async_spark.solvers.config import TrainConfig  # noqa: E402
from async_spark.solvers.linear import train_linear  # noqa: E402

TARGETS = (1e-3, 1e-4)


def one_run(
    spark: Any,
    spec: Any,
    X: Any,
    y: np.ndarray,
    star: float,
    method: str,
    weights: bool,
    budget: float,
) -> dict[str, Any]:
    """One default run: seconds to each target from the call (None: not reached), the gap at
    the end, and each block's share of the results (the run's own count)."""
    cfg = TrainConfig(
        data=(X, y),
        loss=spec.loss,
        l2=spec.l2,
        l1=spec.l1,
        method=method,
        time_budget=budget,
        eval_every=budget / 100.0,
        block_weights=weights,
        quiet=True,
    )
    r = train_linear(cfg, spark=spark)
    gaps = [(t, (f - star) / abs(star)) for t, _, f in r.snapshots]
    times = {
        target: next((r.setup_seconds + t for t, g in gaps if g <= target), None)
        for target in TARGETS
    }
    tasks = [b["tasks"] for b in r.engine_snapshot["blocks"]]
    return {"times": times, "end": gaps[-1][1], "shares": [t / sum(tasks) for t in tasks]}


def measure(
    spark: Any, spec: Any, methods: list[str], repeats: int, budget: float
) -> dict[tuple[str, bool], list[dict[str, Any]]]:
    X, y = peers.make_data(spec, peers.SCORE_SEED)
    star = peers.Objectives(X, y, spec).star("std-pop")
    out: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for m in methods:  # warm the Python workers (not scored)
        one_run(spark, spec, X, y, star, m, True, min(1.0, budget))
    for _ in range(repeats):
        for m in methods:
            for weights in (True, False):  # alternate: drift of the shared machine hits both
                out.setdefault((m, weights), []).append(
                    one_run(spark, spec, X, y, star, m, weights, budget)
                )
    return out


def report(
    condition: str, spec: Any, runs: dict[tuple[str, bool], list[dict[str, Any]]], budget: float
) -> list[float]:
    rows, ratios = [], []
    for (m, weights), rs in runs.items():
        cells = []
        for target in TARGETS:
            hits = [r["times"][target] for r in rs]
            if any(h is None for h in hits):
                reached = sum(h is not None for h in hits)
                cells.append(f"> {budget:g} ({reached}/{len(hits)} reached)")
            else:
                cells.append(format_median_range(hits))
        slow = [min(r["shares"]) for r in rs]
        rows.append(
            [
                f"{spec.name} {m}",
                "on" if weights else "off",
                *cells,
                format_median_range([r["end"] for r in rs], ".1e"),
                format_median_range(slow, ".3f"),
            ]
        )
        if weights:
            off = runs[(m, False)]
            ratios += [o["end"] / w["end"] for o, w in zip(off, rs, strict=True) if w["end"] > 0]
    print(f"\n{condition}: medians (ranges) over {len(next(iter(runs.values())))} runs each")
    print_table(
        ["run", "weights", "t(1e-3) s", "t(1e-4) s", "gap at the end", "slow block's share"], rows
    )
    return ratios


def main(argv: list[str] | None = None) -> tuple[float, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="seconds: a tiny dataset, one pair")
    ap.add_argument("--master", default="local-cluster[2,1,2048]")
    ap.add_argument("--datasets", default="rcv1-like-2e4")
    ap.add_argument("--methods", default="asgd,aag")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--budget", type=float, default=None, help="seconds per run (default: the suite's)"
    )
    ap.add_argument("--duty", type=float, default=0.5)
    ap.add_argument("--period", type=float, default=0.1)
    args = ap.parse_args(argv)
    every = {d.name: d for s in peers.SUITES.values() for d in s}
    if args.smoke:
        specs = [peers.Data("sparse-2e3", "sparse", 2000, 1000, 1e-3, 1.0, nnz=20)]
        args.repeats, args.methods = 1, "asgd"
    else:
        unknown = [n for n in args.datasets.split(",") if n not in every]
        if unknown:
            raise SystemExit(f"--datasets: unknown {unknown}; choose from {sorted(every)}")
        specs = [every[n] for n in args.datasets.split(",")]
    methods = args.methods.split(",")
    spark = spark_session(args.master, "block-weights")
    ratios: dict[str, list[float]] = {"unthrottled": [], "throttled": []}
    try:
        for spec in specs:
            budget = args.budget or spec.budget
            print(f"== {spec.name}: n={spec.n} d={spec.d} l2={spec.l2}, budget {budget:g} s")
            runs = measure(spark, spec, methods, args.repeats, budget)
            ratios["unthrottled"] += report("unthrottled", spec, runs, budget)
            execs = executor_pids(spark.sparkContext.applicationId)
            if not execs:
                raise RuntimeError("no executor JVM of this application (is this a cluster?)")
            victim = sorted(execs)[0]
            with Throttle(execs[victim], duty=args.duty, period=args.period):
                runs = measure(spark, spec, methods, args.repeats, budget)
            cond = f"executor {victim} throttled to {args.duty:.0%}"
            ratios["throttled"] += report(cond, spec, runs, budget)
    finally:
        spark.stop()
    out = tuple(statistics.median(r) if r else math.nan for r in ratios.values())
    print(f"RESULT block_weights_end_gap_ratio_unthrottled {out[0]:.3f}")
    print(f"RESULT block_weights_end_gap_ratio_throttled {out[1]:.3f}")
    return out  # type: ignore[return-value]


if __name__ == "__main__":
    main()

"""What a user sees of the transports: ASAGA and SAGA with default options on both, side by side.

Standardized breast cancer (569 x 30), 4 partitions, l2 = 0.01, a fixed training budget; for each
transport and method: updates made, final objective, the time of the whole call (session start
excluded, the resident job's launch and the off-clock evaluation included).

Each method runs on the two transports back to back, ``--repeats`` times (default 3; ``--smoke``:
1); the transport that goes first alternates from one repeat to the next, so a drift of this
shared machine's load falls on both alike. Every figure is the median of the repeats with their
[min, max]; the first resident run of the session also pays the first ``mapInArrow`` job's start
(Python workers, Arrow), which shows in the range of its "call s".

Usage: python benchmarks/transport_race.py [--budget 10] [--master local[4]] [--repeats 3] [--smoke]
Last line: ``RESULT resident_vs_jobs_updates_asaga <x>``: the median over the repeats of ASAGA's
updates on the resident transport over its updates on the job transport in the same repeat.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import format_median_range  # noqa: E402

from async_spark.data.dataset import open_dataset  # noqa: E402
from async_spark.engine import build_session  # noqa: E402
from async_spark.solvers import TrainConfig, train_linear  # noqa: E402

TRANSPORTS = ("resident", "jobs")
METHODS = ("asaga", "saga")


def transport_order(repeat: int) -> tuple[str, ...]:
    """The transports in the order they run in repeat ``repeat`` (0-based): swapped each time."""
    return TRANSPORTS if repeat % 2 == 0 else TRANSPORTS[::-1]


def updates_ratio(runs: list[dict[tuple[str, str], dict[str, float]]], method: str) -> float:
    """The median over the repeats of ``method``'s updates on the resident transport over its
    updates on the job transport in the same repeat (at least one update assumed there)."""
    return statistics.median(
        r["resident", method]["updates"] / max(1, r["jobs", method]["updates"]) for r in runs
    )


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=10.0, help="training seconds per run")
    ap.add_argument("--master", default="local[4]")
    ap.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="runs of every transport and method, the transports' order swapped each time; "
        "figures are medians with [min, max] (default 3; smoke: 1)",
    )
    ap.add_argument("--smoke", action="store_true", help="1 s runs, 1 repeat")
    args = ap.parse_args(argv)
    budget = 1.0 if args.smoke else args.budget
    repeats = args.repeats if args.repeats is not None else (1 if args.smoke else 3)
    if repeats < 1:
        ap.error(f"--repeats must be at least 1, got {repeats}")
    spark = build_session(
        args.master, app_name="transport-race", conf={"spark.ui.enabled": "false"}
    )
    runs: list[dict[tuple[str, str], dict[str, float]]] = []
    try:
        data = open_dataset("builtin:breast_cancer", 4, standardize=True, loss="logistic")
        print("| repeat | transport | method | updates | final objective | training s | call s |")
        print("|---|---|---|---|---|---|---|")
        for rep in range(repeats):
            runs.append({})
            for method in METHODS:
                for transport in transport_order(rep):
                    cfg = TrainConfig(
                        data="builtin:breast_cancer",
                        method=method,
                        partitions=4,
                        l2=1e-2,
                        quiet=True,
                        time_budget=budget,
                        eval_every=0.5,
                        transport=transport,
                    )
                    t0 = time.perf_counter()
                    r = train_linear(cfg, spark=spark, dataset=data)
                    call = time.perf_counter() - t0
                    runs[-1][transport, method] = {
                        "updates": r.updates,
                        "final": r.final_objective,
                        "training": r.wall_seconds,
                        "call": call,
                    }
                    print(
                        f"| {rep + 1} | {transport} | {method} | {r.updates} | "
                        f"{r.final_objective:.7f} | {r.wall_seconds:.1f} | {call:.1f} |",
                        flush=True,
                    )
    finally:
        spark.stop()
    print(f"\nmedians [min, max] of {repeats} repeats:\n")
    print("| transport | method | updates | final objective | training s | call s |")
    print("|---|---|---|---|---|---|")
    for transport in TRANSPORTS:
        for method in METHODS:
            cells = [
                format_median_range((r[transport, method][key] for r in runs), spec)
                for key, spec in (
                    ("updates", ".0f"),
                    ("final", ".7f"),
                    ("training", ".1f"),
                    ("call", ".1f"),
                )
            ]
            print(f"| {transport} | {method} | {' | '.join(cells)} |")
    pairs = [updates_ratio([r], "asaga") for r in runs]
    ratio = updates_ratio(runs, "asaga")
    print(
        f"\nasaga updates, resident / jobs, by repeat: {', '.join(f'{x:.1f}' for x in pairs)}; "
        f"median {format_median_range(pairs, '.1f')}"
    )
    print(f"RESULT resident_vs_jobs_updates_asaga {ratio:.1f}")
    return ratio


if __name__ == "__main__":
    main(sys.argv[1:])

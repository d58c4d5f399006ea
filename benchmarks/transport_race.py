"""What a user sees of the transports: ASAGA and SAGA with default options on both, side by side.

Standardized breast cancer (569 x 30), 4 partitions, l2 = 0.01, a fixed training budget; for each
transport and method: updates made, final objective, the time of the whole call (session start
excluded, the resident job's launch and the off-clock evaluation included).

Usage: python benchmarks/transport_race.py [--budget 10] [--master local[4]] [--smoke]
Last line: ``RESULT resident_vs_jobs_updates_asaga <updates on resident / updates on jobs>``.
"""

from __future__ import annotations

import argparse
import time

from async_spark.data.dataset import open_dataset
from async_spark.engine import build_session
from async_spark.solvers import TrainConfig, train_linear


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=10.0, help="training seconds per run")
    ap.add_argument("--master", default="local[4]")
    ap.add_argument("--smoke", action="store_true", help="2 s runs")
    args = ap.parse_args()
    budget = 2.0 if args.smoke else args.budget
    spark = build_session(
        args.master, app_name="transport-race", conf={"spark.ui.enabled": "false"}
    )
    try:
        data = open_dataset("builtin:breast_cancer", 4, standardize=True, loss="logistic")
        updates = {}
        print("| transport | method | updates | final objective | training s | call s |")
        print("|---|---|---|---|---|---|")
        for transport in ("resident", "jobs"):
            for method in ("asaga", "saga"):
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
                updates[transport, method] = r.updates
                print(
                    f"| {transport} | {method} | {r.updates} | {r.final_objective:.7f} | "
                    f"{r.wall_seconds:.1f} | {call:.1f} |",
                    flush=True,
                )
    finally:
        spark.stop()
    ratio = updates["resident", "asaga"] / max(1, updates["jobs", "asaga"])
    print(f"RESULT resident_vs_jobs_updates_asaga {ratio:.1f}")


if __name__ == "__main__":
    main()

"""What the convergence test changes for a user: ``async-spark train --method asaga`` (the
default method until ``auto`` chose L-BFGS, session 33) with default options on built-in data,
with the test (``--tol 1e-6``, the default) and without it (``--tol 0``, what
every run did before), side by side in one session, alternating which goes first.

For each dataset and side: seconds from the call to the returned model (data opened, step chosen,
tasks started: the fixed costs are in), what stopped the run, its updates, and the returned
model's relative suboptimality against scipy's L-BFGS-B optimum of the same objective, computed
once per dataset off the clock. Both sides have the command line's 20 s training budget.

Usage: python benchmarks/tol_stop.py [--datasets breast_cancer,digits,...] [--repeats 3]
    [--master local[4]] [--smoke]
Last lines: ``RESULT tol_vs_no_tol_call_seconds <median over datasets of the median ratio, with
the test / without>`` and ``RESULT tol_final_gap_max <the largest final relative suboptimality
of a run that the test stopped>``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

from _common import format_median_range, median_range, print_table, spark_session

# name -> (data, loss, l2): what a user passes for each (digits has ten classes: --loss
# softmax); l2 1e-4 is the command line's default
DATASETS = {
    "breast_cancer": ("builtin:breast_cancer", "logistic", 1e-4),
    "breast_cancer_l2_0.01": ("builtin:breast_cancer", "logistic", 1e-2),
    "digits": ("builtin:digits", "softmax", 1e-4),
    "synthetic": ("builtin:synthetic", "logistic", 1e-4),  # the command line's default data
}
SIDES = {"tol 1e-6 (default)": 1e-6, "tol 0 (no test)": 0.0}


def _run(
    spark: Any, data: str, loss: str, l2: float, tol: float, budget: float | None
) -> dict[str, Any]:
    from async_spark.solvers import TrainConfig, train_linear

    config = TrainConfig(
        data=data, loss=loss, method="asaga", l2=l2, tol=tol, time_budget=budget, quiet=True
    )
    start = time.perf_counter()
    result = train_linear(config, spark=spark)
    seconds = time.perf_counter() - start
    return {"result": result, "call": seconds}


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--repeats", type=int, default=3, help="runs of each side per dataset")
    ap.add_argument("--master", default="local[4]")
    ap.add_argument(
        "--smoke", action="store_true", help="seconds: breast cancer (l2 0.01) once, a 3 s budget"
    )
    args = ap.parse_args(argv)
    names = args.datasets.split(",")
    unknown = sorted(set(names) - set(DATASETS))
    if unknown:
        raise SystemExit(f"--datasets: unknown {unknown}; choose from {sorted(DATASETS)}")
    budget = None  # the command line's: 20 s when no other stop is given
    if args.smoke:
        names, args.repeats, args.master = ["breast_cancer_l2_0.01"], 1, "local[2]"
        # long enough for the test to stop the run on a loaded machine (idle: about 2 s)
        budget = 6.0

    from async_spark.reporting.reference import reference_optimum, relative_suboptimality

    spark = spark_session(args.master, "tol-stop")
    rows, ratios, gaps = [], [], []
    try:
        _run(spark, *DATASETS[names[0]], 0.0, 1.0)  # the session's first job pays its start
        for name in names:
            data, loss, l2 = DATASETS[name]
            runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
            order = list(SIDES)
            for _ in range(args.repeats):
                for side in order:
                    runs[side].append(_run(spark, data, loss, l2, SIDES[side], budget))
                order.reverse()
            first = runs[order[0]][0]["result"]
            ref = reference_optimum(
                first.source, first.model, dataset_id=first.descriptor.dataset_id
            )
            f_star = ref.objective
            calls = {}
            for side, done in runs.items():
                call = [r["call"] for r in done]
                gap = [relative_suboptimality(r["result"].final_objective, f_star) for r in done]
                stopped = sorted({r["result"].stopped_by for r in done})
                updates = [float(r["result"].updates) for r in done]
                calls[side] = median_range(call)[0]
                gaps.extend(
                    g
                    for g, r in zip(gap, done, strict=True)
                    if r["result"].stopped_by == "tolerance"
                )
                rows.append(
                    [
                        name,
                        side,
                        format_median_range(call),
                        format_median_range(updates, ".0f"),
                        "/".join(stopped),
                        format_median_range(gap, ".1e"),
                    ]
                )
                print(f"  {name} {side}: call {call}, gaps {gap}, {stopped}", flush=True)
            with_test, without = calls["tol 1e-6 (default)"], calls["tol 0 (no test)"]
            ratios.append(with_test / without)
            print(f"  {name}: F* = {f_star:.10g} ({ref['method']})", flush=True)
    finally:
        spark.stop()
    print(f"async-spark train's defaults, {args.master}, {args.repeats} run(s) per side:")
    print_table(
        ["dataset", "side", "call s", "updates", "stopped by", "final rel. gap"],
        rows,
    )
    print(f"RESULT tol_vs_no_tol_call_seconds {median_range(ratios)[0]:.3f}")
    print(f"RESULT tol_final_gap_max {max(gaps, default=math.nan):.3e}")


if __name__ == "__main__":
    main(sys.argv[1:])

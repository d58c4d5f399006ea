"""Momentum on the engine: updates to a target for SGD, HB and AG, synchronous and asynchronous.

Problem: L2-regularized logistic regression on scikit-learn's breast cancer data, standardized,
l2 = 1e-2, where the curvature estimated from the data gives kappa = L / mu of about 330
(ill-conditioned, kappa >= 100). Every method reads full blocks (batch fraction 1), so the only
noise is staleness. HB and AG use ``--step auto`` (alpha, beta from (mu, L)); SGD uses the
constant step 1/L (the best constant step for GD on an L-smooth function, a fair baseline).

Counts the model updates needed to reach relative suboptimality 1e-3 (against scikit-learn's
optimum), synchronously (one update per round of P blocks) and asynchronously (one update per
result, P blocks in flight on ``local[P]``), and for asynchronous momentum with the staleness
damping beta / (1 + c * staleness), c = 0.5.

Usage: python benchmarks/momentum_engine.py [--quick] [--partitions 4]
       python benchmarks/momentum_engine.py --smoke   # seconds: SGD, AG, AAG to 5e-2 on P = 2
Last line: ``RESULT ag_vs_sgd_updates_sync <sgd updates / ag updates>``.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from async_spark.data.dataset import open_dataset
from async_spark.engine import build_session
from async_spark.models.linear import LinearModel, objective
from async_spark.solvers import TrainConfig, train_linear
from async_spark.solvers.momentum import gram_max_eigenvalue

L2 = 1e-2


def optimum(source, desc) -> float:
    from sklearn.linear_model import LogisticRegression

    blocks = [source.load(p) for p in range(desc.num_blocks)]
    X = np.vstack([b.X for b in blocks])
    y = np.concatenate([b.y for b in blocks])
    clf = LogisticRegression(C=1.0 / (len(y) * L2), tol=1e-12, max_iter=100_000).fit(X, y)
    theta = np.r_[clf.coef_.ravel(), clf.intercept_]
    return objective(LinearModel("logistic", desc.d, l2=L2), theta, blocks)


def updates_to(result, target: float) -> int | None:
    for _, version, value in result.snapshots:
        if value <= target:
            return version
    return None


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--smoke", action="store_true", help="tiny sizes, seconds: checks the script runs"
    )
    ap.add_argument("--partitions", type=int, default=None, help="default 4 (smoke: 2)")
    ap.add_argument("--tolerance", type=float, default=None, help="default 1e-3 (smoke: 5e-2)")
    args = ap.parse_args(argv)
    P = args.partitions or (2 if args.smoke else 4)
    args.tolerance = args.tolerance or (5e-2 if args.smoke else 1e-3)
    max_updates = 120 if args.smoke else 300 if args.quick else 600
    dataset = open_dataset("builtin:breast_cancer", P, standardize=True, loss="logistic")
    best = optimum(*dataset)
    target = best * (1 + args.tolerance)
    L = 0.25 * gram_max_eigenvalue(*dataset) + L2
    print(
        f"breast cancer, standardized, l2={L2}: L={L:.3f} mu={L2} kappa={L / L2:.0f}; "
        f"optimum {best:.8f}; target {target:.8f}"
    )

    runs = [
        ("sgd", dict(step=1.0 / L, step_rule="constant")),
        ("hb", {}),
        ("ag", {}),
        ("asgd", dict(step=1.0 / L, step_rule="constant")),
        ("ahb", {}),
        ("aag", {}),
        ("ahb", dict(momentum_damping=0.5)),
        ("aag", dict(momentum_damping=0.5)),
    ]
    if args.smoke:  # the RESULT's two and one asynchronous momentum run
        runs = [runs[0], runs[2], runs[5]]
    spark = build_session(
        f"local[{P}]", app_name="momentum-engine", conf={"spark.ui.enabled": "false"}
    )
    figures = {}
    try:
        print(
            f"{'method':18s} {f'updates to {args.tolerance:g}':>16s} {'final rel. gap':>15s} "
            f"{'mean staleness':>15s}"
        )
        for method, extra in runs:
            cfg = TrainConfig(
                data="builtin:breast_cancer",
                method=method,
                partitions=P,
                batch_fraction=1.0,
                l2=L2,
                max_updates=max_updates,
                quiet=True,
                eval_every=1e-9,
                **extra,
            )
            r = train_linear(cfg, spark=spark, dataset=dataset)
            k = updates_to(r, target)
            name = method + (
                f" damp={extra['momentum_damping']}" if "momentum_damping" in extra else ""
            )
            figures[name] = k
            gap = (r.final_objective - best) / best
            print(
                f"{name:18s} {str(k) if k else '> ' + str(max_updates):>16s} {gap:15.2e} "
                f"{r.summary()['mean_staleness']:15.2f}",
                flush=True,
            )
    finally:
        spark.stop()
    sgd, ag = figures.get("sgd"), figures.get("ag")
    ratio = (sgd / ag) if sgd and ag else float("nan")
    print(f"RESULT ag_vs_sgd_updates_sync {ratio:.2f}")
    return ratio


if __name__ == "__main__":
    main(sys.argv[1:])

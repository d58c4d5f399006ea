"""Updates to target over a grid of step scales and momenta, in one process (no Spark).

Runs each of our methods on the in-process transport (the count of updates to 1e-3 relative
suboptimality is free of Spark's timing) on standardized dense AR(1) data (the data of the
earlier ``peers.py``), over step scales in units of 1/L_avg and momenta, one line per point.
``F*`` is the raw objective's optimum from ``peers.Objectives`` (scikit-learn newton-cg).

Usage: python benchmarks/peers_sweep.py [--methods saga,asaga,ag,aag] [--scales 1,2,3]
  [--momenta 0,0.3,0.5,0.7] [--batch-fraction 0.5] [--max-updates 400]
       python benchmarks/peers_sweep.py --smoke   # seconds: SAGA and AG, n = 2000, target 1e-2
Last line: ``RESULT fewest_updates_to_target <count>`` (the best point of the sweep).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
import tempfile

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import eigsh
from scipy.special import expit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from peers import Data, Objectives  # noqa: E402

from async_spark.data.dataset import open_dataset  # noqa: E402
from async_spark.solvers.config import MOMENTUM_METHODS, TrainConfig  # noqa: E402
from async_spark.solvers.linear import train_linear  # noqa: E402


def make_dense(n: int, d: int, seed: int, rho: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Standardized AR(1)-correlated Gaussian features, logistic labels in {0, 1}."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    for j in range(1, d):
        X[:, j] = rho * X[:, j - 1] + math.sqrt(1 - rho * rho) * X[:, j]
    X -= X.mean(axis=0)
    X /= X.std(axis=0)
    w = rng.standard_normal(d)
    w *= 2.5 / float(np.std(X @ w))
    y = (rng.random(n) < expit(X @ w + 0.5)).astype(np.float64)
    return X, y


def l_avg(X: np.ndarray) -> float:
    """Largest eigenvalue of X~'X~/(4n), X~ = [X, 1] (the averaged smoothness)."""
    n = X.shape[0]
    Xt = sp.hstack([sp.csr_matrix(X), np.ones((n, 1))]).tocsr()
    return float(eigsh((Xt.T @ Xt) / (4.0 * n), k=1, return_eigenvectors=False)[0])


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int | None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="saga,asaga,asgd,ag,aag")
    ap.add_argument("--scales", type=_floats, default=[1.0, 1.5, 2.0, 3.0, 4.0])
    ap.add_argument("--momenta", type=_floats, default=[0.3, 0.5, 0.7])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=50)
    ap.add_argument("--l2", type=float, default=1e-4)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--batch-fraction", type=float, default=0.5)
    ap.add_argument("--max-updates", type=int, default=400)
    ap.add_argument("--target", type=float, default=1e-3)
    ap.add_argument(
        "--smoke", action="store_true", help="tiny sizes, seconds: checks the script runs"
    )
    args = ap.parse_args(argv)
    if args.smoke:
        args.methods, args.scales, args.momenta = "saga,ag", [1.0, 2.0], [0.5]
        args.n, args.max_updates, args.target = 2000, 150, 1e-2
    X, y = make_dense(args.n, args.d, 0)
    spec = Data("dense", "dense", args.n, args.d, args.l2, 0.0)
    f_star, L = Objectives(X, y, spec).star("raw"), l_avg(X)
    print(f"n={args.n} d={args.d} P={args.partitions} b={args.batch_fraction} L_avg={L:.4f}")
    best: int | None = None
    with tempfile.TemporaryDirectory() as tmp:
        ds = open_dataset((X, y), args.partitions, loss="logistic", staging_dir=tmp, dense=None)
        for method in args.methods.split(","):
            momenta: list[float | None] = (
                list(args.momenta) if method in MOMENTUM_METHODS else [None]
            )
            for scale, beta in itertools.product(args.scales, momenta):
                cfg = TrainConfig(
                    method=method,
                    loss="logistic",
                    l2=args.l2,
                    step=scale / L,
                    momentum=beta,
                    batch_fraction=args.batch_fraction,
                    partitions=args.partitions,
                    max_updates=args.max_updates,
                    eval_every=1e-9,  # a snapshot after every update
                    quiet=True,
                )
                r = train_linear(cfg, dataset=ds)
                hit = next(
                    (v for _, v, f in r.snapshots if (f - f_star) / f_star <= args.target),
                    None,
                )
                rel = (r.final_objective - f_star) / f_star
                label = f"{method} scale {scale:g}" + (
                    "" if beta is None else f" momentum {beta:g}"
                )
                print(f"{label}: updates to target {hit}, final rel {rel:.1e}", flush=True)
                if hit is not None and (best is None or hit < best):
                    best = hit
    print(f"RESULT fewest_updates_to_target {best}")
    return best


if __name__ == "__main__":
    main()

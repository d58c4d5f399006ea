"""How hard each dataset of the race is for a first-order method: the condition number of the
objective in the coordinates a run trains in.

For each dataset of ``peers.py``'s suites (binary logistic; softmax data as its one-vs-rest
bound) and each of three coordinate systems, it prints

* ``L = lambda_max(X~^T X~ / n) / 4 + l2`` with ``x~ = (x, 1)`` (logistic curvature 1/4), the
  smoothness that bounds a whole-block (gradient descent, Nesterov) step,
* ``L_max = max ||x~_i||^2 / 4 + l2``, the one-row smoothness that bounds SAGA's step,
* ``kappa = L / l2`` (the iterations per e-fold of gradient descent; Nesterov: its square root)
  and ``kappa_max = L_max / l2`` (SAGA's per-row term),

in: ``raw`` (the user's columns), ``std`` (the columns divided by their population standard
deviation and, for dense data only, centered: what the library trains on by default; sparse
data is scaled without centering) and ``std-centered`` (sparse data scaled *and* implicitly
centered, the matrix ``(X - 1 m^T) S^-1`` applied without forming it). The penalty is the
default one, on the coordinates trained (``std-pop`` of peers.py). Nothing in the table is timed.

With ``--saga-epochs N`` it also runs scikit-learn's SAGA in one process (``max_iter`` doubling
from 1 to N epochs, each a fresh fit from zero) on the binary datasets in ``raw`` and ``std``
coordinates, and prints the epochs and seconds its first fit within 1e-3 relative suboptimality
took, or the gap it ended at: what the per-row condition number ``kappa_max`` means for a
single-process SAGA with its own step rule, measured beside the bounds.

With ``--block-shares 0.55,0.67`` it also solves, for the binary datasets split into two blocks
of consecutive rows (as a run with two blocks holds them), the objective whose two block losses
are weighted by those shares instead of 1/2 each, and prints how far that optimum is from the
true one (relative suboptimality in ``std`` coordinates): where one result per update applied
as it comes leaves asynchronous SGD and momentum when one block answers more often than the
other (``solvers.loop.BlockShares`` is the correction).

Last line: ``RESULT std_over_raw_kappa_sparse <kappa(std) / kappa(raw)>`` for the sparse
dataset of the suite (smoke: a small sparse problem).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, eigsh

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402
from _common import print_table  # noqa: E402

CURVATURE = 0.25  # logistic loss: phi'' <= 1/4


def _gram_operator(X: Any, mean: np.ndarray, scale: np.ndarray, center: bool) -> LinearOperator:
    """``v -> X~^T X~ v / n`` for ``X~ = ((X - 1 m^T) S^-1, 1)`` (``m = 0`` unless ``center``)."""
    n, d = X.shape
    m = mean / scale if center else np.zeros(d)

    def matvec(v: np.ndarray) -> np.ndarray:
        w, b = v[:d] / scale, v[d]
        z = np.asarray(X @ w).ravel() - m @ (v[:d]) + b
        g = np.asarray(X.T @ z).ravel() / scale - m * z.sum()
        return np.concatenate([g, [z.sum()]]) / n

    return LinearOperator((d + 1, d + 1), matvec=matvec, dtype=np.float64)


def _max_row_norm_sq(X: Any, mean: np.ndarray, scale: np.ndarray, center: bool) -> float:
    if sp.issparse(X):
        Xs = X @ sp.diags(1.0 / scale)
        sq = np.asarray(Xs.multiply(Xs).sum(axis=1)).ravel()
        if center:  # ||x/s - m/s||^2 = ||x/s||^2 - 2 (x/s).(m/s) + ||m/s||^2
            ms = mean / scale
            sq = sq - 2.0 * np.asarray(Xs @ ms).ravel() + float(ms @ ms)
    else:
        Z = (X - mean) / scale if center else X / scale
        sq = np.einsum("ij,ij->i", Z, Z)
    return float(sq.max()) + 1.0  # the intercept's column of ones


def conditioning(X: Any, l2: float) -> dict[str, dict[str, float]]:
    """``{coordinates: {L, L_max, kappa, kappa_max}}`` of the logistic objective on ``X``."""
    n, d = X.shape
    if sp.issparse(X):
        mean = np.asarray(X.mean(axis=0)).ravel()
        var = np.asarray(X.multiply(X).mean(axis=0)).ravel() - mean * mean
    else:
        mean, var = X.mean(axis=0), X.var(axis=0)
    std = np.sqrt(np.maximum(var, 0.0))
    std = np.where(std > 0, std, 1.0)
    ones = np.ones(d)
    systems = {"raw": (np.zeros(d), ones, False)}
    if sp.issparse(X):
        systems["std"] = (mean, std, False)  # what the library trains on: scaled, not centered
        systems["std-centered"] = (mean, std, True)
    else:
        systems["std"] = (mean, std, True)
    out = {}
    for name, (m, s, center) in systems.items():
        lam = float(
            eigsh(_gram_operator(X, m, s, center), k=1, which="LA", return_eigenvectors=False)[0]
        )
        L = CURVATURE * lam + l2
        L_max = CURVATURE * _max_row_norm_sq(X, m, s, center) + l2
        out[name] = {"L": L, "L_max": L_max, "kappa": L / l2, "kappa_max": L_max / l2}
    return out


def saga_epochs(spec: Any, X: Any, y: np.ndarray, max_epochs: int) -> list[list[str]]:
    """Rows ``[dataset, coordinates, epochs, seconds, gap]`` of scikit-learn's SAGA, epochs
    doubling up to ``max_epochs``, on ``peers.py``'s objectives ``raw`` and ``std-pop``."""
    import time
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    obj = peers.Objectives(X, y, spec)
    rows = []
    for name, kind in (("raw", "raw"), ("std", "std-pop")):
        s = obj.scales[kind]
        shift = np.zeros(X.shape[1]) if sp.issparse(X) or kind == "raw" else obj.mean
        Xs = X @ sp.diags(1.0 / s) if sp.issparse(X) else (X - shift) / s
        obj.star(kind)  # the reference optimum, outside the timed fits
        epochs, seconds, gap = 1, math.nan, math.inf
        while epochs <= max_epochs:
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                fit = LogisticRegression(
                    solver="saga", C=1.0 / (obj.n * spec.l2), tol=1e-12, max_iter=epochs
                ).fit(Xs, y)
            seconds = time.perf_counter() - t0
            W = fit.coef_ / s
            gap = obj.rel(kind, W, fit.intercept_ - W @ shift)
            if gap <= 1e-3:
                break
            epochs *= 2
        reached = gap <= 1e-3
        rows.append(
            [
                spec.name,
                name,
                str(epochs) if reached else f"> {epochs // 2}",
                f"{seconds:.2f}",
                f"{gap:.2e}",
            ]
        )
    return rows


def block_bias(spec: Any, X: Any, y: np.ndarray, shares: list[float]) -> list[list[str]]:
    """Rows ``[dataset, share of block 0, relative gap]``: the optimum of the ``std-pop``
    objective with its two halves' mean losses weighted ``share, 1 - share``, scored on the true
    objective (scipy's L-BFGS-B at tight tolerance)."""
    from scipy.optimize import minimize

    obj = peers.Objectives(X, y, spec)
    s = obj.scales["std-pop"]
    shift = np.zeros(X.shape[1]) if sp.issparse(X) else obj.mean
    Xs = sp.csr_matrix(X @ sp.diags(1.0 / s)) if sp.issparse(X) else (X - shift) / s
    n, d = Xs.shape
    halves = [slice(0, n // 2), slice(n // 2, n)]

    def value_grad(v: np.ndarray, weights: tuple[float, float]) -> tuple[float, np.ndarray]:
        w, b = v[:d], v[d]
        f, g = 0.5 * spec.l2 * float(w @ w), np.zeros(d + 1)
        g[:d] = spec.l2 * w
        for weight, rows in zip(weights, halves, strict=True):
            Xp, yp = Xs[rows], y[rows]
            z = np.asarray(Xp @ w).ravel() + b
            f += weight * float(np.mean(np.logaddexp(0.0, z) - yp * z))
            r = weight * (0.5 * (1.0 + np.tanh(0.5 * z)) - yp) / len(yp)
            g[:d] += np.asarray(Xp.T @ r).ravel()
            g[d] += r.sum()
        return f, g

    obj.star("std-pop")
    rows = []
    for share in shares:
        fit = minimize(
            value_grad,
            np.zeros(d + 1),
            args=((share, 1.0 - share),),
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": 20_000, "gtol": 1e-10, "ftol": 1e-15},
        )
        W = fit.x[:d] / s
        gap = obj.rel("std-pop", W, np.array([fit.x[d] - W @ shift]))
        rows.append([spec.name, f"{share:g} / {1 - share:g}", f"{gap:.2e}"])
    return rows


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the quick suite of peers.py")
    ap.add_argument("--smoke", action="store_true", help="seconds: two tiny datasets")
    ap.add_argument("--datasets", default=None, help="names of the suite (comma list)")
    ap.add_argument(
        "--saga-epochs",
        type=int,
        default=0,
        help="also time scikit-learn's SAGA to 1e-3, up to this many epochs (0: not run)",
    )
    ap.add_argument(
        "--block-shares",
        default=None,
        help="also the optimum of two blocks weighted by these shares of block 0 (comma list)",
    )
    args = ap.parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    shares = [float(x) for x in args.block_shares.split(",")] if args.block_shares else []
    if args.smoke and not shares:
        shares = [0.6]
    max_epochs = args.saga_epochs or (64 if args.smoke else 0)  # the smoke runs it too
    every = {d.name: d for s in peers.SUITES.values() for d in s}
    if args.datasets:
        suite = [every[n] for n in args.datasets.split(",")]
    elif args.smoke:
        small = peers.Data("sparse-2e3", "sparse", 2000, 1000, 1e-3, 1.0, nnz=20)
        suite = [peers.SUITES["smoke"][0], small]
    else:
        suite = peers.SUITES[mode]
    rows, saga_rows, bias_rows = [], [], []
    ratio = math.nan
    for spec in suite:
        X, y = peers.make_data(spec, peers.SCORE_SEED)
        if max_epochs > 0 and spec.classes <= 2:
            saga_rows += saga_epochs(spec, X, y, max_epochs)
        if shares and spec.classes <= 2:
            bias_rows += block_bias(spec, X, y, shares)
        found = conditioning(X, spec.l2)
        for name, c in found.items():
            rows.append(
                [
                    spec.name,
                    name,
                    f"{c['L']:.3g}",
                    f"{c['L_max']:.3g}",
                    f"{c['kappa']:.3g}",
                    f"{math.sqrt(c['kappa']):.3g}",
                    f"{c['kappa_max']:.3g}",
                ]
            )
        if sp.issparse(X):
            ratio = found["std"]["kappa"] / found["raw"]["kappa"]
    print_table(["dataset", "coordinates", "L", "L_max", "kappa", "sqrt(kappa)", "kappa_max"], rows)
    if saga_rows:
        print(
            "\nscikit-learn's SAGA in one process, to 1e-3 (epochs doubling; the last fit's time):"
        )
        print_table(["dataset", "coordinates", "epochs", "seconds", "gap"], saga_rows)
    if bias_rows:
        print("\nthe optimum of two blocks weighted by their shares, on the true objective:")
        print_table(["dataset", "shares", "relative gap"], bias_rows)
    print(f"RESULT std_over_raw_kappa_sparse {ratio:.3f}")
    return ratio


if __name__ == "__main__":
    main(sys.argv[1:])

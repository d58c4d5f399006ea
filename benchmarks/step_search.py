"""The step safeguard's search upward: updates to a target with the default step, searched or not,
against a grid of fixed multiples of it.

For each dataset of the race (:data:`peers.SUITES`; breast cancer and the dense 10^4 x 20
problem by default) and each number of blocks, it runs, in this process (threads: the engine
and the method are the real ones; no Spark, so it counts updates, not seconds):

* ``default``: the library's defaults (automatic step, the safeguard with its search upward),
  ``--repeats`` times (asynchronous runs in threads arrive in a different order each time, and
  the search's decisions with them);
* ``no search``: the same step with the safeguard off (what the defaults were before the search
  and the halving on plateaus; SGD's step rule is then ``sqrt``);
* ``no restart`` (``ag``, ``apg``): the defaults without the momentum's gradient restart;
* ``xK``: K times the default step, fixed (safeguard off, the method's default step rule; a
  momentum method keeps the default's momentum), K in ``--multipliers``.

A row gives the updates to reach each target (the default's: median [min, max] over the
repeats, a miss counting as more than any count) (relative suboptimality against scikit-learn's
optimum, ``peers.Objectives``) and the step the run ended at. First it prints the curvature the
default step is computed from, at ``w = 0`` and at the optimum (``Lbar`` and ``max_i l''_i
|x_i|^2`` on the standardized rows), which is why the searched step can be larger.

Usage: python benchmarks/step_search.py [--datasets breast_cancer,dense-1e4] [--blocks 2,8]
       [--methods asaga,saga] [--updates 4000] [--smoke]
Last line: ``RESULT searched_vs_best_fixed_updates_max <the largest ratio, over the datasets,
methods and block counts, of the default's median updates to 1e-3 to the best multiple's>`` (1 =
as fast as the best grid step; a median that misses the target counts as infinity).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import peers  # noqa: E402  (the race's datasets, objectives and optima)

from async_spark.solvers import TrainConfig, train_linear  # noqa: E402

TARGETS = (1e-2, 1e-3, 1e-4)
RESTARTED = ("ag", "apg")  # synchronous AG/APG restart an automatic momentum (docs/steps.md)


def curvature(X: np.ndarray, y: np.ndarray, l2: float) -> dict[str, float]:
    """Lbar and the largest per-row curvature of the standardized logistic problem, at w = 0 and
    at scikit-learn's optimum."""
    from sklearn.linear_model import LogisticRegression

    Z = (X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1.0)
    n = len(y)
    fit = LogisticRegression(C=1 / (n * l2), tol=1e-12, max_iter=10_000).fit(Z, y)
    Zt = np.hstack([Z, np.ones((n, 1))])
    out = {}
    for at, theta in (("0", np.zeros(Zt.shape[1])), ("opt", np.r_[fit.coef_[0], fit.intercept_])):
        s = 1.0 / (1.0 + np.exp(-(Zt @ theta)))
        d = s * (1 - s)
        out[f"Lbar_{at}"] = float(np.linalg.eigvalsh(Zt.T @ (d[:, None] * Zt) / n).max())
        out[f"Lrow_{at}"] = float((d * (Zt * Zt).sum(1)).max())
    return out


def run(spec: Any, X: Any, y: np.ndarray, star: float, args: Any, **kw: Any) -> dict[str, Any]:
    cfg = TrainConfig(
        data=(X, y), loss=spec.loss, l2=spec.l2, l1=spec.l1, quiet=True,
        max_updates=args.updates, eval_every=0.005, **kw,
    )  # fmt: skip
    try:
        r = train_linear(cfg)
    except FloatingPointError:
        return {
            "hits": dict.fromkeys(TARGETS),
            "step": math.nan,
            "final": math.nan,
            "gap": math.inf,
        }
    gaps = [(v, (f - star) / abs(star)) for _, v, f in r.snapshots]
    hits = {t: next((v for v, g in gaps if g <= t), None) for t in TARGETS}
    final = (r.step_safeguard or {}).get("final_step", r.step)
    beta = (r.momentum or {}).get("beta")  # a momentum method's fixed multiples keep it
    return {"hits": hits, "step": r.step, "final": final, "gap": gaps[-1][1], "beta": beta}


def row(label: str, out: dict[str, Any]) -> None:
    hits = "  ".join(f"{'-' if out['hits'][t] is None else out['hits'][t]:>6}" for t in TARGETS)
    print(f"  {label:<12} {hits}   step {out['step']:<9.4g} -> {out['final']:<9.4g}"
          f" final gap {out['gap']:.1e}", flush=True)  # fmt: skip


def median_hits(runs: list[dict[str, Any]], target: float) -> tuple[float, float, float]:
    """Median, min and max updates to ``target`` over ``runs`` (a miss: infinity)."""
    counts = [math.inf if r["hits"][target] is None else r["hits"][target] for r in runs]
    return float(np.median(counts)), min(counts), max(counts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", default="breast_cancer,dense-1e4")
    ap.add_argument("--blocks", default="2,8")
    ap.add_argument("--methods", default="asaga,saga")
    ap.add_argument("--multipliers", default="2,4,8,16,32,64")
    ap.add_argument("--updates", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="seconds: one small run of each kind")
    args = ap.parse_args(argv)
    if args.smoke:
        args.datasets, args.blocks, args.methods = "dense-2e3", "2", "asaga"
        args.multipliers, args.updates, args.repeats = "4", 300, 1
    specs = {d.name: d for suite in peers.SUITES.values() for d in suite}
    worst = 0.0
    for name in args.datasets.split(","):
        spec = specs[name]
        X, y = peers.make_data(spec, peers.SCORE_SEED)
        star = peers.Objectives(X, y, spec).star("std-pop")
        print(f"{name}: n={X.shape[0]} d={X.shape[1]} l2={spec.l2}")
        if spec.loss == "logistic" and not hasattr(X, "tocsr"):
            c = curvature(np.asarray(X), y, spec.l2)
            print("  curvature at w=0 / at the optimum: Lbar {Lbar_0:.3g} / {Lbar_opt:.3g}, "
                  "max row {Lrow_0:.3g} / {Lrow_opt:.3g}".format(**c))  # fmt: skip
        for method in args.methods.split(","):
            for blocks in (int(b) for b in args.blocks.split(",")):
                print(f"  {method}, {blocks} blocks; updates to {', '.join(map(str, TARGETS))}")
                common = dict(method=method, partitions=blocks)
                defaults = [run(spec, X, y, star, args, **common) for _ in range(args.repeats)]
                for k, default in enumerate(defaults):
                    row(f"default #{k + 1}", default)
                row("no search", run(spec, X, y, star, args, step_safeguard=False, **common))
                if method in RESTARTED:  # the defaults without the momentum's restart
                    row("no restart", run(spec, X, y, star, args, momentum_restart=False, **common))
                fixed = []
                for k in (float(m) for m in args.multipliers.split(",")):
                    beta = defaults[0]["beta"]
                    extra = {} if beta is None else {"momentum": beta}
                    out = run(spec, X, y, star, args, step=defaults[0]["step"] * k,
                              step_safeguard=False, **extra, **common)  # fmt: skip
                    row(f"x{k:g}", out)
                    fixed.append(out["hits"][1e-3])
                best = min((h for h in fixed if h is not None), default=None)
                med, lo, hi = median_hits(defaults, 1e-3)
                print(f"  default, updates to 1e-3: median {med:g} [{lo:g}, {hi:g}]")
                if best is not None:
                    ratio = med / best
                    print(f"  default (median) / best fixed multiple, updates to 1e-3: {ratio:.2f}")
                    worst = max(worst, ratio)
    print(f"RESULT searched_vs_best_fixed_updates_max {worst:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

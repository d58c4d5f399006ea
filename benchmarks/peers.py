"""Time to 1e-3 relative suboptimality: our methods against the Spark and scikit-learn peers.

One L2-regularized logistic regression, the same data, the same machine, one Spark application on
``local-cluster[2,1,1024]`` (two executor JVMs of one core each, every process on 127.0.0.1):

* ours: ``asaga``, ``saga``, ``asgd`` and the momentum methods ``ag`` (Nesterov's accelerated
  gradient on mini-batches, synchronous) and ``aag`` (its asynchronous form), all through
  :func:`async_spark.solvers.train_linear`;
* ``pyspark.mllib.classification.LogisticRegressionWithSGD`` (deprecated, bulk-synchronous
  mini-batch SGD with step ``step/sqrt(t)``);
* ``pyspark.ml.classification.LogisticRegression`` (L-BFGS);
* scikit-learn's ``saga`` solver in this process (one core: the cost of distribution).

Objective (the library's): ``F(w, b) = mean_i log(1 + exp(z_i)) - y_i z_i + (l2/2)||w||^2`` with
``z_i = w.x_i + b``, intercept unpenalized. Relative suboptimality ``(F - F*) / F*`` with ``F*``
from scikit-learn's ``newton-cg`` at ``tol=1e-10`` (``C = 1/(n l2)``), checked against the norm
of the full gradient. pyspark.ml optimizes exactly this objective with ``regParam=l2,
elasticNetParam=0, standardization=False, fitIntercept=True`` (Spark averages the loss and adds
``regParam/2 ||w||^2`` on the original-scale coefficients, intercept excluded); the benchmark
prints its converged gap to show it. MLlib's SGD appends a bias feature and its
``SquaredL2Updater`` penalizes that bias too: its own optimum is off ours by the figure printed
(negligible here, far below 1e-3).

How time-to-target is measured (honestly, per method):

* ours: one run per method with a time budget; the loop snapshots the parameters every
  ``--eval-every`` seconds of training and evaluates them *after* training (the library's
  off-the-clock evaluation), so the time is the first snapshot at or below the target -- an
  upper bound with that resolution. Blocks are already cached in the workers (a warm-up run), as
  the peers' data are cached in Spark before timing.
* pyspark.ml and MLlib cannot report their iterates' objective, so each is trained from scratch
  with an increasing iteration count (doubling, then bisection); the time is the wall time of
  the whole ``fit``/``train`` call with the fewest iterations found that reaches the target
  (fixed costs included: what a user pays). The ``iter=1`` column shows that fixed cost; for
  MLlib it includes PySpark's conversion of the cached Python RDD to Java objects on every call.
* scikit-learn ``saga``: the same sweep over ``max_iter`` (epochs), ``tol=0``.

Step sizes: the library's ``--step auto`` uses the largest row norm (``1/(3 L_max)``), safe for
single samples but ~50x too small for tasks that sample thousands of rows, so our steps are
multiples of ``1/L_avg`` (``L_avg`` = largest eigenvalue of the averaged Hessian bound
``X~'X~/(4n)``, computed on the driver), the multipliers (and momenta) picked once by a small
sweep of updates-to-target on the quick data (``OURS``; ``--ours`` overrides). MLlib's step is the best of a small pilot grid (``--mllib-steps``), so
both sides are tuned alike.

Data (why this one): the rcv1-like ``builtin:synthetic`` makes every first-order method look bad
at the default ``l2`` -- its averaged Hessian has condition number in the thousands (the
intercept and nonnegative tf-idf columns against ``l2 = 1e-4``), so mini-batch SAGA/SGD, ours
and MLlib's alike, need thousands of rounds and never reach 1e-3 in minutes, while L-BFGS needs
~12 passes; such a table measures the conditioning, not the systems. We use a standardized dense
problem where every method reaches the target in seconds and the comparison is about the systems:
``n`` Gaussian rows of ``d`` AR(1)-correlated features (rho = 0.5, condition number ~ 9),
standardized, labels Bernoulli(sigmoid(x.w + 0.5)) with margin standard deviation 2.5, ``l2 =
1e-4``. ``--data synthetic`` runs the sparse default instead.

Peer-neutral straggler: the same cluster, with one executor JVM and its process tree (pyspark
daemon and Python workers) stopped and continued by a driver thread (``--duty`` 0.5 at
``--period`` 0.1 s), so every method faces the same slow machine; every stopped process gets
SIGCONT in a ``finally``. Target there: ``asaga`` reaches 1e-3 before pyspark.ml's L-BFGS.

Last lines: ``RESULT asaga_vs_mllib_sgd_speedup <MLlib time / asaga time>`` and
``RESULT ours_best_vs_mllib_sgd_speedup <MLlib time / fastest of ours>`` (unthrottled; a lower
bound when MLlib did not reach the target in its budget).

Usage: python benchmarks/peers.py [--quick] [--n N] [--d D] [--l2 F] [--partitions P]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import eigsh
from scipy.special import expit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Throttle, executor_pids, print_table, spark_session  # noqa: E402

from async_spark.data.dataset import open_dataset  # noqa: E402
from async_spark.solvers.config import TrainConfig  # noqa: E402
from async_spark.solvers.linear import train_linear  # noqa: E402

# --- data and objective ------------------------------------------------------------------------


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


def make_synthetic(n: int, d: int, P: int) -> tuple[sp.csr_matrix, np.ndarray]:
    src, _ = open_dataset(f"builtin:synthetic?n={n}&d={d}", P, loss="logistic")
    blocks = [src.load(i) for i in range(P)]
    return sp.vstack([b.X for b in blocks], format="csr"), np.concatenate([b.y for b in blocks])


class Objective:
    """F(w, b) and its gradient on the driver's copy of the data."""

    def __init__(self, X: Any, y: np.ndarray, l2: float) -> None:
        self.X, self.y, self.l2, self.n = X, y, l2, X.shape[0]

    def __call__(self, w: np.ndarray, b: float) -> float:
        z = np.asarray(self.X @ w).ravel() + b
        return float(np.mean(np.logaddexp(0.0, z) - self.y * z) + 0.5 * self.l2 * w @ w)

    def grad_norm(self, w: np.ndarray, b: float) -> float:
        r = expit(np.asarray(self.X @ w).ravel() + b) - self.y
        g = np.asarray(self.X.T @ r).ravel() / self.n + self.l2 * w
        return float(np.sqrt(g @ g + (r.mean()) ** 2))

    def l_avg(self) -> float:
        """Largest eigenvalue of X~'X~/(4n), X~ = [X, 1] (the averaged smoothness)."""
        Xt = sp.hstack([sp.csr_matrix(self.X), np.ones((self.n, 1))]).tocsr()
        return float(eigsh((Xt.T @ Xt) / (4.0 * self.n), k=1, return_eigenvectors=False)[0])


def optimum(obj: Objective) -> tuple[float, np.ndarray, float]:
    from sklearn.linear_model import LogisticRegression

    m = LogisticRegression(C=1.0 / (obj.n * obj.l2), tol=1e-10, solver="newton-cg", max_iter=1000)
    m.fit(obj.X, obj.y)
    w, b = m.coef_[0].copy(), float(m.intercept_[0])
    return obj(w, b), w, b


# --- sweeps over an iteration count ------------------------------------------------------------


@dataclass
class Sweep:
    """Fits with increasing iteration counts; ``hi`` = fewest iterations seen to reach."""

    name: str
    rows: list[tuple[int, float, float]] = field(default_factory=list)  # (iters, seconds, rel)
    lo: tuple[int, float] | None = None
    hi: tuple[int, float] | None = None

    @property
    def seconds(self) -> float | None:
        return None if self.hi is None else self.hi[1]

    @property
    def spent(self) -> float:
        return max((s for _, s, _ in self.rows), default=0.0)


def sweep(
    name: str,
    run: Callable[[int], tuple[float, float]],
    target: float,
    k0: int,
    budget: float,
    bisect: int,
) -> Sweep:
    """``run(k) -> (seconds, rel)``: double k from k0 until rel <= target (or a run takes longer
    than ``budget``), then bisect the bracket ``bisect`` times."""
    s = Sweep(name)
    k = k0
    while True:
        sec, rel = run(k)
        s.rows.append((k, sec, rel))
        if rel <= target:
            s.hi = (k, sec)
            break
        s.lo = (k, sec)
        if sec >= budget or not math.isfinite(rel):
            return s
        k *= 2
    for _ in range(bisect):
        if s.lo is None or s.hi[0] - s.lo[0] <= 1:
            break
        m = (s.lo[0] + s.hi[0]) // 2
        sec, rel = run(m)
        s.rows.append((m, sec, rel))
        if rel <= target:
            s.hi = (m, sec)
        else:
            s.lo = (m, sec)
    return s


# --- the methods -------------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, X: Any, y: np.ndarray) -> None:
        self.args = args
        self.obj = Objective(X, y, args.l2)
        t0 = time.perf_counter()
        self.f_star, self.w_star, self.b_star = optimum(self.obj)
        self.optimum_seconds = time.perf_counter() - t0
        self.target = args.target
        self.L = self.obj.l_avg()

    def rel(self, w: np.ndarray, b: float) -> float:
        return (self.obj(np.asarray(w, dtype=np.float64), float(b)) - self.f_star) / self.f_star

    # scikit-learn saga, one process
    def sklearn_saga(self) -> Sweep:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression

        C = 1.0 / (self.obj.n * self.args.l2)

        def run(k: int) -> tuple[float, float]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                t0 = time.perf_counter()
                m = LogisticRegression(C=C, solver="saga", tol=0.0, max_iter=k)
                m.fit(self.obj.X, self.obj.y)
                sec = time.perf_counter() - t0
            return sec, self.rel(m.coef_[0], m.intercept_[0])

        return sweep("scikit-learn saga (1 core)", run, self.target, 1, 60.0, 4)

    # ours
    def ours(self, spark: Any, ds: Any, method: str, budget: float) -> dict[str, Any]:
        a = self.args
        scale, beta = OURS[method]
        cfg = TrainConfig(
            method=method,
            loss="logistic",
            l2=a.l2,
            step=scale / self.L,
            momentum=beta,
            batch_fraction=a.batch_fraction,
            partitions=a.partitions,
            time_budget=budget,
            max_updates=a.max_updates,
            eval_every=a.eval_every,
            seed=a.seed,
            quiet=True,
        )
        r = train_linear(cfg, spark=spark, dataset=ds)
        hit = next(
            ((s, v) for s, v, f in r.snapshots if (f - self.f_star) / self.f_star <= self.target),
            None,
        )
        return {
            "name": f"ours {method}" + (f" (momentum {beta:g})" if beta is not None else ""),
            "seconds": None if hit is None else hit[0],
            "final_rel": (r.final_objective - self.f_star) / self.f_star,
            "updates": None if hit is None else hit[1],
            "total_updates": r.updates,
            "wall": r.wall_seconds,
            "step": r.step,
            "staleness": r.summary()["mean_staleness"],
        }

    # pyspark.ml L-BFGS
    def ml_lbfgs(self, df: Any, budget: float, bisect: int) -> Sweep:
        from pyspark.ml.classification import LogisticRegression

        def run(k: int) -> tuple[float, float]:
            lr = LogisticRegression(
                maxIter=k,
                regParam=self.args.l2,
                elasticNetParam=0.0,
                standardization=False,
                fitIntercept=True,
                tol=0.0,
                family="binomial",
            )
            t0 = time.perf_counter()
            m = lr.fit(df)
            sec = time.perf_counter() - t0
            return sec, self.rel(m.coefficients.toArray(), m.intercept)

        return sweep("pyspark.ml LogisticRegression (L-BFGS)", run, self.target, 2, budget, bisect)

    # MLlib SGD
    def mllib_sgd(self, rdd: Any, step: float, budget: float, bisect: int, k0: int = 4) -> Sweep:
        from pyspark.mllib.classification import LogisticRegressionWithSGD

        def run(k: int) -> tuple[float, float]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                t0 = time.perf_counter()
                m = LogisticRegressionWithSGD.train(
                    rdd,
                    iterations=k,
                    step=step,
                    miniBatchFraction=1.0,
                    regParam=self.args.l2,
                    regType="l2",
                    intercept=True,
                    validateData=False,
                    convergenceTol=0.0,
                )
                sec = time.perf_counter() - t0
            return sec, self.rel(m.weights.toArray(), m.intercept)

        return sweep(
            f"pyspark.mllib LogisticRegressionWithSGD (step {step:g})",
            run,
            self.target,
            k0,
            budget,
            bisect,
        )

    def mllib_pilot(self, rdd: Any, steps: list[float], iters: int) -> float:
        """The step of the grid with the lowest objective after ``iters`` iterations."""
        best = None
        for s in steps:
            sw = self.mllib_sgd(rdd, s, budget=0.0, bisect=0, k0=iters)
            rel = sw.rows[0][2]
            print(f"  MLlib pilot: step {s:g}, {iters} iterations -> rel {rel:.2e}", flush=True)
            if math.isfinite(rel) and (best is None or rel < best[0]):
                best = (rel, s)
        return steps[0] if best is None else best[1]

    def ml_converged_gap(self, df: Any) -> float:
        from pyspark.ml.classification import LogisticRegression

        m = LogisticRegression(
            maxIter=200,
            regParam=self.args.l2,
            elasticNetParam=0.0,
            standardization=False,
            tol=1e-12,
        ).fit(df)
        return self.rel(m.coefficients.toArray(), m.intercept)


# --- reporting ---------------------------------------------------------------------------------


def fmt_s(x: float | None, budget: float | None = None) -> str:
    if x is None:
        return f"> {budget:.1f}" if budget is not None else "not reached"
    return f"{x:.2f}"


def sweep_row(s: Sweep) -> list[str]:
    fixed = next((f"{sec:.2f}" for k, sec, _ in s.rows if k == 1), "")
    iters = "-" if s.hi is None else str(s.hi[0])
    lo = "-" if s.lo is None else f"{s.lo[1]:.2f}@{s.lo[0]}"
    best = min(r for _, _, r in s.rows)
    return [
        s.name,
        fmt_s(s.seconds, s.spent) if s.hi else f"> {s.spent:.1f}",
        iters,
        lo,
        f"{best:.1e}",
        fixed,
    ]


def ours_row(r: dict[str, Any]) -> list[str]:
    return [
        r["name"],
        fmt_s(r["seconds"], r["wall"]),
        f"{r['updates']} of {r['total_updates']} upd",
        f"step {r['step']:.3g}",
        f"{r['final_rel']:.1e}",
        f"staleness {r['staleness']:.1f}",
    ]


HEADERS = ["method", "t(1e-3) s", "iters/updates", "not reached at s@it", "best rel", "note"]


# Our methods: (step in units of 1/L_avg, momentum), from a sweep of updates-to-target on the
# quick data in one process (scale 0.5-4 x momentum 0-0.8, b = 0.5; benchmarks/RESULTS.md):
# SAGA diverges at 4, Nesterov's AG needs 14 rounds at (2, 0.5) or (1, 0.7), asynchronous AG
# becomes unstable at (2, 0.5) under staleness ~1 and is run a notch below.
OURS: dict[str, tuple[float, float | None]] = {
    "asaga": (1.5, None),
    "saga": (3.0, None),
    "asgd": (3.0, None),
    "ag": (2.0, 0.5),
    "aag": (1.0, 0.5),
}


def parse_ours(text: str) -> list[str]:
    names = []
    for item in text.split(","):
        method, *rest = item.strip().split(":")
        if method not in OURS and not rest:
            raise SystemExit(f"--ours: {method!r} needs a step scale (METHOD:SCALE[:MOMENTUM])")
        if rest:
            scale = float(rest[0])
            beta = float(rest[1]) if len(rest) > 1 else OURS.get(method, (0, None))[1]
            OURS[method] = (scale, beta)
        names.append(method)
    return names


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short run (under ~3 minutes)")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="seconds: tiny data on local[2], one MLlib step, a loose target (the numbers are not "
        "figures; the test suite checks the RESULT lines)",
    )
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--data", choices=("dense", "synthetic"), default="dense")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--d", type=int, default=None)
    ap.add_argument("--l2", type=float, default=1e-4)
    ap.add_argument("--target", type=float, default=1e-3, help="relative suboptimality")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--batch-fraction", type=float, default=0.5)
    ap.add_argument(
        "--ours",
        default=",".join(OURS),
        help="our methods to run, each as METHOD[:SCALE[:MOMENTUM]] (step in units of 1/L_avg); "
        f"defaults {OURS}",
    )
    ap.add_argument("--mllib-steps", type=float, nargs="+", default=None)
    ap.add_argument("--max-updates", type=int, default=5000)
    ap.add_argument("--eval-every", type=float, default=0.02)
    ap.add_argument("--budget", type=float, default=None, help="seconds per run of ours")
    ap.add_argument("--duty", type=float, default=0.5)
    ap.add_argument("--period", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.smoke:
        args.quick = True
        args.master = "local[2]"
        args.n, args.d, args.target = args.n or 4000, args.d or 20, 1e-1
        args.budget = args.budget or 3.0
        args.mllib_steps = args.mllib_steps or [8.0]
        if args.ours == ",".join(OURS):
            args.ours = "asaga"
    q = args.quick
    if args.data == "dense":
        args.n = args.n or (100_000 if q else 400_000)
        args.d = args.d or 50
    else:
        args.n = args.n or (100_000 if q else 200_000)
        args.d = args.d or 10_000
    budget = args.budget or (8.0 if q else 20.0)
    peer_budget = 5.0 if args.smoke else 15.0 if q else 40.0  # a fit longer ends a peer's sweep
    bisect = 1 if args.smoke else 2 if q else 4
    mllib_steps = args.mllib_steps or ([8.0] if q else [2.0, 8.0, 32.0])
    P = args.partitions
    ours = parse_ours(args.ours)
    if "asaga" not in ours:
        raise SystemExit("--ours must include asaga (the headline comparison)")

    t0 = time.perf_counter()
    if args.data == "dense":
        X, y = make_dense(args.n, args.d, args.seed)
    else:
        X, y = make_synthetic(args.n, args.d, P)
    bench = Bench(args, X, y)
    gnorm = bench.obj.grad_norm(bench.w_star, bench.b_star)
    print(
        f"data: {args.data}, n={args.n}, d={args.d}, l2={args.l2:g}, P={P}, "
        f"b={args.batch_fraction}; F*={bench.f_star:.10f} (newton-cg, |grad|={gnorm:.1e}, "
        f"{bench.optimum_seconds:.1f}s); F(0) rel gap {(math.log(2) - bench.f_star) / bench.f_star:.3f};"
        f" L_avg={bench.L:.3f}; target rel {args.target:g}",
        flush=True,
    )
    sk = bench.sklearn_saga()
    print(f"scikit-learn saga done ({time.perf_counter() - t0:.0f}s)", flush=True)

    tmp = tempfile.mkdtemp(prefix="peers-")
    spark = None
    throttle = None
    results: dict[str, Any] = {}
    throttled: dict[str, Any] = {}
    try:
        ds = open_dataset(
            (X, y), P, loss="logistic", staging_dir=os.path.join(tmp, "stage"), dense=None
        )
        spark = spark_session(args.master, "peers", {"spark.sql.shuffle.partitions": str(P)})
        df, rdd = spark_data(spark, X, y, P, tmp)
        print(f"session and data ready ({time.perf_counter() - t0:.0f}s)", flush=True)
        ml_gap = bench.ml_converged_gap(df)
        print(f"pyspark.ml converged (tol 1e-12): rel gap {ml_gap:.1e} (same objective)")
        mllib_floor = mllib_objective_gap(bench)
        print(f"MLlib's own optimum (bias penalized): rel gap {mllib_floor:.1e} on ours")

        # warm-up: blocks into both executors' workers, JIT of the peers' code paths
        for m in ours:
            bench.ours(spark, ds, m, 1.0)
        bench.ml_lbfgs(df, 0.0, 0)
        bench.mllib_sgd(rdd, 1.0, 0.0, 0, k0=2)

        for m in ours:
            results[m] = bench.ours(spark, ds, m, budget)
            print(f"  {m}: {fmt_s(results[m]['seconds'], budget)} s", flush=True)
        results["ml"] = bench.ml_lbfgs(df, peer_budget, bisect)
        step = bench.mllib_pilot(rdd, mllib_steps, 20) if len(mllib_steps) > 1 else mllib_steps[0]
        results["mllib"] = bench.mllib_sgd(rdd, step, peer_budget, bisect)
        print(f"unthrottled done ({time.perf_counter() - t0:.0f}s)", flush=True)

        if not args.smoke:  # the throttled executor needs a cluster; smoke runs local[2]
            throttle = throttled_runs(
                args, bench, spark, ds, df, rdd, ours, budget, step, throttled
            )
    finally:
        if throttle is not None:
            throttle.stop()
        if spark is not None:
            spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(
        f"Time to {args.target:g} relative suboptimality, {args.master} (2 executor cores), "
        f"n={args.n}, d={args.d}, l2={args.l2:g}:"
    )
    rows = [ours_row(results[m]) for m in ours]
    rows += [sweep_row(results["ml"]), sweep_row(results["mllib"]), sweep_row(sk)]
    print_table(HEADERS, rows)
    print("  (sweep rows: fixed cost = the whole call with 1 iteration when measured)")
    print()
    print(
        f"Under the peer-neutral straggler (one executor at {args.duty:.0%} duty, "
        f"{args.period * 1e3:.0f} ms period):"
    )
    rows = [ours_row(throttled[m]) for m in throttled if m not in ("ml", "mllib")]
    rows += [sweep_row(throttled[m]) for m in ("ml", "mllib") if m in throttled]
    print_table(HEADERS, rows)

    print()
    mllib = results["mllib"]
    ml_t = throttled["ml"].seconds if "ml" in throttled else None

    def vs_mllib(t: float | None) -> tuple[float, str]:
        if t is None:
            return float("nan"), "did not reach the target"
        if mllib.seconds is None:
            return mllib.spent / t, f">= {mllib.spent / t:.2f}x (MLlib did not reach it)"
        x = mllib.seconds / t
        return x, f"{x:.2f}x"

    for m in ours:
        t = results[m]["seconds"]
        line = f"{m} vs MLlib SGD: {vs_mllib(t)[1]}"
        if t is not None and sk.seconds is not None:
            line += f"; vs scikit-learn saga on one core: {sk.seconds / t:.3f}x"
        if t is not None and results["ml"].seconds is not None:
            line += f"; vs pyspark.ml L-BFGS: {results['ml'].seconds / t:.2f}x"
        thr = throttled[m]["seconds"] if m in throttled else None
        if thr is not None and ml_t is not None:
            line += f"; throttled: {thr:.2f}s vs L-BFGS {ml_t:.2f}s ({'first' if thr < ml_t else 'later'})"
        print(line)
    reached = [m for m in ours if results[m]["seconds"] is not None]
    best = min(reached, key=lambda m: results[m]["seconds"]) if reached else "asaga"
    best_x = vs_mllib(results[best]["seconds"])[0]
    print(
        f"fastest of ours: {best}, {best_x:.2f}x MLlib SGD "
        f"(target >= 3x: {'met' if best_x >= 3 else 'NOT met'})"
    )
    thr_reached = [m for m in ours if m in throttled and throttled[m]["seconds"] is not None]
    if thr_reached and ml_t is not None:
        first = min(thr_reached, key=lambda m: throttled[m]["seconds"])
        t = throttled[first]["seconds"]
        print(
            f"straggler: fastest of ours {first} {t:.2f}s vs L-BFGS {ml_t:.2f}s "
            f"(target: ours first: {'met' if t < ml_t else 'NOT met'})"
        )
    speedup = vs_mllib(results["asaga"]["seconds"])[0]
    print(f"RESULT asaga_vs_mllib_sgd_speedup {speedup:.3f}")
    print(f"RESULT ours_best_vs_mllib_sgd_speedup {best_x:.3f}")
    return best_x


def throttled_runs(
    args: Any,
    bench: Any,
    spark: Any,
    ds: Any,
    df: Any,
    rdd: Any,
    ours: list[str],
    budget: float,
    step: float,
    throttled: dict[str, Any],
) -> Any:
    """The runs under one throttled executor (SIGSTOP/SIGCONT duty cycle); fills ``throttled``."""
    q, peer_budget, bisect = args.quick, 15.0 if args.quick else 40.0, 2 if args.quick else 4
    execs = executor_pids(spark.sparkContext.applicationId)
    if not execs:
        raise RuntimeError("no executor JVM of this application found (is this a cluster?)")
    victim_id = sorted(execs)[0]
    throttle = Throttle(execs[victim_id], duty=args.duty, period=args.period).start()
    try:  # an executor must never stay stopped, whatever fails
        print(
            f"throttling executor {victim_id} (pid {execs[victim_id]}) and its Python workers: "
            f"{args.duty:.0%} duty at {args.period * 1e3:.0f} ms; executors {execs}",
            flush=True,
        )
        for m in ours:
            throttled[m] = bench.ours(spark, ds, m, budget * 1.5)
            print(f"  {m}: {fmt_s(throttled[m]['seconds'], budget * 1.5)} s", flush=True)
        throttled["ml"] = bench.ml_lbfgs(df, peer_budget, bisect)
        if not q:
            throttled["mllib"] = bench.mllib_sgd(rdd, step, peer_budget, bisect)
    finally:
        throttle.stop()
    print(f"throttle stopped after {throttle.cycles} cycles", flush=True)
    return throttle


def spark_data(spark: Any, X: Any, y: np.ndarray, P: int, tmp: str) -> tuple[Any, Any]:
    """The same rows as a cached DataFrame (pyspark.ml) and a cached RDD of LabeledPoint."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.ml.functions import array_to_vector
    from pyspark.mllib.regression import LabeledPoint
    from pyspark.mllib.util import MLUtils

    path = os.path.join(tmp, "data.parquet")
    if sp.issparse(X):
        from sklearn.datasets import dump_svmlight_file

        path = os.path.join(tmp, "data.libsvm")
        dump_svmlight_file(X, y, path)
        df = spark.read.format("libsvm").option("numFeatures", X.shape[1]).load(path)
    else:
        n, d = X.shape
        feats = pa.ListArray.from_arrays(
            pa.array(np.arange(0, n * d + 1, d, dtype=np.int32)), pa.array(X.ravel())
        )
        pq.write_table(pa.table({"label": y, "features": feats}), path)
        df = spark.read.parquet(path).select("label", array_to_vector("features").alias("features"))
    df = df.repartition(P).cache()
    df.count()
    rdd = (
        MLUtils.convertVectorColumnsFromML(df, "features")
        .rdd.map(lambda r: LabeledPoint(r.label, r.features))
        .cache()
    )
    rdd.count()
    return df, rdd


def mllib_objective_gap(bench: Bench) -> float:
    """Our objective at the optimum of MLlib's (bias as a penalized feature)."""
    from sklearn.linear_model import LogisticRegression

    X = bench.obj.X
    ones = np.ones((X.shape[0], 1))
    Xb = sp.hstack([X, ones]).tocsr() if sp.issparse(X) else np.hstack([X, ones])
    m = LogisticRegression(
        C=1.0 / (bench.obj.n * bench.args.l2),
        tol=1e-10,
        solver="newton-cg",
        max_iter=1000,
        fit_intercept=False,
    ).fit(Xb, bench.obj.y)
    return bench.rel(m.coef_[0][:-1], m.coef_[0][-1])


if __name__ == "__main__":
    main(sys.argv[1:])

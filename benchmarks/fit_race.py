"""pyspark.ml's Estimators beside ours, defaults vs defaults: LogisticRegression().fit beside
AsyncLogisticRegression().fit, then LinearRegression().fit beside AsyncLinearRegression().fit.

Breast cancer's raw columns (diabetes's for the regression) through a VectorAssembler, one session,
fits alternating (the first fit of each kind in the session is reported apart: it pays the Python
workers' and the first jobs' start). Each fit is timed from the call to the fitted model; its
training loss on the same frame is reported beside it (log loss: both solve l2 = 0 logistic
regression, MLlib to its own tolerance, ours to its convergence test; mean squared error: both
solve least squares, MLlib by its normal equations, ours by L-BFGS).

Usage: python benchmarks/fit_race.py [--repeats 3] [--master local[4]] [--smoke]
Last lines: ``RESULT async_linear_fit_vs_mllib_fit_seconds <median ours / median MLlib, warm
fits>`` (the regression), then ``RESULT async_fit_vs_lbfgs_fit_seconds <the same, logistic>``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="warm fits of each kind")
    ap.add_argument("--master", default="local[4]")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="one warm fit of each, capped (10 L-BFGS iterations, 100 updates): the script runs",
    )
    args = ap.parse_args()
    repeats = 1 if args.smoke else args.repeats

    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.regression import LinearRegression
    from sklearn.datasets import load_breast_cancer, load_diabetes

    from async_spark.engine import build_session
    from async_spark.ml import AsyncLinearRegression, AsyncLogisticRegression

    spark = build_session(args.master, app_name="fit-race", conf={"spark.ui.enabled": "false"})
    try:
        X, y = load_breast_cancer(return_X_y=True)
        data = _assembled(spark, X, y)

        def log_loss(model) -> float:
            p = np.array([r.probability[1] for r in model.transform(data).collect()])
            p = np.clip(p, 1e-15, 1 - 1e-15)
            return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))

        fits = {"mllib": LogisticRegression(), "ours": AsyncLogisticRegression()}
        if args.smoke:  # not defaults: a smoke run checks the script, not the race
            fits = {
                "mllib": LogisticRegression(maxIter=10),
                "ours": AsyncLogisticRegression(maxUpdates=100),
            }
        logistic = _race(fits, data, repeats, "training log loss", log_loss)

        Xr, yr = load_diabetes(return_X_y=True)
        reg_data = _assembled(spark, Xr, yr)

        def mse(model) -> float:
            pred = np.array([r.prediction for r in model.transform(reg_data).collect()])
            return float(np.mean((pred - yr) ** 2))

        fits = {"mllib": LinearRegression(), "ours": AsyncLinearRegression()}
        if args.smoke:
            fits = {
                "mllib": LinearRegression(maxIter=10),
                "ours": AsyncLinearRegression(maxUpdates=20),
            }
        linear = _race(fits, reg_data, repeats, "training mean squared error", mse)
    finally:
        spark.stop()
    print("logistic regression, breast cancer:")
    ours_logistic = _medians(logistic)
    print("linear regression, diabetes:")
    ours_linear = _medians(linear)
    print(f"RESULT async_linear_fit_vs_mllib_fit_seconds {ours_linear:.3f}")
    print(f"RESULT async_fit_vs_lbfgs_fit_seconds {ours_logistic:.3f}")


def _assembled(spark, X: np.ndarray, y: np.ndarray):
    """The rows as raw double columns through a VectorAssembler, cached and counted."""
    from pyspark.ml.feature import VectorAssembler

    cols = [f"f{i}" for i in range(X.shape[1])]
    rows = [(*map(float, x), float(t)) for x, t in zip(X, y, strict=True)]
    frame = spark.createDataFrame(rows, ", ".join(f"{c} double" for c in cols) + ", label double")
    data = VectorAssembler(inputCols=cols, outputCol="features").transform(frame)
    data = data.select("features", "label").cache()
    data.count()
    return data


def _race(fits, data, repeats: int, measure: str, score) -> dict[str, list[float]]:
    """Fits alternating, the first of each apart; the warm fits' seconds by side."""
    times: dict[str, list[float]] = {name: [] for name in fits}
    print(f"| fit | kind | seconds | {measure} |")
    print("|---|---|---|---|")
    for i in range(repeats + 1):
        for name, est in fits.items():
            t0 = time.perf_counter()
            model = est.fit(data)
            seconds = time.perf_counter() - t0
            kind = "first in session" if i == 0 else "warm"
            if i > 0:
                times[name].append(seconds)
            print(f"| {name} | {kind} | {seconds:.2f} | {score(model):.5g} |", flush=True)
    return times


def _medians(times: dict[str, list[float]]) -> float:
    """Print both sides' warm medians and ranges; return ours / MLlib."""
    ours, mllib = statistics.median(times["ours"]), statistics.median(times["mllib"])
    print(
        f"warm medians: ours {ours:.2f} s (range {min(times['ours']):.2f}-{max(times['ours']):.2f}), "
        f"mllib {mllib:.2f} s (range {min(times['mllib']):.2f}-{max(times['mllib']):.2f})"
    )
    return ours / mllib


if __name__ == "__main__":
    main()

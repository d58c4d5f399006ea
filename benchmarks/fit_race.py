"""pyspark.ml's LogisticRegression().fit beside AsyncLogisticRegression().fit, defaults vs defaults.

Breast cancer's raw columns through a VectorAssembler, one session, fits alternating (the first
fit of each kind in the session is reported apart: it pays the Python workers' and the first jobs'
start). Each fit is timed from the call to the fitted model; its training log loss on the same
frame is reported beside it (both solve l2 = 0 logistic regression; MLlib to its own tolerance,
ours for its default budget).

Usage: python benchmarks/fit_race.py [--repeats 3] [--master local[4]] [--smoke]
Last line: ``RESULT async_fit_vs_lbfgs_fit_seconds <median ours / median MLlib, warm fits>``.
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
    from pyspark.ml.feature import VectorAssembler
    from sklearn.datasets import load_breast_cancer

    from async_spark.engine import build_session
    from async_spark.ml import AsyncLogisticRegression

    spark = build_session(args.master, app_name="fit-race", conf={"spark.ui.enabled": "false"})
    try:
        X, y = load_breast_cancer(return_X_y=True)
        cols = [f"f{i}" for i in range(X.shape[1])]
        rows = [(*map(float, x), float(t)) for x, t in zip(X, y, strict=True)]
        frame = spark.createDataFrame(
            rows, ", ".join(f"{c} double" for c in cols) + ", label double"
        )
        data = VectorAssembler(inputCols=cols, outputCol="features").transform(frame)
        data = data.select("features", "label").cache()
        data.count()

        def log_loss(model) -> float:
            p = np.array([r.probability[1] for r in model.transform(data).collect()])
            p = np.clip(p, 1e-15, 1 - 1e-15)
            return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))

        times: dict[str, list[float]] = {"mllib": [], "ours": []}
        fits = {"mllib": LogisticRegression(), "ours": AsyncLogisticRegression()}
        if args.smoke:  # not defaults: a smoke run checks the script, not the race
            fits = {
                "mllib": LogisticRegression(maxIter=10),
                "ours": AsyncLogisticRegression(maxUpdates=100),
            }
        print("| fit | kind | seconds | training log loss |")
        print("|---|---|---|---|")
        for i in range(repeats + 1):
            for name, est in fits.items():
                t0 = time.perf_counter()
                model = est.fit(data)
                seconds = time.perf_counter() - t0
                kind = "first in session" if i == 0 else "warm"
                if i > 0:
                    times[name].append(seconds)
                print(f"| {name} | {kind} | {seconds:.2f} | {log_loss(model):.5f} |", flush=True)
    finally:
        spark.stop()
    ours, mllib = statistics.median(times["ours"]), statistics.median(times["mllib"])
    print(
        f"warm medians: ours {ours:.2f} s (range {min(times['ours']):.2f}-{max(times['ours']):.2f}), "
        f"mllib {mllib:.2f} s (range {min(times['mllib']):.2f}-{max(times['mllib']):.2f})"
    )
    print(f"RESULT async_fit_vs_lbfgs_fit_seconds {ours / mllib:.3f}")


if __name__ == "__main__":
    main()

"""The slow-executor straggler model on a real two-executor cluster; prints what the test checks.

Started by test_slow_executor_cluster.py in its own process. Usage: python slow_executor_run.py
MASTER FACTOR. Each task busy-waits ~40 ms (CPU work, as a real gradient); the model makes every
task on the first executor that answers take FACTOR times its compute, and the other's not.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

from async_spark.engine import AsyncEngine, Policy, StragglerModel, build_session
from async_spark.engine.spark import SparkTransport


def busy_task(block, model, args):
    t = time.perf_counter()
    while time.perf_counter() - t < 0.04:
        pass
    return block


def main(master: str, factor: float) -> None:
    spark = build_session(
        master,
        app_name="async-spark-slow-executor-test",
        conf={
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": "512m",
        },
    )
    try:
        results = []
        with AsyncEngine(
            SparkTransport(spark.sparkContext),
            busy_task,
            num_blocks=4,
            policy=Policy.asynchronous(),
            initial_model=np.zeros(2),
            stragglers=StragglerModel("slow-executor", intensity=factor),
            warmup_tasks=4,
            run_name="slow-executor",
        ) as eng:
            for r in eng.results():
                results.append(r)
                eng.publish(np.zeros(2))
                if len(results) == 48:
                    break
            slow = eng.slow_executor
        by_executor: dict[str, dict] = {}
        for r in results[8:]:  # past the warm-up (blocks loaded, the slow executor named)
            e = by_executor.setdefault(
                r.executor, {"n": 0, "sleep_over_compute": [], "wall": [], "compute": []}
            )
            e["n"] += 1
            e["sleep_over_compute"].append(r.sleep_seconds / r.compute_seconds)
            e["wall"].append(r.seconds)
            e["compute"].append(r.compute_seconds)
        out = {
            "slow_executor": slow,
            "executors": {
                k: {
                    "n": v["n"],
                    "sleep_over_compute": [
                        min(v["sleep_over_compute"]),
                        max(v["sleep_over_compute"]),
                    ],
                    "median_wall": statistics.median(v["wall"]),
                    "median_compute": statistics.median(v["compute"]),
                }
                for k, v in by_executor.items()
            },
        }
    finally:
        spark.stop()
    print("RESULT-JSON " + json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))

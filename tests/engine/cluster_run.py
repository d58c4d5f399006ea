"""Run the engine on a multi-process cluster and print what the test checks, as JSON.

Started by test_cluster.py in its own process (a second SparkContext cannot share the test
session's process). Usage: python cluster_run.py MASTER
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from async_spark.engine import AsyncEngine, Policy, build_session
from async_spark.engine.spark import SparkTransport


def task(block, model, args):
    time.sleep(0.02)
    return {"block": block, "model_version": int(model[0]), "pid": os.getpid()}


def main(master: str) -> None:
    spark = build_session(
        master,
        app_name="async-spark-cluster-test",
        conf={
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": "512m",
        },
    )
    out: dict = {}
    try:
        sc = spark.sparkContext
        for name, policy in (("sync", Policy.sync()), ("async", Policy.asynchronous(tau=6))):
            results = []
            with AsyncEngine(
                SparkTransport(sc),
                task,
                num_blocks=4,
                policy=policy,
                initial_model=np.zeros(2),
                run_name=f"cluster-{name}",
            ) as eng:
                for r in eng.results():
                    results.append(r)
                    if policy.synchronous:
                        if len(results) % 4 == 0:
                            eng.publish(np.full(2, float(eng.version + 1)))
                    else:
                        eng.publish(np.full(2, float(eng.version + 1)))
                    if len(results) == 40:
                        break
            out[name] = {
                "executors": sorted({r.executor for r in results}),
                "versions_read_ok": all(r.payload["model_version"] == r.version for r in results),
                "max_staleness": max(r.staleness for r in results),
                "sync_rounds_single_version": all(
                    len({r.version for r in results[i : i + 4]}) == 1 for i in range(0, 40, 4)
                ),
                "accounting_closes": eng.core.accounting_closes(),
                "in_flight": eng.core.in_flight,
                "live_broadcasts": eng.history.live_handles,
                "counts": dict(eng.core.counts),
            }
    finally:
        spark.stop()
    print("RESULT-JSON " + json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])

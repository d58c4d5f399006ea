"""ASAGA on a local-cluster whose executor JVM is SIGKILLed mid-run; prints JSON for the test.

Started by test_executor_loss.py in its own process. Usage: python cluster_kill_run.py TRANSPORT
(resident or jobs).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from async_spark.data.dataset import open_dataset
from async_spark.engine import build_session
from async_spark.engine.resident import ResidentTransport
from async_spark.solvers import TrainConfig, train_linear

RETRIED_SERVES = 4.0  # seconds the retried resident task serves before the run is ended


def executor_pids(app_id: str) -> list[int]:
    """PIDs of this application's executor JVMs (CoarseGrainedExecutorBackend)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().decode(errors="replace")
        except OSError:
            continue
        if "CoarseGrainedExecutorBackend" in cmd and app_id in cmd:
            pids.append(int(entry))
    return sorted(pids)


def main() -> None:
    spark = build_session(
        "local-cluster[2,1,1024]",
        app_name="async-spark-executor-loss",
        conf={
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": "512m",
            "spark.task.maxFailures": "4",
        },
    )
    out: dict = {}
    try:
        sc = spark.sparkContext
        dataset = open_dataset("builtin:breast_cancer", 4, standardize=True, loss="logistic")
        transport = sys.argv[1] if len(sys.argv) > 1 else "resident"
        base = dict(
            data="builtin:breast_cancer",
            partitions=4,
            batch_fraction=0.5,
            l2=1e-2,
            seed=2,
            quiet=True,
            eval_every=0.05,
            transport=transport,
        )
        if transport == "resident":
            # Converges in seconds (1e-3 in about 2 s); the lost executor is replaced and its
            # resident task retried there (no free slot elsewhere), ~15 s on this machine.
            base.update(method="asaga", time_budget=5.0)
        else:  # one Spark job per update: ~10 updates/s, so a fixed number of updates
            base.update(method="asgd", step=0.5, max_updates=150)
        undisturbed = train_linear(TrainConfig(**base), spark=spark, dataset=dataset)
        before = executor_pids(sc.applicationId)
        killed: list[int] = []
        stop = threading.Event()
        resident = ResidentTransport(spark) if transport == "resident" else None

        def killer() -> None:
            time.sleep(3.0)
            pids = executor_pids(sc.applicationId)
            if not pids:
                return
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])
            if resident is None:
                return
            # End the run once Spark's retry of the lost task (attempt >= 1) has served its
            # blocks for a few seconds; the time budget below bounds it if it never comes.
            while not stop.wait(0.2):
                if any(w["attempt"] >= 1 for w in resident.workers()):
                    stop.wait(RETRIED_SERVES)
                    stop.set()

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        if transport == "resident":  # room for the retry (26 s was not always enough under load)
            base.update(time_budget=60.0)
        disturbed = train_linear(
            TrainConfig(**base), spark=spark, dataset=dataset, transport=resident, stop=stop
        )
        stop.set()
        thread.join()
        kill_time = 3.0
        after_kill = {
            t["block"]
            for t in disturbed.trace
            if t.get("block") is not None and t["seconds"] > kill_time + 1.0
        }
        c = disturbed.engine_snapshot["counts"]
        out = {
            "executors_before": len(before),
            "killed": killed,
            "executors_after": len(executor_pids(sc.applicationId)),
            "undisturbed_objective": undisturbed.final_objective,
            "disturbed_objective": disturbed.final_objective,
            "updates": disturbed.updates,
            "stopped_by": disturbed.stopped_by,
            "undisturbed_stopped_by": undisturbed.stopped_by,
            "accepted": c["accepted"],
            "counts": c,
            "accounting_closes": c["dispatched"]
            == c["accepted"] + c["rejected"] + c["cancelled"] + c["failed"] + c["in_flight"],
            "blocks_after_kill": sorted(after_kill),
            "disturbed_wall": disturbed.wall_seconds,
            "transport_counters": disturbed.engine_snapshot.get("transport", {}),
        }
    finally:
        spark.stop()
    print("RESULT-JSON " + json.dumps(out))


if __name__ == "__main__":
    main()

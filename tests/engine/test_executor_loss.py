"""Executor loss: SIGKILL one executor JVM of a local-cluster in the middle of an ASAGA run, on
both transports: the run finishes, the accounting closes, the blocks of the lost executor keep
working (Spark retries the resident task elsewhere, or the next job runs there), and SAGA's history
(the driver's table) is intact, so the objective ends where an undisturbed run ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("transport", ["resident", "jobs"])
def test_run_survives_a_killed_executor(transport):
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    script = Path(__file__).with_name("cluster_kill_run.py")
    proc = subprocess.run(
        [sys.executable, str(script), transport],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT-JSON ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1].split(" ", 1)[1])
    assert out["executors_before"] == 2 and len(out["killed"]) == 1, out
    # the resident run ends once the lost blocks' retried task has served a while (interrupted
    # by the script), else at its budget; the job transport's at its number of updates
    expected = ("interrupted", "time_budget") if transport == "resident" else ("max_updates",)
    assert out["stopped_by"] in expected, out
    assert out["accepted"] >= out["updates"] > 0  # the run finished; nothing lost
    assert out["accounting_closes"] and out["counts"]["in_flight"] == 0
    assert out["blocks_after_kill"] == [0, 1, 2, 3]  # every block kept working after the loss
    if transport == "resident":
        # SAGA's tables: one full table per block at the start, then again for the blocks of the
        # lost executor on the task that took them over (the driver's table is the reference)
        counts = out["transport_counters"]
        assert counts["table_full"] >= 4 + 2 and counts["table_commit"] > 0, counts
    gap = abs(out["disturbed_objective"] - out["undisturbed_objective"])
    assert gap / out["undisturbed_objective"] <= 0.01, out

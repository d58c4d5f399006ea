"""The slow-executor straggler model where it means something: a local-cluster[2,1,1024] (two
executor JVMs), where one executor's tasks must be slower and the other's must not (in local mode
every task reports the same executor, so only the arithmetic could be tested)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

FACTOR = 4.0


def test_only_the_slow_executor_is_slowed():
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    script = Path(__file__).with_name("slow_executor_run.py")
    proc = subprocess.run(
        [sys.executable, str(script), "local-cluster[2,1,1024]", str(FACTOR)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT-JSON ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1].split(" ", 1)[1])
    execs = out["executors"]
    assert len(execs) == 2 and out["slow_executor"] in execs, out  # both executors answered
    slow = execs[out["slow_executor"]]
    (fast,) = (v for k, v in execs.items() if k != out["slow_executor"])
    # on the slow executor every task slept (F - 1) x its own compute; on the other none did
    lo, hi = slow["sleep_over_compute"]
    assert lo == pytest.approx(FACTOR - 1) and hi == pytest.approx(FACTOR - 1), out
    assert fast["sleep_over_compute"] == [0.0, 0.0], out
    # seen from the driver: the slow executor's tasks take (F - 1) x compute longer (half of it
    # at least: a task's wall time also holds Spark's per-task overhead, which the load moves),
    # so it returns fewer results
    extra = (FACTOR - 1) * fast["median_compute"]
    assert slow["median_wall"] - fast["median_wall"] > 0.5 * extra, out
    assert fast["n"] > slow["n"], out

"""The engine on a real multi-process cluster: local-cluster[2,1,1024] (two executor JVMs),
started in its own process, bound to 127.0.0.1, bounded in time, always stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster


def test_results_come_back_from_both_executors():
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    script = Path(__file__).with_name("cluster_run.py")
    proc = subprocess.run(
        [sys.executable, str(script), "local-cluster[2,1,1024]"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT-JSON ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1].split(" ", 1)[1])
    for name in ("sync", "async"):
        run = out[name]
        assert len(run["executors"]) == 2, run  # two executor processes answered
        assert run["versions_read_ok"] and run["accounting_closes"]
        assert run["in_flight"] == 0 and run["live_broadcasts"] == 0
    assert out["sync"]["sync_rounds_single_version"]
    assert out["async"]["max_staleness"] <= 6

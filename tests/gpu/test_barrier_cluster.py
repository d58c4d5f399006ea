"""The barrier launcher on a real multi-process cluster: local-cluster[2,1,1024] (two executor
JVMs, CPU, gloo), started in its own process, bound to 127.0.0.1, bounded in time, always
stopped. One cluster start serves the three checks (the suite must stay short)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.cluster

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-cluster")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, str(HERE / "gpu_cluster_run.py"), "local-cluster[2,1,1024]", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT-JSON ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return out, json.loads(lines[-1].split(" ", 1)[1])


def test_two_ranks_equal_the_in_process_run(cluster):
    from async_spark.gpu import train_hylo_local

    CONFIG = _cluster_module().CONFIG

    out, res = cluster
    assert res["barrier"]["files"] == ["metrics.jsonl", "model.pt", "summary.json"]
    assert res["barrier"]["ranks_logged"] == ["0", "1"]  # both ranks' logs came back
    got = torch.load(out / "run" / "model.pt", weights_only=True)
    ref = train_hylo_local(CONFIG)  # 2 processes, no Spark, same shards and seeds
    assert sorted(got) == sorted(ref["state_dict"])
    for name, value in ref["state_dict"].items():
        np.testing.assert_allclose(got[name].numpy(), value, rtol=0, atol=1e-5, err_msg=name)
    summary = json.loads((out / "run" / "summary.json").read_text())
    metrics = [json.loads(ln) for ln in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    assert summary["workers"] == 2 and summary["launcher"] == "barrier"
    assert len(metrics) == CONFIG["epochs"]
    np.testing.assert_allclose(
        [m["train_loss"] for m in metrics], [m["train_loss"] for m in ref["metrics"]], atol=1e-5
    )


def test_a_raising_rank_fails_the_stage_quickly_and_leaves_no_process(cluster):
    out, res = cluster
    r = res["raise"]
    assert r["error"] is not None and r["rank"] == 1, r
    assert "rank 1 of the barrier stage failed" in r["error"]
    assert "ValueError: rank one exploded on purpose" in r["error"]
    assert r["seconds"] < 60, r
    lines = [ln.split() for ln in (out / "pids.txt").read_text().splitlines()]
    # spark.stage.maxConsecutiveAttempts=2 in the cluster run: Spark reran the stage once
    assert sorted(r for r, _ in lines) == ["0", "0", "1", "1"], lines
    pids = [int(p) for _, p in lines]
    deadline = time.monotonic() + 15
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        time.sleep(0.2)
    assert not alive, f"rank worker processes still alive after the app stopped: {alive}"


def test_a_rank_missing_the_collective_times_out_instead_of_hanging(cluster):
    _, res = cluster
    s = res["silent"]
    assert s["error"] is not None and s["type"] == "RankFailedError", s
    assert "rank 0" in s["error"]
    assert s["seconds"] < 60, s


def _cluster_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_cluster_run", HERE / "gpu_cluster_run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not a running process
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False

"""The HyLo stage from a Spark Connect session: one mapInArrow(barrier=True) job of 2 ranks with
the same rendezvous, equal to the same 2 ranks run without Spark; and the CLI's --remote."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = [pytest.mark.connect, pytest.mark.spark]

torch = pytest.importorskip("torch")

SMALL = {
    "model": "cnn1d",
    "data": "synthetic",
    "optimizer": "hylo",
    "epochs": 1,
    "batch_size": 32,
    "n_train": 128,
    "n_test": 32,
    "inv_update_steps": 2,
    "workers": 2,
    "timeout": 60.0,
    "seed": 1,
}


def test_two_ranks_train_on_connect_as_without_spark(connect, tmp_path):
    from async_spark.gpu import train_hylo_local, train_hylo_spark

    summary = train_hylo_spark(dict(SMALL, out=str(tmp_path)), connect)
    assert summary["launcher"] == "barrier" and summary["workers"] == 2
    assert sorted(summary["rank_logs"]) == ["0", "1"]
    assert any("process group ready (gloo, world 2" in line for line in summary["rank_logs"]["1"])
    ref = train_hylo_local(SMALL)
    got = torch.load(tmp_path / "model.pt", weights_only=True)
    for name, value in ref["state_dict"].items():
        np.testing.assert_allclose(got[name].numpy(), value, rtol=0, atol=1e-6, err_msg=name)
    assert summary["test_accuracy"] == ref["summary"]["test_accuracy"]


def test_the_hylo_cli_runs_on_a_remote_session(connect_server, tmp_path):
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    for var in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):
        env.pop(var, None)
    args = (
        "--model cnn1d --data synthetic --optimizer hylo --epochs 1 --batch-size 32 "
        f"--n-train 128 --n-test 32 --workers 2 --spark --remote {connect_server.url} "
        f"--out {tmp_path}"
    ).split()
    proc = subprocess.run(
        [sys.executable, "-m", "async_spark.cli", "hylo", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["workers"] == 2 and summary["launcher"] == "barrier"
    assert (tmp_path / "model.pt").is_file()

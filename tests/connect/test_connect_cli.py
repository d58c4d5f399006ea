"""``async-spark train`` on a Spark Connect server: SPARK_REMOTE honoured, --remote checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from async_spark.data.dataset import open_dataset
from async_spark.solvers import TrainConfig, train_linear

pytestmark = [pytest.mark.connect, pytest.mark.spark]

ARGS = [
    "--data",
    "builtin:breast_cancer",
    "--method",
    "sgd",
    "--partitions",
    "4",
    "--l2",
    "0.01",
    "--batch-fraction",
    "0.2",
    "--seed",
    "3",
    "--max-updates",
    "20",
    "--quiet",
]


def _cli(args, env):
    return subprocess.run(
        [sys.executable, "-m", "async_spark.cli", "train", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )


def test_train_on_spark_remote_writes_the_same_outputs(connect_server, tmp_path):
    env = dict(os.environ, SPARK_REMOTE=connect_server.url, SPARK_LOCAL_IP="127.0.0.1")
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    out = tmp_path / "run"
    proc = _cli([*ARGS, "--out", str(out)], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["updates"] == 20 and summary["transport"] == "resident"
    assert len((out / "trace.jsonl").read_text().splitlines()) >= 20
    # the same model as the same seeded synchronous run in this process (no Spark at all)
    cfg = TrainConfig(
        data="builtin:breast_cancer",
        method="sgd",
        partitions=4,
        l2=0.01,
        batch_fraction=0.2,
        seed=3,
        max_updates=20,
        quiet=True,
        eval_every=1e9,
    )
    data = open_dataset("builtin:breast_cancer", 4, standardize=True, loss="logistic")
    local_weights, local_intercept = train_linear(cfg, dataset=data).coefficients()
    with np.load(out / "model.npz") as saved:
        np.testing.assert_array_equal(saved["weights"], local_weights[0])
        np.testing.assert_array_equal(saved["intercept"], local_intercept[0])


def test_remote_and_master_together_are_refused_with_exit_code_2(tmp_path):
    env = dict(os.environ)
    env.pop("SPARK_REMOTE", None)
    proc = _cli([*ARGS, "--remote", "sc://localhost:1", "--master", "local[2]"], env)
    assert proc.returncode == 2, proc.stderr
    assert "--master local[2] and --remote sc://localhost:1: give one" in proc.stderr

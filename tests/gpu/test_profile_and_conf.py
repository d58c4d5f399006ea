"""What needs no GPU: the stage's resource profile and the discovery script's JSON."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from async_spark.gpu import gpu_resource_profile

SCRIPT = Path(__file__).resolve().parents[2] / "spark-conf" / "gpu" / "getGpusResources.sh"


@pytest.mark.parametrize("amount", [1.0, 0.5, 0.25, 2.0])
def test_cuda_profile_asks_for_gpus(amount):
    profile = gpu_resource_profile("cuda", amount, cpus_per_task=2)
    tasks = profile.taskResources
    assert tasks["gpu"].amount == amount
    assert tasks["cpus"].amount == 2
    assert not profile.executorResources  # a task-only profile (dynamic allocation off)


def test_cpu_has_no_profile():
    assert gpu_resource_profile("cpu") is None


def _fake_smi(tmp_path: Path, body: str) -> dict:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{body}\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{tmp_path}:/usr/bin:/bin")
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env)


def test_discovery_script_prints_spark_resource_json(tmp_path):
    proc = _fake_smi(tmp_path, 'printf "0\\n1\\n3\\n"')
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info == {"name": "gpu", "addresses": ["0", "1", "3"]}
    # what Spark does with it: ResourceInformation(name, addresses)
    from pyspark.resource import ResourceInformation

    ri = ResourceInformation(info["name"], info["addresses"])
    assert ri.addresses == ["0", "1", "3"]


def test_discovery_script_fails_clearly_without_gpus(tmp_path):
    proc = _fake_smi(tmp_path, "exit 9")
    assert proc.returncode != 0
    assert "nvidia-smi" in proc.stderr
    empty = _fake_smi(tmp_path, "true")
    assert empty.returncode != 0 and "no GPU" in empty.stderr

"""Quiet success: `async-spark train` on Spark, in its own process as a user runs it, prints its
table and nothing on stderr (no JVM warning, no pyspark daemon traceback, no log line a user
cannot act on); Spark's log is kept in OUT/spark.log. A failing run still says what failed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark


def _command() -> list[str]:
    script = Path(sys.executable).with_name("async-spark")
    return [str(script)] if script.exists() else [sys.executable, "-m", "async_spark.cli"]


def _env() -> dict[str, str]:
    return dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)


def test_a_successful_run_prints_nothing_on_stderr(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            *_command(),
            "train",
            "--master",
            "local[4]",
            "--conf",
            "spark.ui.enabled=false",
            "--data",
            "builtin:breast_cancer",
            "--partitions",
            "4",
            "--method",
            "asaga,saga",
            "--max-updates",
            "40",
            "--quiet",
            "--plot",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == "", proc.stderr[-3000:]
    assert "reached SAGA's final objective" in proc.stdout or "reached ASAGA's" in proc.stdout
    assert (out / "objective.png").exists() and (out / "asaga" / "summary.json").exists()
    log = (out / "spark.log").read_text()
    assert "resident transport" in log  # the engine's INFO lines are kept there


def test_a_failing_run_still_says_what_failed(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            *_command(),
            "train",
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.pyspark.python=/nonexistent/python3",
            "--data",
            "builtin:synthetic?n=400&d=20",
            "--partitions",
            "2",
            "--max-updates",
            "5",
            "--quiet",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    err = proc.stderr.strip()
    assert proc.returncode == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "/nonexistent/python3" in err and "spark.pyspark.python" in err, err

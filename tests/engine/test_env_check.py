"""Executors without the project's environment: a standalone cluster (a master and a worker on
127.0.0.1, their own JVMs) whose executors run a Python that lacks async_spark and numpy. Training
must fail within seconds of the session, with one line that says the fix, instead of Spark's
retries ending in ``No module named 'async_spark'``; with the environment packed by
``scripts/pack-env.sh`` and shipped with ``spark.archives``, the same run trains."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]

# The driver, in its own process (one SparkContext per process): build the session on the
# cluster and wait for its executor (a JVM start: 5-10 s on a loaded machine, before any of our
# code runs), then run `async-spark train` on it; report the times and what the command printed.
DRIVER = textwrap.dedent(
    """
    import contextlib, io, json, sys, time
    from async_spark.engine.session import build_session
    from async_spark.cli import main

    master, python, extra = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    conf = {"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1", "spark.executor.memory": "512m",
            "spark.pyspark.python": python, **extra}
    t0 = time.perf_counter()
    spark = build_session(master, app_name="env-check-test", conf=conf)
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    while status.size() < 2 and time.perf_counter() - t0 < 120:  # the driver + one executor
        time.sleep(0.2)
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    t1 = time.perf_counter()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["train", "--data", "builtin:synthetic?n=2000&d=50", "--partitions", "2",
                   "--max-updates", "20", "--quiet", "--out", sys.argv[4]])
    t2 = time.perf_counter()
    spark.stop()
    print("RESULT-JSON " + json.dumps({"rc": rc, "stderr": err.getvalue(),
                                        "session_seconds": t1 - t0, "run_seconds": t2 - t1}))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bare_python() -> str | None:
    """An interpreter of the driver's version without numpy (so without async_spark)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for cand in (f"/usr/bin/{version}", f"/usr/local/bin/{version}", "/usr/bin/python3"):
        if not os.path.exists(cand):
            continue
        probe = subprocess.run(
            [cand, "-c", "import sys; print('%d.%d' % sys.version_info[:2]); import numpy"],
            capture_output=True,
            text=True,
        )
        if probe.stdout.strip() == version[len("python") :] and probe.returncode != 0:
            return cand
    return None


def _spark_class() -> str:
    from pyspark.find_spark_home import _find_spark_home

    return os.path.join(_find_spark_home(), "bin", "spark-class")


def _wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    raise RuntimeError(f"{text!r} not seen in {path}:\n{path.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """``spark://127.0.0.1:PORT`` with one worker (2 cores); both JVMs stopped at the end."""
    tmp = tmp_path_factory.mktemp("standalone")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs = []

    def start(name, *args):
        log = tmp / f"{name}.log"
        proc = subprocess.Popen(
            [_spark_class(), *args],
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        procs.append(proc)
        return proc, log

    try:
        master, master_log = start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            "0",
        )
        _wait_for(master_log, "I have been elected leader", master, 120)
        start(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            url,
            "--host",
            "127.0.0.1",
            "--cores",
            "2",
            "--memory",
            "1g",
            "--webui-port",
            "0",
            "--work-dir",
            str(tmp / "work"),
        )
        _wait_for(master_log, "Registering worker", master, 120)
        yield url
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _drive(url: str, python: str, tmp_path: Path, extra: dict | None = None, timeout=300):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(ROOT))
    env.pop("PYSPARK_PYTHON", None)
    proc = subprocess.run(
        [sys.executable, str(script), url, python, json.dumps(extra or {}), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT-JSON ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(lines[-1].split(" ", 1)[1])


def test_executors_without_the_project_fail_fast_with_the_fix(standalone, tmp_path):
    bare = _bare_python()
    if bare is None:
        pytest.skip("no interpreter of the driver's Python version without numpy here")
    out = _drive(standalone, bare, tmp_path)
    err = out["stderr"].strip()
    assert out["rc"] == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "cannot import async_spark" in err and bare in err, err
    assert "spark.pyspark.python" in err and "scripts/pack-env.sh" in err, err
    assert "--archives env.tar.gz#env" in err, err
    print(f"failed in {out['run_seconds']:.1f} s after the executor registered")
    # From when the application has its executor: 5-6 s on 2 cores at load 5 (most of it the
    # executor's first task: fetching the task, starting the bare Python's worker); without the
    # check Spark's retries fail only after ~20 s. docs/clusters.md has the measurements.
    assert out["run_seconds"] <= 10.0, out


def test_an_interpreter_that_cannot_start_fails_at_the_first_attempt(standalone, tmp_path):
    """A standalone cluster tries a task 4 times (spark.task.maxFailures); a worker Python that
    takes 1 s to fail would cost 4 starts. The check fails at the first failed task."""
    attempts = tmp_path / "attempts.txt"
    broken = tmp_path / "python"
    broken.write_text(
        f"#!/bin/sh\necho start >> {attempts}\nsleep 1\necho end >> {attempts}\nexit 3\n"
    )
    broken.chmod(0o755)
    out = _drive(standalone, str(broken), tmp_path)
    err = out["stderr"].strip()
    assert out["rc"] == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"could not run a Python task with {str(broken)!r}" in err, err
    assert "spark.pyspark.python" in err and "scripts/pack-env.sh" in err, err
    # Read after the driver has stopped: a retry the cancel cut short may have ended since; the
    # fourth start (spark.task.maxFailures) is what the check avoids.
    assert attempts.read_text().split().count("start") <= 2, attempts.read_text()
    print(f"failed in {out['run_seconds']:.1f} s after the executor registered")
    assert out["run_seconds"] <= 10.0, out


@pytest.fixture(scope="module")
def packed_env(tmp_path_factory):
    """The archive of scripts/pack-env.sh ($ASYNC_SPARK_ENV_ARCHIVE, or built here: minutes)."""
    given = os.environ.get("ASYNC_SPARK_ENV_ARCHIVE")
    if given:
        return Path(given)
    if shutil.which("bash") is None:
        pytest.skip("bash is needed to build the archive")
    archive = tmp_path_factory.mktemp("env") / "env.tar.gz"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "pack-env.sh"), str(archive)],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        pytest.skip(f"scripts/pack-env.sh could not build the archive: {proc.stderr[-500:]}")
    return archive


@pytest.mark.slow
def test_with_the_packed_environment_it_trains(standalone, packed_env, tmp_path):
    out = _drive(
        standalone,
        "./env/bin/python",
        tmp_path,
        {"spark.archives": f"{packed_env}#env"},
        timeout=600,
    )
    assert out["rc"] == 0, out["stderr"][-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["updates"] == 20 and summary["final_objective"] < 0.6931, summary

"""The session builder: defaults file, overrides, spark-submit's master wins, Java checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from async_spark.engine.session import (
    JavaNotFoundError,
    check_java,
    default_conf_dir,
    parse_conf_pairs,
    read_defaults,
)

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_file_is_read_and_conf_dir_substituted(tmp_path):
    (tmp_path / "spark-defaults.conf").write_text(
        "# comment\nspark.a  1\nspark.b=two words\nspark.c {conf_dir}/x.xml\n"
    )
    conf = read_defaults(tmp_path)
    assert conf == {"spark.a": "1", "spark.b": "two words", "spark.c": f"{tmp_path}/x.xml"}
    (tmp_path / "spark-defaults.conf").write_text("spark.lonely\n")
    with pytest.raises(ValueError, match="spark-defaults.conf:1"):
        read_defaults(tmp_path)


def test_project_conf_dir_is_found():
    assert default_conf_dir() == ROOT / "spark-conf"
    conf = read_defaults(default_conf_dir())
    assert conf["spark.scheduler.mode"] == "FAIR"
    assert "spark.master" not in conf  # the master is never hard-coded


@pytest.mark.parametrize("bad", ["novalue", "=x", ""])
def test_bad_conf_pairs_are_refused(bad):
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_conf_pairs([bad])


def test_missing_java_gives_a_clear_message(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(JavaNotFoundError, match="Java runtime"):
        check_java()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-such-jdk"))  # JAVA_HOME wins over PATH
    with pytest.raises(JavaNotFoundError, match="Java runtime"):
        check_java()


def _fake_java(home, script):
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\n" + script)
    java.chmod(0o755)


def test_check_java_returns_the_version_line_and_refuses_a_broken_java(monkeypatch, tmp_path):
    # `java -version` prints to stderr; the first line is the version
    good, bad = tmp_path / "good", tmp_path / "bad"
    _fake_java(good, 'echo \'openjdk version "17.0.9" 2023-10-17\' >&2\necho "runtime" >&2\n')
    _fake_java(bad, 'echo "Error: could not create the Java VM" >&2\nexit 1\n')
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("JAVA_HOME", str(good))
    assert check_java() == 'openjdk version "17.0.9" 2023-10-17'
    monkeypatch.setenv("JAVA_HOME", str(bad))
    with pytest.raises(JavaNotFoundError, match="-version failed: Error: could not create"):
        check_java()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(good / "bin"))  # found on PATH without JAVA_HOME
    assert check_java().startswith("openjdk version")


@pytest.mark.spark
def test_shared_session_uses_the_project_defaults_and_overrides(spark):
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.scheduler.mode") == "FAIR"
    assert conf.get("spark.ui.enabled") == "false"  # override beats nothing, defaults kept
    assert spark.sparkContext.master == "local[4,2]"


@pytest.mark.cluster
def test_spark_submit_master_wins(tmp_path):
    script = tmp_path / "which_master.py"
    script.write_text(
        "from async_spark.engine import build_session\n"
        "s = build_session(conf={'spark.ui.enabled': 'false'})\n"
        "print('MASTER', s.sparkContext.master, s.sparkContext.getConf().get('spark.scheduler.mode'))\n"
        "s.stop()\n"
    )
    submit = Path(sys.executable).with_name("spark-submit")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run(
        [str(submit), "--master", "local[3]", "--conf", "spark.driver.host=127.0.0.1", str(script)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert "MASTER local[3] FAIR" in proc.stdout, proc.stderr[-2000:]


# The executors' environment check on the shared session (local[4,2]: a task is tried twice).
# ``force=True`` probes although local executors run the driver's Python; ``cache=False`` so that
# each check here runs its task.


@pytest.mark.spark
def test_check_executors_reports_other_versions_than_the_drivers(spark, monkeypatch):
    from async_spark.engine import session

    answer = session.check_executors(spark, force=True, cache=False)
    assert answer is not None and answer["modules"]["async_spark"] is not None
    real = session._driver_versions

    def driver_versions(modules):
        return {**real(modules), "numpy": "0.0.1", "pandas": "0.0.2"}

    monkeypatch.setattr(session, "_driver_versions", driver_versions)
    with pytest.raises(session.ExecutorEnvironmentError) as info:
        session.check_executors(spark, force=True, cache=False)
    message = str(info.value)
    import numpy
    import pandas

    assert message.startswith(f"the executors' Python ({answer['executable']}, Python ")
    assert (
        f"has other versions than the driver: numpy {numpy.__version__} (driver: 0.0.1), "
        f"pandas {pandas.__version__} (driver: 0.0.2); give the executors a Python" in message
    )
    assert "--conf spark.pyspark.python=PATH" in message and "scripts/pack-env.sh" in message
    assert "\n" not in message
    local = {**real(session.ENV_CHECK_MODULES), "numpy": numpy.__version__ + "+cpu"}
    monkeypatch.setattr(session, "_driver_versions", lambda modules: local)
    assert session.check_executors(spark, force=True, cache=False) is not None  # a build variant
    with pytest.raises(session.ExecutorEnvironmentError, match=r"cannot import no_such_mod_x \("):
        session.check_executors(spark, ("async_spark", "no_such_mod_x"), force=True, cache=False)


@pytest.mark.spark
def test_a_check_that_gets_no_task_slot_fails_in_bounded_time_and_cancels_its_job(
    spark, monkeypatch
):
    import threading
    import time

    from async_spark.engine import session

    sc = spark.sparkContext
    slots = 4  # local[4,2]
    started = threading.Event()

    def occupy() -> None:
        sc.setJobGroup("test-occupy-every-slot", "every slot busy", True)
        started.set()
        try:
            sc.parallelize(range(slots), slots).foreach(lambda _: time.sleep(60))
        except Exception:
            pass  # cancelled below

    blocker = threading.Thread(target=occupy, daemon=True)
    blocker.start()
    try:
        started.wait(10)
        tracker = sc.statusTracker()
        deadline = time.monotonic() + 30
        while True:  # until the sleeping tasks hold every slot
            stages = [tracker.getStageInfo(i) for i in tracker.getActiveStageIds()]
            if sum(st.numActiveTasks for st in stages if st is not None) >= slots:
                break
            assert time.monotonic() < deadline, "the blocking tasks did not start"
            time.sleep(0.05)
        monkeypatch.setenv("SPARK_ASYNC_SPARK_ENVCHECKTIMEOUT", "1.5")
        t0 = time.monotonic()
        with pytest.raises(session.ExecutorEnvironmentError) as info:
            session.check_executors(spark, force=True, cache=False)
        assert time.monotonic() - t0 < 15
        message = str(info.value)
        assert message.startswith("the executors did not answer the environment check within 1.5 s")
        assert f"--conf {session.ENV_CHECK_TIMEOUT_CONF}=SECONDS" in message
        ours = set(tracker.getJobIdsForGroup("test-occupy-every-slot"))
        deadline = time.monotonic() + 10
        while set(tracker.getActiveJobsIds()) - ours and time.monotonic() < deadline:
            time.sleep(0.05)  # (a cancel reaches the scheduler asynchronously)
        assert not set(tracker.getActiveJobsIds()) - ours  # the probe's job is not left waiting
        monkeypatch.setenv("SPARK_ASYNC_SPARK_ENVCHECKTIMEOUT", "soon")
        with pytest.raises(ValueError, match="envCheckTimeout must be a number of seconds > 0"):
            session.check_executors(spark, force=True, cache=False)
    finally:
        sc.cancelJobGroup("test-occupy-every-slot")
        blocker.join(30)
    monkeypatch.delenv("SPARK_ASYNC_SPARK_ENVCHECKTIMEOUT")
    assert session.check_executors(spark, force=True, cache=False) is not None  # slots free again


@pytest.mark.spark
def test_check_executors_runs_once_per_session_and_never_caches_a_failure(spark, monkeypatch):
    from async_spark.engine import session

    probes = []
    real = session._classic_probe

    def counting(sc, modules, force, seconds):
        probes.append(modules)
        return real(sc, modules, force, seconds)

    monkeypatch.setattr(session, "_classic_probe", counting)
    monkeypatch.setattr(session, "_CHECKED", {})
    first = session.check_executors(spark, force=True)
    assert session.check_executors(spark, force=True) == first and len(probes) == 1
    assert session.check_executors(spark) is None and len(probes) == 2  # local: skipped, once
    assert session.check_executors(spark) is None and len(probes) == 2
    monkeypatch.setattr(session, "_driver_versions", lambda modules: {"numpy": "0.0.1"})
    for _ in range(2):  # a failed check probes again
        with pytest.raises(session.ExecutorEnvironmentError):
            session.check_executors(spark, ("numpy",), force=True)
    assert len(probes) == 4


@pytest.mark.spark
def test_an_interpreter_that_cannot_start_fails_the_check_at_its_first_failure(
    spark, monkeypatch, tmp_path
):
    """Without the watcher Spark tries the task spark.task.maxFailures times (2 here, 4 on a
    cluster), each attempt starting a worker again; the check must fail at the first."""
    from async_spark.engine import session

    log = tmp_path / "attempts.txt"
    broken = tmp_path / "python"
    broken.write_text(f"#!/bin/sh\necho start >> {log}\nsleep 3\necho end >> {log}\nexit 3\n")
    broken.chmod(0o755)
    sc = spark.sparkContext
    monkeypatch.setattr(sc, "pythonExec", str(broken))  # the interpreter of the probe's worker
    sc.setJobGroup("callers-group", "the caller's description", False)
    try:
        with pytest.raises(session.ExecutorEnvironmentError) as info:
            session.check_executors(spark, force=True, cache=False)
        ended = log.read_text().split().count("end")
        assert ended == 1, log.read_text()  # the second attempt, if any, was cut short
        message = str(info.value)
        assert message.startswith(f"the executors could not run a Python task with {str(broken)!r}")
        assert "pyspark.daemon" in message and "org.apache" not in message, message
        assert "spark.pyspark.python" in message and "\n" not in message
        assert sc.getLocalProperty("spark.jobGroup.id") == "callers-group"  # restored
        assert sc.getLocalProperty("spark.job.description") == "the caller's description"
    finally:
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            sc.setLocalProperty(key, None)


def test_only_a_python_worker_failure_ends_the_probe_early():
    """A lost executor or a killed task is left to Spark's retries; a worker that cannot start
    is the answer."""
    from async_spark.engine.session import python_worker_failed

    daemon = (
        "org.apache.spark.SparkException: EOFException occurred while reading the port number "
        "from pyspark.daemon's stdout and terminated with code: 3..\n\tat org.apache.spark.api."
        "python.PythonWorkerFactory.startDaemon(PythonWorkerFactory.scala:386)"
    )
    assert python_worker_failed(daemon)
    assert python_worker_failed('java.io.IOException: Cannot run program "/no/python"')
    lost = "ExecutorLostFailure (executor 1 exited caused by one of the running tasks)"
    assert not python_worker_failed(lost)
    assert not python_worker_failed("TaskKilled (Stage cancelled)")


def test_telling_a_classic_session_from_a_connect_one_does_not_load_the_connect_client(spark):
    """is_connect runs before every fit; importing pyspark's Connect client to answer it cost a
    classic session's first fit 0.35 s (over a second from a cold disk). A fresh process that
    imports the package and asks about a classic session must not load it; the Connect side is
    tests/connect's (is_connect(connect) is True there)."""
    from async_spark.engine.connect import is_connect

    assert not is_connect(spark) and not is_connect(None)
    code = (
        "import sys\n"
        "import async_spark.ml, async_spark.solvers, async_spark.cli\n"
        "from async_spark.engine.connect import is_connect\n"
        "assert not is_connect(object())\n"
        "print('pyspark.sql.connect.session' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr

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

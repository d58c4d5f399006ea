"""One Spark Connect server (local[2], in a child process on 127.0.0.1) for every Connect test.

The server is a child process, so the test process stays free to hold the classic session of
the other tests (``spark``), and the resident transport's server really lives in a client that is
not the Spark driver. pyspark marks a process that made a Connect session
(``SPARK_CONNECT_MODE_ENABLED``) and then builds every pyspark.ml stage as a Connect plan; the
flag is set around each Connect test only, so the classic tests of the same run are unaffected.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from async_spark.engine.connect import LocalConnectServer, connect_mode, remote_session


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """The local[2] Spark Connect server (``.url``, ``.ui_url``), stopped after the session."""
    pytest.importorskip("grpc")
    log = tmp_path_factory.mktemp("connect") / "server.log"
    server = LocalConnectServer("local[2]", max_seconds=1800, log_file=str(log), ui=True)
    with server:
        yield server


@pytest.fixture(scope="session")
def connect_spark(connect_server):
    """A Spark Connect session of the local server."""
    url = connect_server.url
    before = connect_mode(True)
    try:
        session = remote_session(url, app_name="async-spark-connect-tests")
    finally:
        connect_mode(before)
    yield session
    before = connect_mode(True)
    try:
        session.stop()
    finally:
        connect_mode(before)


@pytest.fixture
def connect(connect_spark):
    """The Connect session, with pyspark's Connect flag set for this test only."""
    before = connect_mode(True)
    try:
        yield connect_spark
    finally:
        connect_mode(before)


@pytest.fixture(scope="session")
def spark_ui(connect_server, connect_spark):
    return SparkUI(connect_server.ui_url)


class SparkUI:
    """The Connect server's REST API (what runs there)."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/") + "/api/v1"
        apps = self.get("/applications")
        self.app = self.base + "/applications/" + apps[0]["id"]

    def get(self, path: str):
        url = path if path.startswith("http") else self.base + path
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.loads(resp.read())

    def jobs(self, status: str | None = None):
        return self.get(self.app + "/jobs" + (f"?status={status}" if status else ""))

    def active_tasks(self) -> int:
        stages = self.get(self.app + "/stages?status=active")
        return sum(int(s.get("numActiveTasks", 0)) for s in stages)

    def wait_idle(self, seconds: float) -> float:
        """Seconds until no job runs and no task is active; fails after ``seconds``."""
        t0 = time.monotonic()
        while True:
            running, tasks = self.jobs("running"), self.active_tasks()
            if not running and tasks == 0:
                return time.monotonic() - t0
            if time.monotonic() - t0 > seconds:
                raise AssertionError(f"still running after {seconds} s: {running}, {tasks} tasks")
            time.sleep(0.25)

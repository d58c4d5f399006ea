"""Spark Connect sessions: detection, the classic-only guard, the client's address, a local server.

A Spark Connect session (``SparkSession.builder.remote(URL)``, ``SPARK_REMOTE``) has no
``SparkContext``: no RDD, no ``runJob``, no broadcast. The project's Connect path uses the
DataFrame API only: the resident transport's one ``mapInArrow`` job (its driver-side server lives
in this client process), tasks that open their own blocks from the dataset's source, and model
versions that travel over the resident connections.

- :func:`is_connect` tells the two kinds of session apart (the one helper every path asks);
- :func:`require_classic` is the one clear error of a feature that needs a SparkContext;
- :func:`client_address` is the address of this machine on the route to the Connect server (what
  the executors dial by default); :data:`ADVERTISE_CONF` overrides it;
- :class:`LocalConnectServer` starts a Connect server of ``local[N]`` in a child process, bounded in
  time and bound to loopback (tests, benchmarks, ``--remote local[N]`` without a cluster).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from typing import Any
from urllib.parse import urlparse

__all__ = [
    "ADVERTISE_CONF",
    "CONNECT_TIMEOUT_CONF",
    "HOST_CONF",
    "LOCAL_SOCKET_CONF",
    "ConnectUnsupported",
    "LocalConnectServer",
    "client_address",
    "connect_mode",
    "default_parallelism",
    "is_connect",
    "remote_session",
    "require_classic",
]

#: Session conf (``--conf``) or environment variable (upper case, dots as underscores) naming the
#: ``host[:port]`` that the executors dial to reach the resident transport's server. Needed when
#: the executors reach this machine under another address than it has (NAT, port forwarding).
ADVERTISE_CONF = "spark.async_spark.resident.advertise"
#: Seconds the resident transport waits for its tasks to connect back.
CONNECT_TIMEOUT_CONF = "spark.async_spark.resident.connectTimeout"
#: The address the resident transport listens on (and the executors dial, unless advertised).
HOST_CONF = "spark.async_spark.resident.host"
#: Whether workers on the driver's machine connect over a Unix-domain socket (true/false).
LOCAL_SOCKET_CONF = "spark.async_spark.resident.localSocket"


class ConnectUnsupported(RuntimeError):
    """A feature that needs a SparkContext was asked for on a Spark Connect session."""


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session (``pyspark.sql.connect.session.SparkSession``).

    Without importing the Connect client: a Connect session's class lives in that module, so
    where the module is not loaded no Connect session exists (importing it, grpc and all, took
    a classic session's first fit a few tenths of a second warm and over a second cold)."""
    if spark is None:
        return False
    module = sys.modules.get("pyspark.sql.connect.session")
    return module is not None and isinstance(spark, module.SparkSession)


def require_classic(spark: Any, what: str, instead: str = "") -> None:
    """Raise :class:`ConnectUnsupported` naming ``what`` when ``spark`` is a Connect session."""
    if is_connect(spark):
        raise ConnectUnsupported(
            f"{what} needs a classic Spark session (a SparkContext); this is a Spark Connect "
            f"session{'; ' + instead if instead else ''}"
        )


def conf_value(spark: Any, key: str) -> str | None:
    """``key`` from the session's conf, else from the environment (``SPARK_ASYNC_SPARK_...``)."""
    value = None
    try:
        value = spark.conf.get(key, None)
    except Exception:
        value = None
    if not value:
        value = os.environ.get(key.upper().replace(".", "_"))
    return value or None


def _remote_endpoint(spark: Any) -> tuple[str, int] | None:
    """(host, port) of the Connect server this session talks to."""
    try:
        builder = spark.client._builder
        host = str(builder.host).strip("[]")
        return host, int(builder.endpoint.rsplit(":", 1)[1])
    except Exception:
        return None


def client_address(spark: Any) -> str:
    """The address of this machine on the route to the Connect server.

    A UDP socket "connected" to the server (no packet is sent) has as local address the one the
    kernel would use towards it; for a server on loopback that is loopback. ``SPARK_LOCAL_IP``
    wins (the address Spark itself would use on this machine).
    """
    if os.environ.get("SPARK_LOCAL_IP"):
        return os.environ["SPARK_LOCAL_IP"]
    endpoint = _remote_endpoint(spark)
    if endpoint is not None:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect(endpoint)
                return str(probe.getsockname()[0])
        except OSError:
            pass
    return "127.0.0.1"


def default_parallelism(spark: Any) -> int:
    """``sc.defaultParallelism`` on a classic session; on Connect (no SparkContext) the number of
    partitions of ``spark.range`` without ``numPartitions`` (which Spark sizes by the default
    parallelism), found by one tiny job."""
    if not is_connect(spark):
        return max(1, int(spark.sparkContext.defaultParallelism))
    key = str(getattr(spark, "session_id", id(spark)))
    if key not in _PARALLELISM:  # once per session
        from pyspark.sql.connect import functions as F  # whatever pyspark's process-wide mode

        ids = spark.range(0, 1 << 16).select(F.spark_partition_id().alias("p"))
        row = ids.agg(F.max("p").alias("p")).first()
        _PARALLELISM[key] = max(1, int(row["p"]) + 1) if row and row["p"] is not None else 1
    return _PARALLELISM[key]


_PARALLELISM: dict[str, int] = {}


def connect_mode(enabled: bool) -> bool:
    """Set (or clear) pyspark's process-wide Connect flag; returns whether it was set before.

    pyspark marks a process that created a Connect session (``SPARK_CONNECT_MODE_ENABLED``), and
    pyspark.ml then routes *every* stage through Connect, also those of a classic session of the
    same process. A test process that holds both kinds of session sets the flag around its
    Connect work only.
    """
    before = "SPARK_CONNECT_MODE_ENABLED" in os.environ
    if enabled:
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    else:
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    return before


def remote_session(url: str, app_name: str = "async-spark", conf: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """A Spark Connect session of ``url`` (``sc://host:port`` or ``local[N]``, which starts a
    Connect server of that master inside this process, as pyspark does)."""
    try:
        import pyspark.sql.connect.session  # noqa: F401 - the client packages are there
    except ImportError as exc:
        raise ConnectUnsupported(
            f"Spark Connect needs the client packages ({exc}): pip install 'async_spark[connect]'"
        ) from None
    from pyspark.sql import SparkSession

    # pyspark's own builder: it marks the process as a Connect client (pyspark.sql.functions and
    # pyspark.ml then build Connect plans), as for any user's SparkSession.builder.remote(...)
    builder = SparkSession.builder.remote(url).appName(app_name)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


_SERVER_SOURCE = """
import os, sys, time
from pyspark.sql import SparkSession
master, port, seconds, ui_port = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
spark = (SparkSession.builder.master(master)
         .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
         .config("spark.connect.grpc.binding.address", "127.0.0.1")
         .config("spark.connect.grpc.binding.port", port)
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.ui.enabled", "true" if ui_port != "0" else "false")
         .config("spark.ui.port", ui_port if ui_port != "0" else "4040")
         .config("spark.sql.shuffle.partitions", "4")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
print("READY", flush=True)
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    if sys.stdin.read(1) == "":  # the parent closed our stdin (or is gone): stop
        break
spark.stop()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalConnectServer:
    """A Spark Connect server of ``master`` in a child process, on 127.0.0.1, bounded in time.

    ``with LocalConnectServer("local[2]") as url: spark = remote_session(url)``. The child stops
    when the context exits (its stdin is closed, then it is terminated), when this process dies
    (its stdin closes) or after ``max_seconds``. The executors' Python is ``PYSPARK_PYTHON`` (this
    interpreter by default). With ``ui=True`` its Spark UI listens on loopback too (``ui_url``:
    the REST API tells which jobs and tasks run). The server authenticates with a fresh token, given to this
    process's Connect clients through ``SPARK_CONNECT_AUTHENTICATE_TOKEN``.
    """

    def __init__(
        self,
        master: str = "local[2]",
        *,
        max_seconds: float = 1800.0,
        start_timeout: float = 120.0,
        log_file: str | None = None,
        env: dict[str, str] | None = None,
        ui: bool = False,
    ) -> None:
        self.master = master
        self.max_seconds = max_seconds
        self.start_timeout = start_timeout
        self.log_file = log_file
        self.env = env or {}
        self.proc: subprocess.Popen[str] | None = None
        self.url: str | None = None
        self.ui = ui
        self.ui_url: str | None = None  # the server's Spark UI (its REST API), when ui=True
        self._token_before: str | None = None

    def __enter__(self) -> str:
        port = _free_port()
        ui_port = _free_port() if self.ui else 0
        token = str(uuid.uuid4())
        env = dict(os.environ)
        for var in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "PYSPARK_GATEWAY_PORT"):
            env.pop(var, None)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
        env.update(self.env)
        log = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _SERVER_SOURCE,
                    self.master,
                    str(port),
                    str(self.max_seconds),
                    str(ui_port),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()  # type: ignore[union-attr]
        try:
            self._await_ready()
        except BaseException:
            self.stop()
            raise
        self._token_before = os.environ.get("SPARK_CONNECT_AUTHENTICATE_TOKEN")
        os.environ["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
        # a token makes the client use a secure channel; without TLS only "localhost" allows it
        self.url = f"sc://localhost:{port}"
        self.ui_url = f"http://127.0.0.1:{ui_port}" if self.ui else None
        return self.url

    def _await_ready(self) -> None:
        import selectors

        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + self.start_timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not sel.select(min(1.0, deadline - time.monotonic())):
                    if self.proc.poll() is not None:
                        break
                    continue
                line = self.proc.stdout.readline()
                if line.strip() == "READY":
                    return
                if line == "":
                    break
        code = self.proc.poll()
        raise RuntimeError(
            f"the local Spark Connect server ({self.master}) "
            + (f"exited with code {code}" if code is not None else "did not start")
            + f" within {self.start_timeout:.0f} s"
            + (f"; see {self.log_file}" if self.log_file else "")
        )

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()

    def __exit__(self, *exc: Any) -> None:
        try:
            self.stop()
        finally:
            if self._token_before is None:
                os.environ.pop("SPARK_CONNECT_AUTHENTICATE_TOKEN", None)
            else:
                os.environ["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = self._token_before


def parse_advertise(value: str, default_port: int) -> tuple[str, int]:
    """``host[:port]`` -> (host, port); a bare host keeps ``default_port``."""
    text = value.strip()
    if "://" in text:
        text = urlparse(text).netloc
    host, sep, port = text.rpartition(":") if text.count(":") == 1 else (text, "", "")
    if not sep:
        return text.strip("[]"), default_port
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"{ADVERTISE_CONF} must be host[:port], got {value!r}") from None
    if not 0 < number < 65536:
        raise ValueError(f"{ADVERTISE_CONF}: port must be in 1..65535, got {value!r}")
    return host.strip("[]"), number

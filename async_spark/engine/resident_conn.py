"""The driver's side of one resident worker connection, the resident transport's options and
where its server listens: the parts of :mod:`.resident` that hold no run state.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections import OrderedDict
from typing import Any

from .checks import check_int, check_number
from .core import TaskTicket
from .tables import DriverTables
from .wire import FrameReader

__all__ = [
    "LocalServer",
    "WorkerConnection",
    "advertised_address",
    "bind_host",
    "check_options",
    "configured_local_socket",
    "no_worker_error",
    "socket_kind",
    "sweep_orphans",
]

log = logging.getLogger("async_spark.engine.resident")


class WorkerConnection:
    """An authenticated worker connection, as the driver sees it."""

    def __init__(
        self, sock: socket.socket, peer: str, hello: dict[str, Any], reader: FrameReader
    ) -> None:
        self.sock = sock
        self.peer = peer
        self.reader = reader
        self.blocks: tuple[int, ...] = tuple(hello["blocks"])
        self.executor = str(hello.get("executor", peer))
        self.pid = int(hello.get("pid", -1))
        self.partition = int(hello.get("partition", -1))
        self.attempt = int(hello.get("attempt", 0))
        self.launch = int(hello.get("launch", 1))
        self.send_lock = threading.Lock()
        self.held: OrderedDict[int, None] = OrderedDict()  # mirror of the worker's versions
        self.tables = DriverTables()  # mirror of its HeldRows tables (under the transport's lock)
        self.in_flight: dict[int, tuple[TaskTicket, float]] = {}
        self.last_seen = time.monotonic()
        self.last_sent = time.monotonic()
        self.closed = False
        self.registered = False  # with the reader's selector
        self.since = time.time()

    def __str__(self) -> str:
        return (
            f"worker {self.partition}.{self.attempt} on {self.executor} "
            f"(pid {self.pid}, blocks {list(self.blocks)})"
        )


def check_options(
    *,
    connect_timeout: Any,
    start_grace: Any,
    heartbeat_seconds: Any,
    silence_seconds: Any,
    reconnect_seconds: Any,
    submit_wait: Any,
    max_versions: Any,
    max_frame_bytes: Any,
    num_tasks: Any,
    max_relaunches: Any,
) -> None:
    """The transport's options, each checked once: a ValueError names the option and its range."""
    for name, value in (
        ("connect_timeout", connect_timeout),
        ("heartbeat_seconds", heartbeat_seconds),
        ("silence_seconds", silence_seconds),
        ("reconnect_seconds", reconnect_seconds),
        ("submit_wait", submit_wait),
    ):
        check_number(name, value, strict=True)
    if start_grace is not None:
        check_number("start_grace (or None)", start_grace)
    if not silence_seconds > heartbeat_seconds:
        raise ValueError(
            f"silence_seconds ({silence_seconds}) must exceed heartbeat_seconds "
            f"({heartbeat_seconds})"
        )
    check_int("max_versions", max_versions, 1)
    check_int("max_frame_bytes", max_frame_bytes, 1)
    if num_tasks is not None:
        check_int("num_tasks", num_tasks, 1)
    check_int("max_relaunches", max_relaunches, 0)


def bind_host(spark: Any, host: str | None, connect: bool) -> str:
    """The address the server listens on: ``host``, else ``spark.async_spark.resident.host``,
    else the client's address towards the server on a Spark Connect session (``connect``), else
    ``spark.driver.host`` (or ``SPARK_LOCAL_IP``, or loopback). Never a wildcard address."""
    from .connect import HOST_CONF, client_address, conf_value

    host = host or conf_value(spark, HOST_CONF)
    if host is None and connect:
        host = client_address(spark)  # spark.driver.host is the server's, not ours
    if host is None:
        try:
            host = spark.conf.get("spark.driver.host", None)
        except Exception:
            host = None
        host = host or os.environ.get("SPARK_LOCAL_IP") or "127.0.0.1"
    if host in ("", "0.0.0.0", "::", "[::]", "*"):
        raise ValueError(
            f"the resident transport listens only on a definite address, not {host!r}: set "
            "spark.driver.host (or SPARK_LOCAL_IP) to this machine's address on the executors' "
            "network, or give ResidentTransport(host=...)"
        )
    return host


def advertised_address(spark: Any, advertise: str | None, host: str, port: int) -> tuple[str, int]:
    """What the workers dial: ``advertise`` or ``spark.async_spark.resident.advertise`` when set
    (NAT, forwarding), else where the server listens."""
    from .connect import ADVERTISE_CONF, conf_value, parse_advertise

    value = advertise or conf_value(spark, ADVERTISE_CONF)
    return (host, port) if not value else parse_advertise(value, port)


def no_worker_error(
    dialed: tuple[str, int], bound: tuple[str, int], connect: bool, seconds: float
) -> RuntimeError:
    """The one-line error when no resident task connected within ``seconds``: what the
    executors could not reach and what to set."""
    host, port = dialed
    if connect:
        listening = "" if dialed == bound else f" (listening on {bound[0]}:{bound[1]})"
        return RuntimeError(
            f"no resident task connected back to this Spark Connect client at {host}:{port}"
            f"{listening} within {seconds:.0f} s: the executors cannot reach the "
            "client (or have no free slot); set spark.async_spark.resident.advertise="
            "HOST[:PORT] (or SPARK_ASYNC_SPARK_RESIDENT_ADVERTISE) to an address of this "
            "machine that the executors can reach, or run the client on the cluster's network"
        )
    return RuntimeError(
        f"no resident task connected to the driver at {host}:{port} within "
        f"{seconds:.0f} s: the executors cannot reach it (or have no free "
        "slot); set spark.driver.host (or SPARK_LOCAL_IP) to an address of this machine "
        "that the executors can reach"
    )


def configured_local_socket(spark: Any) -> bool:
    """``spark.async_spark.resident.localSocket`` (or its environment variable) if set, else
    True."""
    from .connect import LOCAL_SOCKET_CONF, conf_value

    value = conf_value(spark, LOCAL_SOCKET_CONF)
    if value is None or value.strip() == "":
        return True
    word = value.strip().lower()
    if word not in ("true", "false"):
        raise ValueError(f"{LOCAL_SOCKET_CONF} must be true or false, got {value!r}")
    return word == "true"


class LocalServer:
    """A Unix-domain listener beside the TCP one, for the workers on the driver's own machine
    (local mode, a ``local-cluster``, executors beside the driver): the same handshake and frames,
    without the TCP/IP stack, so the kernel spends less time per message than over loopback TCP
    (``benchmarks/engine_overhead.py`` measures both, bare and through the transport).

    The socket lives in a fresh directory of mode 0700 (:func:`tempfile.mkdtemp`): only this
    user's processes can even reach it, and each connection still proves the run's secret. A
    worker on another machine, in another container or as another user does not see the path and
    dials TCP. :meth:`close` removes the directory; one left by a driver that was killed (its pid
    is in the name) is removed by the next :meth:`open` on the machine."""

    FILE = "driver.sock"
    PREFIX = "async-spark-sock-"

    def __init__(self, server: socket.socket, path: str) -> None:
        self.server = server
        self.path = path

    @classmethod
    def open(cls, backlog: int) -> LocalServer | None:
        """A listening server, or None (logged) where this platform has no Unix sockets or the
        path cannot be bound (e.g. longer than the platform allows): the workers dial TCP."""
        if not hasattr(socket, "AF_UNIX"):
            return None
        sweep_orphans(cls.PREFIX)
        directory = tempfile.mkdtemp(prefix=f"{cls.PREFIX}{os.getpid()}-")
        path = os.path.join(directory, cls.FILE)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(path)
            server.listen(backlog)
        except OSError as exc:
            server.close()
            shutil.rmtree(directory, ignore_errors=True)
            log.info("resident transport: no local socket at %s (%s); workers dial TCP", path, exc)
            return None
        return cls(server, path)

    def close(self) -> None:
        try:
            stop_listening(self.server)
        finally:
            shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)


def stop_listening(server: socket.socket) -> None:
    """Close a listening socket and wake the thread blocked in its ``accept`` now (on Linux a
    ``close`` alone leaves it blocked until its timeout: half a second of every run's end)."""
    try:
        server.shutdown(socket.SHUT_RDWR)
    except OSError:  # not listening, or already shut
        pass
    server.close()


def sweep_orphans(prefix: str, parent: str | None = None) -> int:
    """Remove this user's ``<parent>/<prefix><pid>-*`` directories whose pid is no longer
    running (a driver killed before it could close its listener); how many went. A pid reused
    since only keeps a directory a while longer; a temporary directory shared by containers with
    their own pids can lose a live run's path, whose workers then dial TCP (the connections
    made stay)."""
    if os.name != "posix":  # (os.kill(pid, 0) tests a pid on POSIX only)
        return 0
    parent = parent or tempfile.gettempdir()
    removed = 0
    try:
        names = os.listdir(parent)
    except OSError:
        return 0
    uid = os.getuid() if hasattr(os, "getuid") else None
    for name in names:
        pid_text = name[len(prefix) :].split("-", 1)[0] if name.startswith(prefix) else ""
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or _running(int(pid_text)):
            continue
        path = os.path.join(parent, name)
        try:
            info = os.lstat(path)  # (not followed: a link is not a directory here)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or (uid is not None and info.st_uid != uid):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process: it exists
        return True
    return True


def socket_kind(sock: socket.socket) -> str:
    """``"local"`` for a Unix-domain connection, ``"tcp"`` otherwise."""
    return "local" if sock.family == getattr(socket, "AF_UNIX", None) else "tcp"

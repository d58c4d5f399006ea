"""The resident transport: one Spark job of long-running tasks per run, tickets over a socket.

A run starts ONE Spark job through the DataFrame API (``spark.range(T, numPartitions=T)
.mapInArrow(worker, schema)``, collected in a driver thread), whose T tasks stay resident: each owns
the blocks ``b`` with ``b % T == partition`` (or, when the data is a DataFrame's partitions, the
job maps over that DataFrame and each task owns the partitions it reads), connects back to a TCP server that this transport opens
on ``spark.driver.host``, proves the run's secret (:mod:`.wire`), announces its blocks and then
serves *tickets*: (task id, block, model version, args, straggler delay) plus the model — the full
array the first time, then a bit-exact sparse delta against a version the worker holds when that is
smaller, or nothing when the worker already holds the version. It runs the task function exactly as
:func:`~async_spark.engine.task.run_task` does and sends the payload back. The per-task cost is the
payload and the compute, not a Spark job (~100 ms on the job transport).

Faults: a dropped connection turns its tickets in flight into FAILED outcomes (the scheduler core
re-dispatches with backoff) and its blocks wait until a task announces them again — the same task
reconnecting, or Spark's retry of a lost task on any executor; a ticket for an unreachable block
waits at most ``submit_wait`` seconds, then fails. Heartbeats run both ways: the driver drops a
worker silent for ``silence_seconds``, and a worker whose driver is gone (closed connection,
refused reconnection, or silence) returns, which ends its Spark task. If the whole job fails (e.g.
``local[N]`` retries nothing), it is launched again, at most ``max_relaunches`` times. A task
whose blocks another task announces is told to exit, and so is a task of an earlier launch or
attempt that outlived Spark's kill: two tasks never take turns at one block.

Spark Connect: the launch is the DataFrame API only, so a Connect session (no SparkContext) runs
the same job; the server then lives in the *client* process, which the executors must reach. It
listens on the client's address towards the Connect server (:func:`.connect.client_address`) and
the executors dial it, or the address given by ``advertise`` / ``spark.async_spark.resident.advertise``
(NAT, port forwarding); the job carries a session tag, interrupted when the run ends or fails.

This module is the driver's side: the connections, their tickets in flight, results and faults.
The job itself, launched and relaunched, is :mod:`.resident_job`'s; accepting a connection and
checking its secret and hello, :mod:`.resident_admit`'s; reading the sockets in the thread that
waits for results, :mod:`.resident_poll`'s; a ticket's encoding and send,
:mod:`.resident_tickets`'s; one connection, the options and the server's address,
:mod:`.resident_conn`'s; the versions each worker holds, :mod:`.resident_versions`'s. What runs
in the executors is :mod:`.resident_worker`. See
``docs/resident.md`` for the protocol, the security model and how to use it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import secrets
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from .core import TaskStatus, TaskTicket
from .errors import SideCallFailed
from .history import InlinePublisher, InlineRef
from .resident_admit import Admission
from .resident_conn import (
    LocalServer,
    WorkerConnection,
    advertised_address,
    bind_host,
    check_options,
    configured_local_socket,
    no_worker_error,
    socket_kind,
    stop_listening,
)
from .resident_job import ResidentJob, configured_connect_timeout
from .resident_poll import OutcomeQueue, SocketPoller
from .resident_tickets import TicketWriter
from .resident_worker import WorkerConfig
from .stragglers import NO_DELAY
from .task import (
    TaskFunction,
    TaskReport,
    keeps_held_rows,
)
from .transport import Outcome, TaskCall, Transport
from .wire import (
    DEFAULT_MAX_BODY_BYTES,
    BadHeader,
    ConnectionClosed,
    Frame,
    FrameReader,
    UnsupportedValue,
    WireError,
    encode_frame,
    send_frame,
)

log = logging.getLogger(__name__)

__all__ = ["ResidentTransport", "SideCallFailed"]

_EXIT_WAIT = 10.0  # seconds close() waits for the workers to leave before cancelling the job
_LATE_EXIT_WAIT = 1.0  # the same when some task never connected (it would not hear "exit")
_EXIT = tuple(encode_frame("exit"))  # what tells a worker to leave (immutable: sent as is)


class ResidentTransport(Transport):
    """Runs tasks on resident Spark tasks that hold their blocks and the model versions they saw.

    Parameters
    ----------
    spark : SparkSession (or SparkContext)
        The run's session; its ``spark.driver.host`` is the address the workers connect to.
    task_fn : callable, optional
        The task function; by default the one :class:`~async_spark.engine.AsyncEngine` passes to
        :meth:`start`. It travels once, in the job's closure, as any PySpark UDF.
    num_tasks : int, optional
        Resident tasks (default: min(blocks, ``sc.defaultParallelism``)); each owns the blocks
        ``b % num_tasks == task``, or the partitions it reads of ``source``'s DataFrame.
    host : str, optional
        Address to listen on and to give the workers (default: ``spark.async_spark.resident.host``
        if set, else ``spark.driver.host`` on a classic session and the client's address towards
        the server on a Spark Connect session). Never a wildcard address.
    advertise : str, optional
        ``host[:port]`` the workers dial instead (default:
        ``spark.async_spark.resident.advertise`` or ``SPARK_ASYNC_SPARK_RESIDENT_ADVERTISE`` if
        set): when the executors reach this machine under another address (NAT, forwarding).
    connect_timeout : float, optional
        Seconds :meth:`start` waits for the tasks to connect (default 60 on a classic session, 40
        on a Connect one, or ``spark.async_spark.resident.connectTimeout``); with none connected
        it fails with one line naming the address and what to set, and the job is interrupted.
    start_grace : float or None
        Once the first worker has connected, :meth:`start` waits at most this many seconds more
        for the others (default 0.5), then returns: the blocks of a worker that is slow to start
        (a busy or throttled executor, a late slot) are dispatched when it connects, so an
        asynchronous run does not wait for its slowest executor to begin. None waits for every
        worker (up to ``connect_timeout``).
    heartbeat_seconds, silence_seconds : float
        Both sides send a heartbeat this often when idle; a peer silent for ``silence_seconds`` is
        dropped (a worker whose driver is gone exits).
    reconnect_seconds : float
        How long a worker whose connection broke keeps trying to reconnect.
    submit_wait : float
        How long a ticket for a block whose worker is not connected waits before it fails.
    max_versions : int
        Model versions each worker keeps (deltas are computed against them).
    max_frame_bytes : int
        Largest frame body accepted from the network (models and payloads), either side.
    max_relaunches : int
        Times the job is launched again when it fails (every task lost) while the run goes on.
    keep_tables : bool
        Whether workers keep the per-block tables that tasks read rows of (SAGA's scalars:
        :class:`~.task.HeldRows`, :mod:`.tables`), so that a ticket carries a label instead of
        the rows (default True). False ships the rows with every ticket, as the other
        transports do (for comparison).
    local_socket : bool, optional
        Whether the workers on the driver's machine (local mode, a ``local-cluster``, executors
        beside the driver) connect over a Unix-domain socket in a private directory instead of
        loopback TCP: the same handshake and frames, less kernel time per message
        (:class:`~.resident_conn.LocalServer`). Default: ``spark.async_spark.resident.localSocket``
        if set, else True. Workers elsewhere dial TCP either way.
    source : BlockSource, optional
        The run's dataset. When its blocks are a DataFrame's partitions
        (:func:`~async_spark.data.frame.open_frame`), the job maps over that DataFrame and each
        task decodes and holds the partitions it reads; otherwise tasks open their blocks from
        the source themselves.
    """

    def __init__(
        self,
        spark: Any,
        *,
        task_fn: TaskFunction | None = None,
        num_tasks: int | None = None,
        host: str | None = None,
        advertise: str | None = None,
        connect_timeout: float | None = None,
        start_grace: float | None = 0.5,
        heartbeat_seconds: float = 1.0,
        silence_seconds: float = 15.0,
        reconnect_seconds: float = 5.0,
        submit_wait: float = 30.0,
        max_versions: int = 4,
        max_frame_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_relaunches: int = 2,
        keep_tables: bool = True,
        local_socket: bool | None = None,
        source: Any = None,
    ) -> None:
        super().__init__()
        from pyspark import SparkContext

        if isinstance(spark, SparkContext):
            from pyspark.sql import SparkSession

            spark = SparkSession(spark)
        from .connect import is_connect

        self.connect = is_connect(spark)
        if connect_timeout is None:
            connect_timeout = configured_connect_timeout(spark, self.connect)
        check_options(
            connect_timeout=connect_timeout,
            start_grace=start_grace,
            heartbeat_seconds=heartbeat_seconds,
            silence_seconds=silence_seconds,
            reconnect_seconds=reconnect_seconds,
            submit_wait=submit_wait,
            max_versions=max_versions,
            max_frame_bytes=max_frame_bytes,
            num_tasks=num_tasks,
            max_relaunches=max_relaunches,
        )
        from async_spark.data.frame import frame_of

        self.spark = spark
        self._frame = None if source is None else frame_of(source)
        self._frame_source = None
        if self._frame is not None:
            self._frame_source = source.inner if hasattr(source, "inner") else source
        self.on_frame = self._frame is not None
        self.publisher = InlinePublisher()  # versions stay on the driver; sent once per worker
        self._task_fn = task_fn
        self._num_tasks = num_tasks
        self._host = host
        self._advertise = advertise
        self.connect_timeout = float(connect_timeout)
        self.start_grace = None if start_grace is None else float(start_grace)
        self.heartbeat_seconds = float(heartbeat_seconds)
        self.silence_seconds = float(silence_seconds)
        self.reconnect_seconds = float(reconnect_seconds)
        self.submit_wait = float(submit_wait)
        self.max_versions = max_versions
        self.max_frame_bytes = max_frame_bytes
        self.max_relaunches = max_relaunches
        self.keep_tables = bool(keep_tables)
        self.local_socket = configured_local_socket(spark) if local_socket is None else local_socket
        self.handshake_timeout = 10.0

        # One lock for the transport's tables; the hot paths (a ticket out, a result in) take
        # it directly, not through the Condition's Python-level __enter__.
        self._mutex = threading.RLock()
        self._lock = threading.Condition(self._mutex)
        self._owners: dict[int, WorkerConnection] = {}
        self._conns: set[WorkerConnection] = set()
        # task id -> its connection (None: pending)
        self._where: dict[int, WorkerConnection | None] = {}
        self._pending: dict[int, deque[tuple[TaskTicket, TaskCall, float]]] = {}
        self._tickets = TicketWriter(self._mutex, max_versions, self._send, self._drop)
        # side calls: negative task ids (and model versions), outside the engine's accounting
        self._side: dict[int, Future[Any]] = {}
        self._side_ids = itertools.count(-1, -1)
        self._started_fn: TaskFunction | None = None
        self._threads: list[threading.Thread] = []
        # one reader at a time: the thread waiting for outcomes, else the monitor
        self._poller = SocketPoller()
        self.outcomes = OutcomeQueue(self._poll, self._poller.wake)  # type: ignore[assignment]
        self._server: socket.socket | None = None
        self._local: LocalServer | None = None  # the Unix-domain listener, where there is one
        self._closing = threading.Event()
        self._started = False
        self._closed = False
        self._fatal: str | None = None
        self._job_error: str | None = None
        self._job: ResidentJob | None = None
        self.blocks_waiting_at_start = 0  # blocks without a worker when start() returned
        self.address: tuple[str, int] | None = None  # where the server listens
        self.advertised: tuple[str, int] | None = None  # what the workers dial

    # --- lifecycle ----------------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        return self.stats

    def keeps_tables(self, task_fn: TaskFunction) -> bool:
        """Yes, for a task function that says which rows its tasks read and write
        (:func:`~.task.keeps_held_rows`): each worker keeps its blocks' tables (:mod:`.tables`)."""
        return self.keep_tables and keeps_held_rows(task_fn)

    def start(
        self, num_blocks: int, slots: int, run_name: str, *, task_fn: TaskFunction | None = None
    ) -> None:
        if self._started:
            raise RuntimeError("a ResidentTransport serves one run: make a new one")
        self._started = True
        fn = self._task_fn if self._task_fn is not None else task_fn
        if fn is None:
            raise ValueError(
                "ResidentTransport needs the task function: AsyncEngine passes it to "
                "start(task_fn=...), or give ResidentTransport(spark, task_fn=...)"
            )
        if self._frame_source is not None and num_blocks != self._frame_source.num_blocks:
            raise ValueError(
                f"the run has {num_blocks} blocks but its DataFrame "
                f"{self._frame_source.num_blocks} partitions"
            )
        self.run_name = run_name
        self.num_blocks = num_blocks
        self._started_fn = fn
        self.num_tasks = min(num_blocks, self._num_tasks or self._parallelism(num_blocks))
        host = bind_host(self.spark, self._host, self.connect)
        try:
            self._server = socket.create_server((host, 0), backlog=128)
            port = self._server.getsockname()[1]
            self._server.settimeout(0.5)
            self._local = LocalServer.open(backlog=128) if self.local_socket else None
            if self._local is not None:
                self._local.server.settimeout(0.5)
            self.address = (host, port)
            self.advertised = advertised_address(self.spark, self._advertise, host, port)
            self._secret = secrets.token_bytes(32)
            self.run_id = uuid.uuid4().hex
            cfg = WorkerConfig(
                host=self.advertised[0],
                port=self.advertised[1],
                secret=self._secret,
                run_id=self.run_id,
                num_blocks=num_blocks,
                num_tasks=self.num_tasks,
                task_fn=fn,
                heartbeat_seconds=self.heartbeat_seconds,
                silence_seconds=self.silence_seconds,
                connect_seconds=self.connect_timeout,
                reconnect_seconds=self.reconnect_seconds,
                max_body_bytes=self.max_frame_bytes,
                max_versions=self.max_versions,
                frame=self._frame_source,
                local_path=None if self._local is None else self._local.path,
            )
            self._poller.open()
            admission = Admission(
                self._server,
                self._secret,
                max_frame_bytes=self.max_frame_bytes,
                handshake_timeout=self.handshake_timeout,
                closing=self._closing,
                register=self._register,
                early_frames=self._early_frames,
                spawn=self._spawn,
            )
            self._spawn(admission.accept_loop, "async-spark-resident-accept")
            if self._local is not None:
                self._spawn(
                    admission.accept_loop, "async-spark-resident-accept-local", self._local.server
                )
            self._spawn(self._monitor_loop, "async-spark-resident-monitor")
            self._job = ResidentJob(
                self.spark,
                cfg,
                tag=f"async-spark-resident-{self.run_id[:12]}",
                description=f"{run_name}: resident tasks ({self.num_tasks}) for {num_blocks} blocks",
                num_tasks=self.num_tasks,
                frame=self._frame,
                frame_partitions=0
                if self._frame_source is None
                else self._frame_source.frame_partitions,
                max_relaunches=self.max_relaunches,
                closing=self._closing,
                on_end=self._on_job_end,
                on_fatal=self._set_fatal,
            )
            self._job.start()
            self._wait_connected()
        except BaseException:
            if self._job is not None:
                self._job.cancel()  # at once: no task may stay behind a run that did not start
            self.close()
            raise

    def _await_job(self, job: threading.Thread, seconds: float) -> None:
        """Wait for the job to end, reading the sockets meanwhile: a worker blocked sending a
        result larger than its socket's buffer reads its exit only once that send is done."""
        end = time.monotonic() + seconds
        while job.is_alive() and (left := end - time.monotonic()) > 0:
            self._poll(min(0.05, left))

    def _parallelism(self, num_blocks: int) -> int:
        from .connect import default_parallelism

        try:
            return default_parallelism(self.spark)  # Connect: one tiny job (no SparkContext)
        except Exception:
            return num_blocks

    def _spawn(self, target: Any, name: str, *args: Any) -> threading.Thread:
        t = threading.Thread(target=target, name=name, args=args, daemon=True)
        t.start()
        self._threads.append(t)
        return t

    def _wait_connected(self) -> None:
        """Until every block's worker connected, or ``start_grace`` after the first did (the
        rest are dispatched when they connect), or ``connect_timeout``."""
        deadline = time.monotonic() + self.connect_timeout
        first: float | None = None  # when the first worker connected
        with self._lock:
            while True:
                reached = len(self._owners)
                if reached == self.num_blocks:
                    return
                if self._fatal is not None or (self._job_error and not self._conns):
                    raise RuntimeError(
                        f"the resident Spark job failed before its tasks connected: "
                        f"{self._fatal or self._job_error}"
                    )
                now = time.monotonic()
                if reached and first is None:
                    first = now
                grace_left = math.inf
                if first is not None and self.start_grace is not None:
                    grace_left = first + self.start_grace - now
                    if grace_left <= 0:
                        log.info(
                            "resident transport: starting with %d of %d blocks connected; the "
                            "others are dispatched when their tasks connect",
                            reached,
                            self.num_blocks,
                        )
                        self.blocks_waiting_at_start = self.num_blocks - reached
                        return
                left = deadline - now
                if left <= 0:
                    break
                self._lock.wait(min(left, grace_left, 0.25))
            reached = len(self._owners)
        if reached == 0:
            bound = self.address or ("?", 0)
            raise no_worker_error(
                self.advertised or bound, bound, self.connect, self.connect_timeout
            )
        log.warning(
            "resident transport: %d of %d blocks connected after %.0f s; the others are "
            "dispatched when their tasks connect",
            reached,
            self.num_blocks,
            self.connect_timeout,
        )

    @property
    def launches(self) -> int:
        """How many times the resident job was launched (1 unless it ended while the run went on)."""
        return 0 if self._job is None else self._job.launches

    def _on_job_end(self, error: str) -> None:
        with self._lock:
            self._job_error = error
            self._lock.notify_all()

    def _set_fatal(self, message: str) -> None:
        log.error("resident transport: %s", message)
        with self._lock:
            self._fatal = message
            pending = self._take_all_pending()
            self._lock.notify_all()
        for ticket, t0 in pending:
            self._emit(ticket, TaskStatus.FAILED, None, t0, message)

    def close(self, timeout: float = 30.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        deadline = time.monotonic() + timeout
        try:
            with self._lock:
                pending = self._take_all_pending()
                conns = list(self._conns)
            for ticket, t0 in pending:
                self._emit(ticket, TaskStatus.CANCELLED, None, t0)
            for conn in conns:
                self._send(conn, _EXIT)
            job = self._job
            if job is not None and job.thread is not None:
                log.debug("resident transport: %d workers told to exit", len(conns))
                # A task that never connected (no slot yet, a late executor) cannot be told to
                # exit: give the others a moment to leave, then cancel the job.
                started = len({c.partition for c in conns}) >= self.num_tasks
                wait = _EXIT_WAIT if started else _LATE_EXIT_WAIT
                self._await_job(job.thread, max(0.0, min(wait, deadline - time.monotonic())))
                log.debug("resident transport: job thread alive=%s", job.alive())
                if job.alive():
                    if started:
                        log.warning("resident transport: workers did not leave; cancelling the job")
                    else:  # expected: a late task is cancelled before it starts
                        log.info("resident transport: a task never connected; cancelling the job")
                    job.cancel()
                    job.thread.join(max(0.0, deadline - time.monotonic()))
        finally:
            if self._server is not None:
                try:
                    stop_listening(self._server)
                except OSError:
                    pass
            if self._local is not None:
                self._local.close()
            with self._lock:
                conns = list(self._conns)
            for conn in conns:
                self._drop(conn, "transport closed")
            for t in self._threads:
                t.join(max(0.1, deadline - time.monotonic()))
            self._poller.close()
            log.debug("resident transport: closed")
            with self._lock:
                self._tickets.versions.clear()
                leftover = list(self._side)
            for side_id in leftover:
                self._settle_side(side_id, TaskStatus.CANCELLED, None, "transport closed")
        alive = [t.name for t in self._threads if t.is_alive()]
        if self._job is not None and self._job.alive():
            alive.append("async-spark-job")
        if alive:
            raise RuntimeError(
                f"resident transport threads did not stop within {timeout}s: {alive}"
            )

    # --- submit / cancel ----------------------------------------------------------------------
    def submit(self, ticket: TaskTicket, call: TaskCall) -> None:
        if self._closed:
            raise RuntimeError("transport is closed")
        t0 = time.monotonic()
        with self._mutex:
            fatal = self._fatal
            conn = None
            if fatal is None:
                conn = self._owners.get(ticket.block)
                if conn is None:
                    self._pending.setdefault(ticket.block, deque()).append((ticket, call, t0))
                    self._where[ticket.task_id] = None
                    return
                self._where[ticket.task_id] = conn
                conn.in_flight[ticket.task_id] = (ticket, t0)
        if conn is None:  # the transport failed as a whole
            self._emit(ticket, TaskStatus.FAILED, None, t0, fatal)
            return
        try:
            self._send_ticket(conn, ticket, call)
        except UnsupportedValue:
            if self._take(ticket.task_id) is not None:
                raise  # the engine fails the dispatch; nothing was sent

    def side_call(self, block: int, model: Any, args: Any) -> Future[Any]:
        """Run the task function once on ``block``'s worker, at ``model`` with ``args``, outside
        the engine's accounting (no version of the run, no policy, no retry): a future of its
        payload, failed with :class:`SideCallFailed` when the worker is lost, the task fails, the
        block has no worker within ``submit_wait`` or the transport closes.

        The worker runs it between the run's tickets, on the data it holds: how a run that stops
        at a target objective evaluates its snapshots while training (the resident tasks hold the
        executors' slots, so an evaluation job would wait for the run's end). The model travels
        like a version (held, delta or full) under a negative version number of its own."""
        fn = self._started_fn
        if fn is None:
            raise RuntimeError("side_call needs a started transport")
        future: Future[Any] = Future()
        side_id = next(self._side_ids)
        with self._mutex:
            self._side[side_id] = future
        ticket = TaskTicket(block, side_id, side_id, -1, False)
        call = TaskCall(fn, InlineRef(model), block, side_id, side_id, args, NO_DELAY)
        try:
            self.submit(ticket, call)
        except (RuntimeError, UnsupportedValue) as exc:  # closed, or args that cannot travel
            self._settle_side(side_id, TaskStatus.FAILED, None, str(exc))
        if self._closed:  # close() may have swept before this call was in its tables
            self._settle_side(side_id, TaskStatus.CANCELLED, None, "transport closed")
        return future

    def _settle_side(
        self, side_id: int, status: TaskStatus, report: TaskReport | None, error: str | None
    ) -> None:
        with self._mutex:
            future = self._side.pop(side_id, None)
        if future is None:
            return
        if status is TaskStatus.OK and report is not None:
            future.set_result(report.payload)
        else:
            why = error or status.name.lower()
            future.set_exception(SideCallFailed(f"side call {side_id}: {why}"))

    def _send_ticket(self, conn: WorkerConnection, ticket: TaskTicket, call: TaskCall) -> None:
        self._tickets.send(conn, ticket, call)

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Small tickets submitted by this thread inside the context go out when it ends, one
        write per worker connection (:meth:`.TicketWriter.batch`)."""
        return self._tickets.batch()

    def outcome_waiting(self) -> bool:
        """Yes when results read off the sockets wait in :attr:`outcomes`: the engine takes
        them all before dispatching, and each worker's new tickets go in one write."""
        return not self.outcomes.empty()

    def cancel(self, ticket: TaskTicket) -> None:
        with self._lock:
            if ticket.task_id not in self._where:
                return
            conn = self._where[ticket.task_id]
            if conn is None:  # still waiting for its block's worker
                taken = self._take_locked(ticket.task_id)
            else:
                taken = None
        if conn is None:
            if taken is not None:
                self._emit(taken[0], TaskStatus.CANCELLED, None, taken[1])
            return
        self._send(conn, encode_frame("cancel", {"id": ticket.task_id}))

    def _send(self, conn: WorkerConnection, parts: Sequence[Any], lock_timeout: float = -1) -> bool:
        if not conn.send_lock.acquire(timeout=lock_timeout):
            return False
        try:
            if conn.closed:
                return False
            send_frame(conn.sock, parts)
            conn.last_sent = time.monotonic()
            return True
        except OSError as exc:
            error: OSError | None = exc
        finally:
            conn.send_lock.release()
        self._drop(conn, f"send failed: {error}")
        return False

    # --- bookkeeping of tickets -----------------------------------------------------------------
    def _take(self, task_id: int) -> tuple[TaskTicket, float] | None:
        with self._lock:
            return self._take_locked(task_id)

    def _take_locked(self, task_id: int) -> tuple[TaskTicket, float] | None:
        if task_id not in self._where:
            return None
        conn = self._where.pop(task_id)
        if conn is not None:
            return conn.in_flight.pop(task_id, None)
        for block, waiting in self._pending.items():
            for item in waiting:
                if item[0].task_id == task_id:
                    waiting.remove(item)
                    if not waiting:
                        del self._pending[block]
                    return item[0], item[2]
        return None

    def _take_all_pending(self) -> list[tuple[TaskTicket, float]]:
        out = []
        for waiting in self._pending.values():
            for ticket, _call, t0 in waiting:
                self._where.pop(ticket.task_id, None)
                out.append((ticket, t0))
        self._pending.clear()
        return out

    def _emit(
        self,
        ticket: TaskTicket,
        status: TaskStatus,
        report: TaskReport | None,
        t0: float,
        error: str | None = None,
    ) -> None:
        if ticket.task_id < 0:  # a side call: its future, not the engine's outcomes
            self._settle_side(ticket.task_id, status, report, error)
            return
        self.outcomes.put(Outcome(ticket, status, report, time.monotonic() - t0, error))

    # --- connections --------------------------------------------------------------------------
    def _poll(self, timeout: float) -> None:
        """Read whatever the workers sent, waiting up to ``timeout`` for something
        (:meth:`.SocketPoller.poll`)."""
        self._poller.poll(timeout, self._read)

    def _early_frames(self, conn: WorkerConnection, frames: list[Frame]) -> None:
        with self._poller.reading():  # frames that came with the hello, handled as read
            for frame in frames:
                if not self._handle(conn, frame):
                    break

    def _read(self, conn: WorkerConnection) -> None:
        try:
            frames = conn.reader.read(conn.sock)
        except ConnectionClosed as exc:
            self._drop(conn, str(exc))
            return
        except (WireError, OSError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            if not self._closing.is_set():
                log.warning(
                    "resident transport: closed connection from %s (%s): %s",
                    conn.peer,
                    conn,
                    reason,
                )
            self._drop(conn, reason)
            return
        if frames:
            conn.last_seen = time.monotonic()
        for frame in frames:
            if not self._handle(conn, frame):
                return

    def _handle(self, conn: WorkerConnection, frame: Frame) -> bool:
        try:
            self._on_frame(conn, frame.kind, frame.fields, frame.payload)
            return True
        except WireError as exc:
            reason = f"{type(exc).__name__}: {exc}"
            log.warning(
                "resident transport: closed connection from %s (%s): %s", conn.peer, conn, reason
            )
            self._drop(conn, reason)
            return False

    def _register(
        self, sock: socket.socket, peer: str, kind: str, f: dict[str, Any], reader: FrameReader
    ) -> WorkerConnection:
        if kind != "hello":
            raise BadHeader(f"expected a hello, got {kind!r}")
        blocks = f.get("blocks")
        if f.get("run") != self.run_id:
            raise BadHeader("hello from another run")
        if not (
            isinstance(blocks, list)
            and len(set(blocks)) == len(blocks) <= self.num_blocks
            and all(type(b) is int and 0 <= b < self.num_blocks for b in blocks)
        ):
            raise BadHeader(f"hello announces bad blocks {str(blocks)[:80]}")
        try:
            conn = WorkerConnection(sock, peer, f, reader)
        except (TypeError, ValueError) as exc:
            raise BadHeader(f"bad hello: {exc}") from None
        with self._lock:
            replaced = {self._owners[b] for b in conn.blocks if b in self._owners}
        current = 1 if self._job is None else self._job.launches
        newer = [o for o in replaced if (o.launch, o.attempt) > (conn.launch, conn.attempt)]
        if conn.launch < current or newer:
            # a task of a failed launch, or an attempt Spark has retried, that Spark's kill did
            # not reach: it must not take its blocks from the newer task, nor reconnect again
            try:
                send_frame(sock, _EXIT)
            except OSError:
                pass
            raise BadHeader(
                f"{conn} is from launch {conn.launch} of {current}"
                + (f", older than {newer[0]}" if newer else "")
                + ": told to exit"
            )
        for old in replaced:
            # a task Spark retried (or a connection that broke) is superseded: told to exit, so
            # that it does not reconnect and take its blocks back
            self._send(old, _EXIT, lock_timeout=1.0)
            self._drop(old, f"its blocks were announced again by {conn}")
        with self._lock:
            if self._closing.is_set():
                raise ConnectionClosed("transport closing")
            self._conns.add(conn)
            self._poller.add(conn)
            flush = []
            for b in conn.blocks:
                self._owners[b] = conn
                for ticket, call, t0 in self._pending.pop(b, ()):
                    self._where[ticket.task_id] = conn
                    conn.in_flight[ticket.task_id] = (ticket, t0)
                    flush.append((ticket, call))
            self._lock.notify_all()
        log.info("resident transport: %s connected", conn)
        for ticket, call in flush:
            try:
                self._send_ticket(conn, ticket, call)
            except UnsupportedValue as exc:
                taken = self._take(ticket.task_id)
                if taken is not None:
                    self._emit(ticket, TaskStatus.FAILED, None, taken[1], str(exc))
        return conn

    def _on_frame(self, conn: WorkerConnection, kind: str, f: dict[str, Any], payload: Any) -> None:
        if kind == "hb":
            return
        task_id = f.get("id")
        if type(task_id) is not int or kind not in ("result", "error", "cancelled"):
            raise BadHeader(f"unexpected message {kind!r}")
        with self._mutex:
            conn.tables.on_reply(kind, task_id)  # before the outcome: a next ticket reads it
            if self._where.get(task_id) is conn:
                del self._where[task_id]
                taken = conn.in_flight.pop(task_id, None)
            else:
                taken = None
        if taken is None:
            return  # cancelled or failed meanwhile (or from a dropped session)
        ticket, t0 = taken
        if kind == "result":
            compute, sleep = f.get("c"), f.get("s")
            if not (isinstance(compute, int | float) and isinstance(sleep, int | float)):
                self._emit(ticket, TaskStatus.FAILED, None, t0, "malformed result")
                raise BadHeader("a result needs numeric 'c' and 's'")
            report = TaskReport(
                task_id, payload, float(compute), float(sleep), conn.executor, conn.pid
            )
            self._emit(ticket, TaskStatus.OK, report, t0)
        elif kind == "error":
            self._emit(ticket, TaskStatus.FAILED, None, t0, str(f.get("e", "task failed")))
        else:
            self._emit(ticket, TaskStatus.CANCELLED, None, t0)

    def _drop(self, conn: WorkerConnection, reason: str) -> int:
        """Forget a connection: its tickets in flight fail (are cancelled, when closing), its
        blocks wait for a new announcement. Returns how many tickets it failed."""
        with self._lock:
            if conn.closed:
                return 0
            conn.closed = True
            self._conns.discard(conn)
            for b in conn.blocks:
                if self._owners.get(b) is conn:
                    del self._owners[b]
            flights = list(conn.in_flight.values())
            conn.in_flight.clear()
            for ticket, _ in flights:
                self._where.pop(ticket.task_id, None)
            self._tickets.versions.release(conn.held)
        closing = self._closing.is_set()
        if not closing:
            log.warning(
                "resident transport: %s dropped (%s): %d task(s) in flight fail, its blocks wait "
                "for a task to announce them",
                conn,
                reason,
                len(flights),
            )
        status = TaskStatus.CANCELLED if closing else TaskStatus.FAILED
        error = None if closing else f"resident {conn} lost: {reason}"
        for ticket, t0 in flights:
            self._emit(ticket, status, None, t0, error)
        try:
            conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._poller.remove(conn)  # the reader unregisters and closes it
        return len(flights)

    def _monitor_loop(self) -> None:
        tick = min(0.5, self.heartbeat_seconds / 2)
        beat = encode_frame("hb")
        while not self._closing.wait(tick):
            self._poll(0.0)  # read for the engine, unless it is reading
            now = time.monotonic()
            with self._lock:
                conns = list(self._conns)
                expired = []
                for block, waiting in list(self._pending.items()):
                    while waiting and now - waiting[0][2] > self.submit_wait:
                        ticket, _call, t0 = waiting.popleft()
                        self._where.pop(ticket.task_id, None)
                        expired.append((ticket, t0))
                    if not waiting:
                        del self._pending[block]
            for ticket, t0 in expired:
                self._emit(
                    ticket,
                    TaskStatus.FAILED,
                    None,
                    t0,
                    f"block {ticket.block} has no connected resident worker (waited "
                    f"{self.submit_wait:.0f} s)",
                )
            for conn in conns:
                if now - conn.last_seen > self.silence_seconds:
                    self._drop(conn, f"silent for {now - conn.last_seen:.1f} s")
                elif now - conn.last_sent >= self.heartbeat_seconds:
                    self._send(conn, beat, lock_timeout=tick)

    # --- observability and drills --------------------------------------------------------------
    @property
    def stats(self) -> dict[str, int]:
        """Tickets sent, by how their model travelled (``model_full``, ``model_delta``,
        ``model_held``) and, for tickets that read a HeldRows table, how the table did
        (``table_full``, ``table_held``, ``table_commit``: see :mod:`.tables`), the bytes of
        every ticket frame sent (``ticket_bytes``), the socket writes that carried them
        (``ticket_writes``: fewer than tickets when a worker's tickets of one dispatch went
        together), and
        ``copies_kept``: the versions copied on the driver while a worker holds them (the bases
        of deltas; at most ``max_versions`` per worker)."""
        with self._lock:
            return self._tickets.stats()

    def workers(self) -> list[dict[str, Any]]:
        """The connected workers: blocks, executor, Python pid, Spark partition and attempt, the
        socket they came over (``"local"`` or ``"tcp"``), tickets in flight, versions held."""
        with self._lock:
            return [
                {
                    "blocks": list(c.blocks),
                    "executor": c.executor,
                    "pid": c.pid,
                    "partition": c.partition,
                    "attempt": c.attempt,
                    "socket": socket_kind(c.sock),
                    "in_flight": len(c.in_flight),
                    "versions_held": list(c.held),
                }
                for c in sorted(self._conns, key=lambda c: c.partition)
            ]

    def disconnect(self, block: int) -> int | None:
        """Drop the connection of the worker that owns ``block`` (fault drills and tests); the
        worker reconnects within ``reconnect_seconds``. Returns how many of its tickets in flight
        failed, None if no worker owns the block."""
        with self._lock:
            conn = self._owners.get(block)
        if conn is None:
            return None
        return self._drop(conn, "disconnected on request")

"""The resident transport's executor side: a long-running Spark task that serves tickets.

:class:`WorkerEntry` is the ``mapInArrow`` function of the run's one Spark job (see
:mod:`.resident` for the driver and ``docs/resident.md`` for the protocol). Each task drains its
partition (block ids, or a DataFrame's rows, decoded and held), connects back to the driver,
proves the run's secret and serves tickets until the driver says exit or is gone. What it keeps
between tickets: the model versions it was sent (the driver mirrors which) and the HeldRows
tables of its blocks. Nothing here is unpickled from the network: frames are :mod:`.wire`'s.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .stragglers import NO_DELAY, Delay
from .tables import TableInstruction, WorkerTables
from .task import TaskFunction, executor_identity, timed_task
from .transport import _describe
from .wire import (
    BadHeader,
    ConnectionClosed,
    UnsupportedValue,
    WireError,
    client_handshake,
    configure_socket,
    encode_frame,
    read_frame,
    send_frame,
)

log = logging.getLogger(__name__)

__all__ = [
    "BLOCK_COLUMN",
    "OUTPUT_SCHEMA",
    "WorkerConfig",
    "WorkerEntry",
    "apply_delta",
    "model_delta",
]

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@dataclass(frozen=True)
class WorkerConfig:
    """What a resident task needs (plain values: it travels in the Spark job's closure)."""

    host: str
    port: int
    secret: bytes
    run_id: str
    num_blocks: int
    num_tasks: int
    task_fn: TaskFunction
    heartbeat_seconds: float
    silence_seconds: float
    connect_seconds: float  # first connection: keep trying this long
    reconnect_seconds: float  # after a lost connection: keep trying this long
    max_body_bytes: int
    max_versions: int
    #: a DataFrame's partitions as the blocks (data.frame.FrameSource): each task decodes the
    #: partitions it is given and holds them; None: the tasks open their blocks from the source
    frame: Any = None
    #: which launch of the resident job the task belongs to: after a relaunch the driver tells a
    #: task of an earlier launch that is still alive (Spark's kill did not reach it) to exit
    launch: int = 1
    #: the driver's Unix-domain socket (:class:`.resident_conn.LocalServer`): a task that sees
    #: this path is on the driver's machine and dials it before TCP; None: TCP only
    local_path: str | None = None


class WorkerEntry:
    """The ``mapInArrow`` function: drains its partition (the task's ids, or the DataFrame rows
    of its blocks, decoded and held), serves tickets until the driver says exit or is gone, then
    yields one summary row."""

    def __init__(self, cfg: WorkerConfig) -> None:
        self.cfg = cfg
        self.__name__ = "async_spark_resident_worker"

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        with ExitStack() as holding:
            if self.cfg.frame is not None:  # this task's rows are its blocks: decode, hold them
                blocks = _hold_partitions(self.cfg.frame, batches, holding)
                partition = ctx.partitionId() if ctx is not None else min(blocks, default=-1)
            else:
                ids: set[int] = set()
                for batch in batches:
                    ids.update(int(x) for x in batch.column(0).to_pylist())
                partition = ctx.partitionId() if ctx is not None else min(ids, default=-1)
                blocks = [b for b in range(self.cfg.num_blocks) if b % self.cfg.num_tasks in ids]
            served = _Worker(self.cfg, blocks, partition, attempt).run()
        yield pa.RecordBatch.from_pydict(
            {"partition": [partition], "attempt": [attempt], "tickets": [served]},
            schema=pa.schema(
                [("partition", pa.int64()), ("attempt", pa.int64()), ("tickets", pa.int64())]
            ),
        )


OUTPUT_SCHEMA = "partition long, attempt long, tickets long"
BLOCK_COLUMN = "_async_spark_block"  # a frame row's block: its partition of the prepared frame


def _hold_partitions(source: Any, batches: Iterator[Any], holding: ExitStack) -> list[int]:
    """Decode the rows of each block of this task (rows tagged with their partition,
    ``BLOCK_COLUMN``: a coalesced task reads its partitions one after the other) and hold them
    for the task function while ``holding`` lasts; the blocks, in order. Each block is decoded as
    soon as its partition's rows end, so a task holds one partition's raw rows at a time."""
    from async_spark.data.frame import held

    blocks: list[int] = []
    seen: set[int] = set()
    current: int | None = None
    pending: list[Any] = []

    def finish() -> None:
        block = source.block_of(current) if current is not None else None
        if block is not None and pending:
            holding.enter_context(held(source, block, source.decode(block, iter(pending))))
            blocks.append(block)
        pending.clear()

    for batch in batches:
        ids = batch.column(0).to_numpy()
        if not len(ids):
            continue
        starts = np.flatnonzero(np.diff(ids)) + 1  # where the partition changes in this batch
        for lo, hi in zip(np.r_[0, starts], np.r_[starts, len(ids)], strict=True):
            part = int(ids[lo])
            if part != current:
                finish()
                if part in seen:
                    raise RuntimeError(f"the rows of partition {part} came in two runs")
                current = part
                seen.add(part)
            pending.append(batch if (lo, hi) == (0, len(ids)) else batch.slice(lo, hi - lo))
    finish()
    return sorted(blocks)


def _freeze(value: Any) -> Any:
    """Make the arrays of a model read-only: a held version must not change under a task."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif isinstance(value, tuple | list):
        for v in value:
            _freeze(v)
    elif isinstance(value, dict):
        for v in value.values():
            _freeze(v)
    return value


def _constant(value: Any) -> Any:
    return lambda: value


def apply_delta(base: Any, indices: Any, values: Any) -> np.ndarray:
    if not (
        isinstance(base, np.ndarray)
        and isinstance(indices, np.ndarray)
        and isinstance(values, np.ndarray)
        and values.dtype == base.dtype
        and indices.dtype.kind == "i"
        and indices.shape == values.shape
        and indices.ndim == 1
    ):
        raise BadHeader("a delta needs int indices and values of the base's dtype")
    new = np.array(base, copy=True)
    bits = _UINT[new.dtype.itemsize]
    new.reshape(-1).view(bits)[indices] = values.view(bits)  # bit-exact, NaNs included
    return new


class _Ticket(NamedTuple):
    """A ticket as the worker's compute thread runs it."""

    task_id: int
    block: int
    model: Any
    args: Any
    delay: Delay
    table: TableInstruction | None  # about the block's HeldRows table, if the args hold one
    table_value: Any  # the table itself (instruction "full")


class _Session:
    """One connection of a worker: send lock, liveness, tickets queued and their cancel events."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()
        self.last_seen = time.monotonic()
        self.events: dict[int, threading.Event] = {}
        self.tickets: queue.Queue[_Ticket | None] = queue.Queue()
        self.stop = threading.Event()

    def send(self, parts: list[Any]) -> bool:
        try:
            with self.lock:
                send_frame(self.sock, parts)
            return True
        except OSError:
            self.shutdown()
            return False

    def shutdown(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _dial_local(path: str, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


class _Worker:
    def __init__(self, cfg: WorkerConfig, blocks: list[int], partition: int, attempt: int):
        self.cfg = cfg
        self.blocks = blocks
        self.partition = partition
        self.attempt = attempt
        self.models: OrderedDict[int, Any] = OrderedDict()
        self.tables = WorkerTables()  # HeldRows tables of this worker's blocks
        self.served = 0

    def run(self) -> int:
        """Serve sessions until the driver says exit or cannot be reached; tickets served."""
        cfg = self.cfg
        give_up = time.monotonic() + cfg.connect_seconds
        while True:
            sock = self._connect()
            if sock is None:
                if time.monotonic() >= give_up:
                    log.warning(
                        "resident worker %d.%d: driver %s:%d unreachable, exiting",
                        self.partition,
                        self.attempt,
                        cfg.host,
                        cfg.port,
                    )
                    return self.served
                time.sleep(0.25)
                continue
            if self._session(sock) == "exit":
                return self.served
            give_up = time.monotonic() + cfg.reconnect_seconds

    def _connect(self) -> socket.socket | None:
        """An authenticated connection to the driver: over its local socket when this task is
        on the driver's machine (the path is visible here), else, or if that fails, over TCP."""
        cfg = self.cfg
        path = cfg.local_path
        if path and os.path.exists(path):
            sock = self._authenticated(lambda: _dial_local(path, cfg.silence_seconds))
            if sock is not None:
                return sock
        return self._authenticated(
            lambda: socket.create_connection((cfg.host, cfg.port), timeout=cfg.silence_seconds)
        )

    def _authenticated(self, dial: Callable[[], socket.socket]) -> socket.socket | None:
        try:
            sock = dial()
        except OSError:
            return None
        try:
            configure_socket(sock)
            client_handshake(sock, self.cfg.secret, timeout=self.cfg.silence_seconds)
            return sock
        except (OSError, WireError) as exc:
            log.warning("resident worker: handshake with the driver failed: %s", exc)
            sock.close()
            return None

    def _session(self, sock: socket.socket) -> str:
        cfg = self.cfg
        self.models.clear()  # a new connection: the driver's mirror of what we hold starts empty
        self.tables.clear()
        s = _Session(sock)
        stream = sock.makefile("rb", buffering=1 << 16)
        hello = {
            "run": cfg.run_id,
            "blocks": self.blocks,
            "executor": executor_identity(),
            "pid": os.getpid(),
            "partition": self.partition,
            "attempt": self.attempt,
            "launch": cfg.launch,
        }
        compute = threading.Thread(target=self._compute, args=(s,), daemon=True)
        beat = threading.Thread(target=self._heartbeat, args=(s,), daemon=True)
        result = "lost"
        try:
            if not s.send(encode_frame("hello", hello)):
                return result
            compute.start()
            beat.start()
            while True:
                frame = read_frame(stream, cfg.max_body_bytes)
                s.last_seen = time.monotonic()
                if frame.kind == "ticket":
                    self._on_ticket(s, frame.fields, frame.payload)
                elif frame.kind == "cancel":
                    event = s.events.get(frame.fields.get("id"))  # type: ignore[arg-type]
                    if event is not None:
                        event.set()
                elif frame.kind == "exit":
                    result = "exit"
                    return result
                elif frame.kind != "hb":
                    raise BadHeader(f"unexpected message {frame.kind!r}")
        except (WireError, OSError) as exc:
            if not isinstance(exc, ConnectionClosed):
                log.warning(
                    "resident worker %d: connection to the driver lost: %s", self.partition, exc
                )
            return result
        finally:
            s.stop.set()
            for event in list(s.events.values()):
                event.set()  # a sleeping straggler wakes and reports CANCELLED
            s.tickets.put(None)
            if compute.is_alive():
                compute.join(cfg.silence_seconds)
            if beat.is_alive():
                beat.join(cfg.heartbeat_seconds + 1.0)
            s.shutdown()
            stream.close()
            sock.close()

    def _store(self, version: int, model: Any) -> None:
        self.models[version] = model
        self.models.move_to_end(version)
        while len(self.models) > self.cfg.max_versions:
            self.models.popitem(last=False)

    def _on_ticket(self, s: _Session, f: dict[str, Any], payload: Any) -> None:
        task_id = f.get("id")
        if type(task_id) is not int:
            raise BadHeader("a ticket needs an int id")
        try:
            block, version, mode = f["b"], f["v"], f["m"]
            if block not in self.blocks:
                raise ValueError(f"block {block} is not served by this worker")
            part, args, table_value = payload
            if mode == "held":
                model = self.models[version]
                self.models.move_to_end(version)
            elif mode == "full":
                model = _freeze(part)
                self._store(version, model)
            elif mode == "delta":
                model = _freeze(apply_delta(self.models[f["base"]], *part))
                self._store(version, model)
            else:
                raise ValueError(f"unknown model mode {mode!r}")
            d = f.get("d")
            delay = NO_DELAY if d is None else Delay(float(d[0]), d[1], float(d[2]))
            table = None if f.get("s") is None else TableInstruction.from_header(f["s"])
        except (KeyError, ValueError, TypeError, IndexError, WireError) as exc:
            # the driver's mirror of our versions follows the same rules: a mismatch is a bug,
            # reported as this task's failure
            text = f"resident worker could not read ticket {task_id}: {type(exc).__name__}: {exc}"
            s.send(encode_frame("error", {"id": task_id, "e": text}))
            return
        s.events[task_id] = threading.Event()
        s.tickets.put(_Ticket(task_id, block, model, args, delay, table, table_value))

    def _compute(self, s: _Session) -> None:
        task_fn = self.cfg.task_fn
        while True:
            item = s.tickets.get()
            if item is None or s.stop.is_set():
                return
            task_id, block, model, args, delay = item[:5]
            event = s.events.get(task_id)
            try:
                try:
                    # a table instruction is followed even for a cancelled ticket: the driver's
                    # mirror assumes it was
                    args, rows = self._table_args(item)
                except (ValueError, TypeError, IndexError) as exc:
                    text = f"resident worker could not read the table of ticket {task_id}: {exc}"
                    s.send(encode_frame("error", {"id": task_id, "e": text}))
                    continue
                if event is None or event.is_set():
                    s.send(encode_frame("cancelled", {"id": task_id}))
                    continue
                try:
                    report = timed_task(
                        task_fn, _constant(model), block, task_id, args, delay, sleep=event.wait
                    )
                    if rows is not None and report is not None:
                        # the rows this result writes, kept until the next ticket of the block
                        self.tables.keep(task_fn, block, task_id, rows, report.payload)
                except Exception as exc:  # noqa: BLE001 - a failing task is an outcome
                    s.send(encode_frame("error", {"id": task_id, "e": _describe(exc)}))
                    continue
                if report is None or event.is_set():
                    s.send(encode_frame("cancelled", {"id": task_id}))
                    continue
                fields = {"id": task_id, "c": report.compute_seconds, "s": report.sleep_seconds}
                try:
                    parts = encode_frame("result", fields, report.payload)
                except UnsupportedValue as exc:
                    text = f"the task function's result cannot travel: {exc}"
                    s.send(encode_frame("error", {"id": task_id, "e": text}))
                    continue
                if s.send(parts):
                    self.served += 1
            finally:
                s.events.pop(task_id, None)

    def _table_args(self, ticket: _Ticket) -> tuple[Any, np.ndarray | None]:
        """The task's args with the rows of its block's table filled in, and those rows (None
        when the ticket reads no table)."""
        if ticket.table is None:
            return ticket.args, None
        table = self.tables.apply(ticket.block, ticket.table, ticket.table_value)
        return self.tables.task_args(
            self.cfg.task_fn, ticket.block, ticket.args, ticket.table, table
        )

    def _heartbeat(self, s: _Session) -> None:
        cfg = self.cfg
        while not s.stop.wait(cfg.heartbeat_seconds):
            if time.monotonic() - s.last_seen > cfg.silence_seconds:
                log.warning(
                    "resident worker %d: the driver has been silent for %.0f s, leaving",
                    self.partition,
                    cfg.silence_seconds,
                )
                s.shutdown()
                return
            if not s.send(encode_frame("hb")):
                return


def model_delta(base: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(indices, new values) of the entries whose bits differ, when that is smaller than ``new``."""
    bits = _UINT[new.dtype.itemsize]
    new = np.ascontiguousarray(new)
    b = base.reshape(-1).view(bits)
    n = new.reshape(-1).view(bits)
    step = max(1, n.size // 256)
    sample = b[::step] != n[::step]
    if 2 * int(np.count_nonzero(sample)) > sample.size:  # most entries changed: send in full
        return None
    changed = np.flatnonzero(b != n)
    index_dtype = np.int32 if n.size < 2**31 else np.int64
    index_bytes = np.dtype(index_dtype).itemsize
    if changed.size * (index_bytes + new.dtype.itemsize) >= new.nbytes:
        return None
    return changed.astype(index_dtype), n[changed].view(new.dtype)

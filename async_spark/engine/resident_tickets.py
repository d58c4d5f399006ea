"""Tickets out to the resident workers: how each one's model and table travel, and its frame.

A ticket's model goes as nothing (the worker holds the version), a delta against the newest
version the worker holds, or in full (:class:`.resident_versions.VersionLedger`); a task that
reads rows of a per-block table (SAGA's scalars) gets an instruction instead of the rows when the
worker holds the table (:mod:`.tables`). Inside :meth:`TicketWriter.batch`, small tickets wait and
go out joined, one write per connection.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .core import TaskTicket
from .resident_conn import WorkerConnection
from .resident_versions import VersionLedger
from .stragglers import NO_DELAY
from .task import held_field, replace_field
from .transport import TaskCall
from .wire import encode_frame, frame_size, send_frame

__all__ = ["TicketWriter"]

_CORK_BELOW = 1 << 16  # tickets up to this size wait for the end of a batch(); larger go at once


class TicketWriter:
    """Encodes and sends tickets, and counts them (:meth:`stats`).

    ``mutex`` is the transport's lock over the connections' tables (the ledger is read and
    changed under it); ``send(conn, parts)`` writes a frame and returns whether it went (a
    failed write drops the connection); ``drop(conn, reason)`` forgets a connection."""

    def __init__(
        self,
        mutex: threading.RLock,
        max_versions: int,
        send: Callable[[WorkerConnection, Sequence[Any]], bool],
        drop: Callable[[WorkerConnection, str], Any],
    ) -> None:
        self._mutex = mutex
        self._send = send
        self._drop = drop
        self.versions = VersionLedger(max_versions)  # what each worker holds; delta bases
        self._table_counts = {"full": 0, "held": 0, "commit": 0}
        self._ticket_bytes = 0
        self._ticket_writes = 0  # socket writes that carried tickets (batch() joins them)
        self._corked = threading.local()  # a thread's held-back ticket frames, in batch()

    def send(self, conn: WorkerConnection, ticket: TaskTicket, call: TaskCall) -> None:
        """Send ``ticket`` to ``conn`` (held back inside :meth:`batch`); raises
        :class:`~.wire.UnsupportedValue`, with nothing sent, for args that cannot travel."""
        model = call.model_ref.value if call.model_ref is not None else None
        version = call.version
        fields: dict[str, Any] = {"id": ticket.task_id, "b": ticket.block, "v": version}
        delay = call.delay
        if delay != NO_DELAY:
            fields["d"] = [delay.sleep_seconds, delay.slow_executor, delay.slow_factor]
        with conn.send_lock:
            if conn.closed:
                return  # its drop already failed this ticket
            mode, base, part = self._model_part(conn, version, model)
            fields["m"] = mode
            if base is not None:
                fields["base"] = base
            args, table = self._table_part(conn, ticket, call.args, fields)
            parts = encode_frame("ticket", fields, (part, args, table))
            size = frame_size(parts)
            corked = getattr(self._corked, "frames", None)
            if corked is not None and size <= _CORK_BELOW:
                self._hold(conn, version, model, mode, size, writes=0)
                # joined now: the frame must not change if the caller reuses its arrays
                corked.setdefault(conn, []).append(b"".join(parts))
                return
            self._hold(conn, version, model, mode, size, writes=1)
            try:
                send_frame(conn.sock, parts, size)
                conn.last_sent = time.monotonic()
                return
            except OSError as exc:
                send_error = exc
        self._drop(conn, f"send failed: {send_error}")

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Small tickets sent by this thread inside the context go out when it ends, one write
        per worker connection (a ``sendall`` on loopback costs more than encoding a ticket). A
        worker's tickets keep their order; nested contexts send at the outermost's end."""
        if getattr(self._corked, "frames", None) is not None:
            yield
            return
        frames: dict[WorkerConnection, list[bytes]] = {}
        self._corked.frames = frames
        try:
            yield
        finally:
            self._corked.frames = None
            for conn, held in frames.items():
                if self._send(conn, [b"".join(held)]):
                    with self._mutex:
                        self._ticket_writes += 1

    def stats(self) -> dict[str, int]:
        """The counts of :attr:`.ResidentTransport.stats` (the caller holds the mutex)."""
        out = {f"model_{k}": v for k, v in self.versions.counts.items()}
        out["tickets"] = sum(out.values())
        out.update({f"table_{k}": v for k, v in self._table_counts.items()})
        out["ticket_bytes"] = self._ticket_bytes
        out["ticket_writes"] = self._ticket_writes
        out["copies_kept"] = self.versions.copies_kept
        return out

    def _table_part(
        self, conn: WorkerConnection, ticket: TaskTicket, args: Any, fields: dict[str, Any]
    ) -> tuple[Any, Any]:
        """The args to send (a HeldRows field emptied: the worker fills it from its table) and
        the table when the worker must get it in full; the instruction goes in ``fields``."""
        i = held_field(args)
        if i is None:
            return args, None
        with self._mutex:
            instruction, table = conn.tables.instruct(
                ticket.task_id, ticket.block, ticket.block_task, i, args[i]
            )
            self._table_counts[instruction.mode] += 1
        fields["s"] = instruction.to_header()
        return replace_field(args, i, None), table

    def _model_part(
        self, conn: WorkerConnection, version: int, model: Any
    ) -> tuple[str, int | None, Any]:
        """How ``version`` travels to this worker: ``held``, a ``delta`` against the newest
        version it holds, or ``full``."""
        with self._mutex:
            held, base_version, base = self.versions.base(conn.held, version)
        if held:
            return "held", None, None
        return self.versions.part(model, base_version, base)

    def _hold(
        self, conn: WorkerConnection, version: int, model: Any, mode: str, size: int, writes: int
    ) -> None:
        """Record that the worker now holds ``version`` (the same rule as its own store), and
        count the ticket's ``size`` in bytes and the socket ``writes`` it takes (0 or 1)."""
        with self._mutex:
            self._ticket_bytes += size
            self._ticket_writes += writes
            self.versions.hold(conn.held, version, model, mode, live=not conn.closed)

"""How the resident transport reads its workers' sockets without a reader thread.

The thread that waits for an outcome reads the sockets itself (:class:`OutcomeQueue` calls the
transport's poll while its deque is empty), so a result reaches the engine's thread with no
hand-off between threads; while nobody waits, the transport's monitor reads for it. One thread
reads at a time (:class:`SocketPoller`'s lock), and only that thread (un)registers connections
with the selector: the others queue the change and wake it through a socket pair.
"""

from __future__ import annotations

import contextlib
import queue
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from .transport import Outcome

__all__ = ["OutcomeQueue", "SocketPoller"]


class OutcomeQueue:
    """The transport's ``outcomes``: finished tasks in a deque. A thread waiting in :meth:`get`
    calls ``poll(seconds)`` meanwhile, which reads the workers' sockets and puts what finished
    (``wake()`` interrupts a poll in another thread after a :meth:`put`)."""

    def __init__(self, poll: Callable[[float], None], wake: Callable[[], None]) -> None:
        self._poll = poll
        self._wake = wake
        self._ready: deque[Outcome] = deque()

    def put(self, outcome: Outcome) -> None:
        self._ready.append(outcome)
        self._wake()

    def get(self, block: bool = True, timeout: float | None = None) -> Outcome:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                return self._ready.popleft()
            except IndexError:
                pass
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if not block or left <= 0:
                self._poll(0.0)
                try:
                    return self._ready.popleft()
                except IndexError:
                    raise queue.Empty from None
            self._poll(min(left, 1.0))

    def get_nowait(self) -> Outcome:
        return self.get(block=False)

    def empty(self) -> bool:
        return not self._ready

    def qsize(self) -> int:
        return len(self._ready)


class SocketPoller:
    """A selector over connections (objects with ``sock``, ``closed``, ``registered`` and
    ``send_lock``), read by one thread at a time.

    :meth:`open` makes the selector (before it, and after :meth:`close`, a poll only waits);
    :meth:`add` and :meth:`remove` queue a connection's (un)registration for the reader, which
    applies it at its next poll (a removed connection's socket is closed then, under its send
    lock, so that no send picks up the number of a reused descriptor)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reader: int | None = None  # ident of the thread reading now
        self._selector: selectors.BaseSelector | None = None
        self._changes: deque[tuple[str, Any]] = deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)

    def open(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)

    def add(self, conn: Any) -> None:
        self._changes.append(("add", conn))
        self.wake()

    def remove(self, conn: Any) -> None:
        self._changes.append(("remove", conn))
        self.wake()

    def wake(self) -> None:
        """Interrupt the reader's wait (unless the caller is the reader)."""
        if self._reader != threading.get_ident():
            try:
                self._wake_w.send(b"\0")
            except OSError:  # full (a wake-up is pending anyway) or closed
                pass

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Hold the reader's lock (frames read elsewhere are handled as the reader would)."""
        with self._lock:
            yield

    def poll(self, timeout: float, read: Callable[[Any], None]) -> None:
        """Call ``read(conn)`` for each readable connection, waiting up to ``timeout`` for one;
        returns at once when another thread is reading (``timeout`` 0) or took the whole wait."""
        if timeout > 0:
            got = self._lock.acquire(timeout=timeout)
        else:
            got = self._lock.acquire(blocking=False)
        if not got:
            return
        try:
            self._reader = threading.get_ident()
            self._apply_changes()
            selector = self._selector
            if selector is None:  # not open, or closed: outcomes come only from put()
                if timeout > 0:
                    time.sleep(min(timeout, 0.01))
                return
            for key, _mask in selector.select(timeout):
                conn = key.data
                if conn is None:  # the wake-up socket
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except OSError:
                        pass
                    self._apply_changes()
                elif not conn.closed:
                    read(conn)
        finally:
            self._reader = None
            self._lock.release()

    def close(self) -> None:
        """Apply the queued changes (closing the removed sockets) and close the selector."""
        with self._lock:
            self._apply_changes()
            if self._selector is not None:
                self._selector.close()
                self._selector = None
        self._wake_r.close()
        self._wake_w.close()

    def _apply_changes(self) -> None:  # the reader's lock held
        while self._changes:
            what, conn = self._changes.popleft()
            if what == "add" and self._selector is not None and not conn.closed:
                self._selector.register(conn.sock, selectors.EVENT_READ, conn)
                conn.registered = True
            elif what == "remove":
                if conn.registered and self._selector is not None:
                    try:
                        self._selector.unregister(conn.sock)
                    except (KeyError, ValueError):
                        pass
                conn.registered = False
                with conn.send_lock:
                    conn.sock.close()

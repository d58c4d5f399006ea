"""How tasks reach workers: the small interface between the driver loop and an execution backend.

A transport runs :func:`~async_spark.engine.task.run_task` for a ticket somewhere (a Spark executor,
a thread of this process) and puts one :class:`Outcome` per submitted ticket on its ``outcomes``
queue — success, failure or cancellation — so the driver's accounting always closes.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from .core import TaskStatus, TaskTicket
from .history import InlinePublisher, Publisher
from .stragglers import Delay
from .task import TaskFunction, TaskReport, run_task

__all__ = ["LocalTransport", "Outcome", "Transport", "TaskCall"]


class TaskCall(NamedTuple):
    """One task as the driver dispatches it: ``call(rows)`` runs :func:`run_task` (what a Spark
    job's partition function or a local thread executes), and a transport that ships tasks its own
    way (the resident one) reads the fields. Plain values only: it travels in task closures."""

    task_fn: TaskFunction
    model_ref: Any  # a publisher's handle; ``.value`` is the model
    block: int
    task_id: int
    version: int  # the model version ``model_ref`` holds
    args: Any
    delay: Delay

    def __call__(self, rows: Iterable[Any] = ()) -> list[TaskReport]:
        return run_task(
            self.task_fn, self.model_ref, self.block, self.task_id, self.args, self.delay, rows
        )


class Outcome(NamedTuple):
    ticket: TaskTicket
    status: TaskStatus
    report: TaskReport | None
    seconds: float  # dispatch to result, seen by the driver
    error: str | None = None


class Transport(ABC):
    """Runs task calls and reports their outcomes."""

    publisher: Publisher

    def __init__(self) -> None:
        self.outcomes: queue.Queue[Outcome] = queue.Queue()

    @abstractmethod
    def start(
        self, num_blocks: int, slots: int, run_name: str, *, task_fn: TaskFunction | None = None
    ) -> None:
        """Prepare to run up to ``slots`` tasks at once over ``num_blocks`` blocks.

        ``task_fn`` is the run's task function, for a transport that installs it on its workers
        once (the resident one); the others get it with every :class:`TaskCall`."""

    def counters(self) -> dict[str, int]:
        """How tasks travelled, for the run's summary (none by default)."""
        return {}

    def keeps_tables(self, task_fn: TaskFunction) -> bool:
        """Whether this transport keeps :class:`~.task.HeldRows` tables on its workers for
        ``task_fn`` (then the engine ships ``HeldRows`` as they are; otherwise only their
        ``view``)."""
        return False

    @abstractmethod
    def submit(self, ticket: TaskTicket, call: TaskCall) -> None:
        """Run ``call`` for ``ticket`` (non-blocking)."""

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """A context in which submits may be held back and sent together when it ends (the
        resident transport: one write per worker connection); by default each goes at once."""
        return contextlib.nullcontext()

    def outcome_waiting(self) -> bool:
        """Whether an outcome is already received, so that ``outcomes.get`` returns it without
        waiting. The engine then takes it before it dispatches again: the results that arrived
        together are all accounted (and published on) before one dispatch serves every block
        they freed, inside :meth:`batch`. False by default (dispatch after every result): a
        transport says yes only where waiting outcomes are real arrivals (the resident one),
        not where ``outcomes`` computes them on demand (the emulator's virtual clock)."""
        return False

    @abstractmethod
    def cancel(self, ticket: TaskTicket) -> None:
        """Best effort: a cancelled task reports ``CANCELLED`` (or its result, if it won the race)."""

    @abstractmethod
    def close(self, timeout: float = 30.0) -> None:
        """Cancel what runs, stop every thread; idempotent."""


class _ThreadPoolTransport(Transport):
    """Shared machinery: a fixed pool of dispatcher threads fed from one queue."""

    def __init__(self) -> None:
        super().__init__()
        self._inbox: queue.Queue[tuple[TaskTicket, TaskCall] | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._cancelled: set[int] = set()
        self._lock = threading.Lock()
        self._closed = False

    def _make_thread(self, target: Callable[[], None], name: str) -> threading.Thread:
        return threading.Thread(target=target, name=name, daemon=True)

    def start(
        self, num_blocks: int, slots: int, run_name: str, *, task_fn: TaskFunction | None = None
    ) -> None:
        self.run_name = run_name
        for i in range(slots):
            t = self._make_thread(self._loop, f"async-spark-dispatch-{i}")
            t.start()
            self._threads.append(t)

    def submit(self, ticket: TaskTicket, call: TaskCall) -> None:
        if self._closed:
            raise RuntimeError("transport is closed")
        self._inbox.put((ticket, call))

    def _is_cancelled(self, task_id: int) -> bool:
        with self._lock:
            return task_id in self._cancelled

    def cancel(self, ticket: TaskTicket) -> None:
        with self._lock:
            self._cancelled.add(ticket.task_id)

    def _loop(self) -> None:
        self._thread_setup()
        while True:
            item = self._inbox.get()
            if item is None:
                return
            ticket, call = item
            start = time.monotonic()
            if self._is_cancelled(ticket.task_id):
                self.outcomes.put(Outcome(ticket, TaskStatus.CANCELLED, None, 0.0))
                continue
            try:
                reports = self._execute(ticket, call)
                report = reports[0]
                status, error = TaskStatus.OK, None
            except BaseException as exc:  # noqa: BLE001 - every failure must become an outcome
                report = None
                if self._is_cancelled(ticket.task_id):
                    status, error = TaskStatus.CANCELLED, None
                else:
                    status, error = TaskStatus.FAILED, _describe(exc)
            finally:
                with self._lock:
                    self._cancelled.discard(ticket.task_id)
            self.outcomes.put(Outcome(ticket, status, report, time.monotonic() - start, error))

    def _thread_setup(self) -> None:
        return None

    @abstractmethod
    def _execute(self, ticket: TaskTicket, call: TaskCall) -> list[TaskReport]: ...

    def close(self, timeout: float = 30.0) -> None:
        if self._closed:
            return
        self._closed = True
        # Anything still queued becomes a cancellation, so every submitted ticket has an outcome.
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self.outcomes.put(Outcome(item[0], TaskStatus.CANCELLED, None, 0.0))
        for _ in self._threads:
            self._inbox.put(None)
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        self._threads.clear()
        if alive:
            raise RuntimeError(f"dispatcher threads did not stop within {timeout}s: {alive}")


def _describe(exc: BaseException) -> str:
    """One readable paragraph: the Python error raised in the task, without the Java stack."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    # A worker-side Python error arrives as "PythonException: ... Traceback ... Error: message",
    # followed (for Py4J errors) by the Java stack: keep the headline and the Python error line.
    java_start = next(
        (i for i, ln in enumerate(lines) if ln.lstrip().startswith("at ")), len(lines)
    )
    python_part = lines[:java_start]
    errors = [ln for ln in python_part if not ln.startswith((" ", "\t", "Traceback"))]
    if len(errors) > 1:
        return f"{errors[0]} {errors[-1]}"
    return "\n".join(python_part[:12])


class LocalTransport(_ThreadPoolTransport):
    """Runs tasks in threads of this process (tests, small data, the emulator's calibration).

    Cancellation takes effect only before a task starts; a running task finishes.
    """

    def __init__(self, publisher: Publisher | None = None) -> None:
        super().__init__()
        self.publisher = publisher or InlinePublisher()

    def _execute(self, ticket: TaskTicket, call: TaskCall) -> list[TaskReport]:
        return call(iter([ticket.block]))

"""The Spark backend: single-partition jobs from driver threads, broadcasts as version handles.

PySpark has no asynchronous action, but its scheduler is thread-safe: one blocking
``sc.runJob(rdd, f, partitions=[p])`` per driver thread yields per-partition results as they
complete. In pinned-thread mode (the default) each Python thread owns a JVM thread with its own
local properties, so every dispatcher thread sets its job description, tags and scheduler pool.
Obsolete tasks are cancelled through a per-task job tag (``sc.cancelJobsWithTag``); the whole run
through the run's tag.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from typing import Any

from pyspark import InheritableThread, SparkContext
from pyspark.broadcast import Broadcast

from .core import TaskTicket
from .task import TaskFunction, TaskReport
from .transport import TaskCall, _ThreadPoolTransport

log = logging.getLogger(__name__)

__all__ = ["BroadcastPublisher", "SparkTransport"]


class BroadcastPublisher:
    """One Spark broadcast per model version; ``destroy`` removes executor and driver copies."""

    def __init__(self, sc: SparkContext) -> None:
        self.sc = sc

    def create(self, model: Any) -> Broadcast:
        return self.sc.broadcast(model)

    def destroy(self, handle: Any) -> None:
        handle.destroy(blocking=False)


def _tag_safe(text: str) -> str:
    # Job tags may not contain commas; keep them short and readable in the UI.
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:40] or "run"


class SparkTransport(_ThreadPoolTransport):
    """Runs each task as a single-partition Spark job on an RDD of block indices.

    Parameters
    ----------
    sc : SparkContext
    pool : str, optional
        FAIR scheduler pool for the run's jobs (``spark.scheduler.pool``).
    interrupt_on_cancel : bool
        Interrupt a cancelled task's executor thread (a stale straggler frees its core at once).
    publisher : "broadcast" or "inline"
        How model versions travel: one broadcast per version, or inside the task closure.
    """

    def __init__(
        self,
        sc: SparkContext,
        *,
        pool: str | None = None,
        interrupt_on_cancel: bool = True,
        publisher: str = "broadcast",
    ) -> None:
        super().__init__()
        if publisher not in ("broadcast", "inline"):
            raise ValueError(f"publisher must be 'broadcast' or 'inline', got {publisher!r}")
        self.sc = sc
        self.pool = pool
        self.interrupt_on_cancel = interrupt_on_cancel
        if publisher == "broadcast":
            self.publisher = BroadcastPublisher(sc)
        else:
            from .history import InlinePublisher

            self.publisher = InlinePublisher()
        self._rdd: Any = None
        self._tags: dict[int, str] = {}

    def start(
        self, num_blocks: int, slots: int, run_name: str, *, task_fn: TaskFunction | None = None
    ) -> None:
        self.run_tag = f"async-spark-{_tag_safe(run_name)}-{uuid.uuid4().hex[:8]}"
        self._rdd = self.sc.parallelize(range(num_blocks), num_blocks)
        self._rdd.setName(f"{run_name} blocks")
        super().start(num_blocks, slots, run_name, task_fn=task_fn)

    def _make_thread(self, target: Any, name: str) -> threading.Thread:
        # InheritableThread copies the creating thread's local properties (e.g. a job group set by
        # the user) and releases its JVM thread when it ends.
        t = InheritableThread(target=target, name=name)
        t.daemon = True
        return t

    def _thread_setup(self) -> None:
        sc = self.sc
        sc.setInterruptOnCancel(self.interrupt_on_cancel)
        if self.pool is not None:
            sc.setLocalProperty("spark.scheduler.pool", self.pool)
        sc.addJobTag(self.run_tag)

    def _execute(self, ticket: TaskTicket, call: TaskCall) -> list[TaskReport]:
        sc = self.sc
        tag = f"{self.run_tag}-t{ticket.task_id}"
        with self._lock:
            self._tags[ticket.task_id] = tag
        sc.addJobTag(tag)
        sc.setJobDescription(
            f"{self.run_name}: block {ticket.block} version {ticket.version} task {ticket.task_id}"
        )
        try:
            if self._is_cancelled(ticket.task_id):
                raise _CancelledBeforeStart()
            # mypy does not see a NamedTuple's __call__: TaskCall is the partition function
            return sc.runJob(self._rdd, call, [ticket.block])  # type: ignore[arg-type]
        finally:
            sc.removeJobTag(tag)
            with self._lock:
                self._tags.pop(ticket.task_id, None)

    def cancel(self, ticket: TaskTicket) -> None:
        super().cancel(ticket)
        self._cancel_task_jobs(ticket.task_id, 0)

    def _cancel_task_jobs(self, task_id: int, attempt: int) -> None:
        # cancelJobsWithTag reaches only jobs the scheduler already holds: a cancel that lands
        # between the dispatcher's last check and its runJob reaching the JVM would be lost (a
        # 20 s straggler then runs to the end), so it is repeated while the task is in flight.
        with self._lock:
            tag = self._tags.get(task_id)
        if tag is None:
            return
        self._cancel_tag(tag)
        if attempt < len(RECANCEL_DELAYS):
            _daemon_timer(RECANCEL_DELAYS[attempt], self._cancel_task_jobs, task_id, attempt + 1)

    def _cancel_tag(self, tag: str) -> None:
        try:
            self.sc.cancelJobsWithTag(tag)
        except Exception:  # the context stopped meanwhile: nothing is left to cancel
            log.debug("cancelJobsWithTag(%s) failed", tag, exc_info=True)

    def close(self, timeout: float = 30.0) -> None:
        if self._closed:
            return
        with self._lock:
            self._cancelled.update(self._tags)
        if hasattr(self, "run_tag"):
            self._cancel_tag(self.run_tag)
            for delay in RECANCEL_DELAYS:  # a job submitted during the first cancel
                _daemon_timer(delay, self._recancel_run)
        super().close(timeout)

    def _recancel_run(self) -> None:
        if any(t.is_alive() for t in self._threads):
            self._cancel_tag(self.run_tag)


RECANCEL_DELAYS = (0.2, 1.0, 3.0)  # seconds after a cancel at which it is repeated


def _daemon_timer(delay: float, fn: Any, *args: Any) -> None:
    timer = threading.Timer(delay, fn, args=args)
    timer.daemon = True
    timer.start()


class _CancelledBeforeStart(Exception):
    pass

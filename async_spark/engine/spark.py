"""The Spark backend: single-partition jobs from driver threads, broadcasts as version handles.

PySpark has no asynchronous action, but its scheduler is thread-safe: one blocking
``sc.runJob(rdd, f, partitions=[p])`` per driver thread yields per-partition results as they
complete. In pinned-thread mode (the default) each Python thread owns a JVM thread with its own
local properties, so every dispatcher thread sets its job description, tags and scheduler pool.
Obsolete tasks are cancelled through a per-task job tag (``sc.cancelJobsWithTag``); the whole run
through the run's tag.
"""

from __future__ import annotations

import re
import threading
import uuid
from typing import Any

from pyspark import InheritableThread, SparkContext
from pyspark.broadcast import Broadcast

from .core import TaskTicket
from .task import TaskReport
from .transport import TaskCall, _ThreadPoolTransport

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

    def start(self, num_blocks: int, slots: int, run_name: str) -> None:
        self.run_tag = f"async-spark-{_tag_safe(run_name)}-{uuid.uuid4().hex[:8]}"
        self._rdd = self.sc.parallelize(range(num_blocks), num_blocks)
        self._rdd.setName(f"{run_name} blocks")
        super().start(num_blocks, slots, run_name)

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
            return sc.runJob(self._rdd, call, [ticket.block])
        finally:
            sc.removeJobTag(tag)
            with self._lock:
                self._tags.pop(ticket.task_id, None)

    def cancel(self, ticket: TaskTicket) -> None:
        super().cancel(ticket)
        with self._lock:
            tag = self._tags.get(ticket.task_id)
        if tag is not None:
            self.sc.cancelJobsWithTag(tag)

    def close(self, timeout: float = 30.0) -> None:
        if self._closed:
            return
        with self._lock:
            self._cancelled.update(self._tags)
        if hasattr(self, "run_tag"):
            self.sc.cancelJobsWithTag(self.run_tag)
        super().close(timeout)


class _CancelledBeforeStart(Exception):
    pass

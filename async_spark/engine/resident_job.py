"""The resident transport's Spark job: launched through the DataFrame API, launched again when it
ends while the run goes on, cancelled by its tag.

The job is ``mapInArrow`` of :class:`~.resident_worker.WorkerEntry` over one row per resident task
(``spark.range``) or over the DataFrame whose partitions are the run's blocks, collected in a
driver thread; every task it runs is a resident worker (:mod:`.resident_worker`). Only the
DataFrame API is used, so a Spark Connect session launches the same job. What the driver does with
the workers once they connect is :mod:`.resident`'s.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

from .resident_worker import BLOCK_COLUMN, OUTPUT_SCHEMA, WorkerConfig, WorkerEntry
from .transport import _describe

log = logging.getLogger(__name__)

__all__ = ["ResidentJob", "classic_context", "configured_connect_timeout"]


def classic_context(spark: Any) -> Any:
    """The SparkContext of a classic session; None on Spark Connect (which has none)."""
    try:
        return spark.sparkContext
    except Exception:  # Connect sessions raise on .sparkContext
        return None


def configured_connect_timeout(spark: Any, connect: bool) -> float:
    """``spark.async_spark.resident.connectTimeout`` if set, else 40 s on Connect, 60 s classic."""
    from .connect import CONNECT_TIMEOUT_CONF, conf_value

    configured = conf_value(spark, CONNECT_TIMEOUT_CONF)
    if not configured:
        return 40.0 if connect else 60.0
    try:
        return float(configured)
    except ValueError:
        raise ValueError(
            f"{CONNECT_TIMEOUT_CONF} must be a number of seconds > 0, got {configured!r}"
        ) from None


class ResidentJob:
    """One run's Spark job of resident tasks, in a thread of its own.

    ``on_end(error)`` is called each time the job ends while the run goes on (``closing`` not
    set); after ``max_relaunches`` launches more, ``on_fatal(message)`` instead, and the thread
    ends. The job carries ``tag`` (a SparkContext job tag on a classic session, a session tag on
    Spark Connect), by which :meth:`cancel` interrupts it.
    """

    def __init__(
        self,
        spark: Any,
        cfg: WorkerConfig,
        *,
        tag: str,
        description: str,
        num_tasks: int,
        frame: Any,
        frame_partitions: int,
        max_relaunches: int,
        closing: threading.Event,
        on_end: Callable[[str], None],
        on_fatal: Callable[[str], None],
    ) -> None:
        self.spark = spark
        self.cfg = cfg
        self.tag = tag
        self.description = description
        self.num_tasks = num_tasks
        self.frame = frame  # None: one row per task
        self.frame_partitions = frame_partitions
        self.max_relaunches = max_relaunches
        self.launches = 0
        self._closing = closing
        self._on_end = on_end
        self._on_fatal = on_fatal
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            from pyspark import InheritableThread

            t: threading.Thread = InheritableThread(target=self._loop, name="async-spark-job")
        except Exception:
            t = threading.Thread(target=self._loop, name="async-spark-job")
        t.daemon = True
        t.start()
        self.thread = t

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def _loop(self) -> None:
        while not self._closing.is_set():
            self.launches += 1
            error = None
            try:
                self.run()
            except Exception as exc:  # noqa: BLE001 - the job's failure is reported, not raised
                error = _describe(exc)
            if self._closing.is_set():
                return
            error = error or "its tasks ended"
            self._on_end(error)
            if self.launches > self.max_relaunches:
                self._on_fatal(
                    f"the resident Spark job ended {self.launches} times while the run went on; "
                    f"last: {error}"
                )
                return
            log.warning(
                "resident transport: the Spark job ended while the run goes on (%s); launching "
                "it again (%d of %d)",
                error,
                self.launches,
                self.max_relaunches,
            )
            self._closing.wait(0.5)

    def run(self) -> None:
        """One launch of the job, until its tasks end."""
        spark = self.spark
        sc = classic_context(spark)
        # A classic session gets a SparkContext job tag only: SparkSession.addTag there leaves the
        # session unserializable for pyspark.ml afterwards (a fitted LogisticRegressionModel's
        # transform fails with "Task not serializable"; tests/engine/test_resident.py), and does
        # not cancel a classic job either. Spark Connect has session tags only.
        if sc is not None:
            sc.addJobTag(self.tag)
            sc.setInterruptOnCancel(True)
            sc.setJobDescription(self.description)
        else:
            spark.addTag(self.tag)
        try:
            cfg = dataclasses.replace(self.cfg, launch=self.launches)
            self.tasks_frame().mapInArrow(WorkerEntry(cfg), OUTPUT_SCHEMA).collect()
        finally:
            try:
                if sc is not None:
                    sc.removeJobTag(self.tag)
                else:
                    spark.removeTag(self.tag)
            except Exception:
                pass

    def tasks_frame(self) -> Any:
        """What the job maps over: one row per task (its id), or the DataFrame whose partitions
        are the blocks, each row tagged with its block and, when there are more blocks than
        tasks, coalesced (each task then holds several whole partitions)."""
        if self.frame is None:
            return self.spark.range(self.num_tasks, numPartitions=self.num_tasks)
        tagged = self.frame.selectExpr(f"spark_partition_id() AS {BLOCK_COLUMN}", "*")
        return tagged.coalesce(self.num_tasks) if self.num_tasks < self.frame_partitions else tagged

    def cancel(self) -> None:
        """Cancel the job, on a classic session (job tag) or a Connect one (session tag)."""
        sc = classic_context(self.spark)
        try:
            if sc is not None:
                sc.cancelJobsWithTag(self.tag)
            else:
                self.spark.interruptTag(self.tag)
        except Exception:
            log.debug("cancelling the resident job failed", exc_info=True)

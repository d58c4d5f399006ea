"""The driver loop of ASYNC: dispatch, result stream, staleness, policies, history, stragglers.

Usage (the solver owns the model and the update rule; the engine owns everything distributed)::

    with AsyncEngine(transport, task_fn, num_blocks=P, policy=Policy.asynchronous(tau=8),
                     initial_model=w0) as engine:
        for result in engine.results():          # accepted results, as they complete
            w = update(w, result.payload, result.staleness)
            engine.publish(w)                     # new version; obsolete tasks are cancelled
            if done:
                break

``task_fn(block, model, args)`` runs on a worker and returns a payload; ``task_args(ticket)`` runs
on the driver at dispatch and returns the small per-task arguments (e.g. SAGA's old scalars).
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from .columns import Columns
from .core import Decision, SchedulerCore, TaskStatus, TaskTicket
from .errors import EngineError
from .history import HistoryStore
from .policies import Policy
from .stragglers import NO_DELAY, StragglerModel
from .task import TaskFunction, resolve_held
from .transport import Outcome, TaskCall, Transport

__all__ = ["AsyncEngine", "EngineError", "TaskResult"]

log = logging.getLogger(__name__)


def finite_payload(payload: Any) -> bool:
    """True when every number in ``payload`` (arrays, scalars, nested tuples/lists) is finite."""
    if isinstance(payload, np.ndarray):
        # integers and non-numbers are finite as they are: only floats (and NaT) are checked
        kind = payload.dtype.kind
        if kind not in "fcm":
            return True
        # a NaN or an infinity makes the sum of squares (BLAS, for any shape; complex: of
        # |x|^2) non-finite, so a finite one proves every entry finite in one call, the usual
        # case; a non-finite one (also an overflow of finite entries) is checked entry by entry
        if kind != "m" and math.isfinite(abs(np.vdot(payload, payload))):
            return True
        return bool(np.isfinite(payload).all())
    if isinstance(payload, float | np.floating):
        return bool(np.isfinite(payload))
    if isinstance(payload, tuple | list):
        return all(finite_payload(p) for p in payload)
    if isinstance(payload, dict):
        return all(finite_payload(p) for p in payload.values())
    return True


class TaskResult(NamedTuple):
    """An accepted result, as the update rule sees it (``result._replace(payload=...)`` for a
    copy with another payload)."""

    block: int
    version: int  # the model version the task read
    staleness: int  # versions published between dispatch and acceptance
    payload: Any
    task_id: int
    block_task: int
    executor: str
    compute_seconds: float
    sleep_seconds: float
    seconds: float  # dispatch to result, seen by the driver


class AsyncEngine:
    """Runs a task function over P blocks under a policy and streams accepted results.

    Parameters
    ----------
    transport : Transport
        Where tasks run (:class:`~async_spark.engine.spark.SparkTransport`, or
        :class:`~async_spark.engine.transport.LocalTransport` in-process).
    task_fn : callable
        ``task_fn(block, model, args) -> payload``, executed on a worker. Must capture plain values.
    num_blocks : int
    policy : Policy
    initial_model : any
        Version 0.
    task_args : callable, optional
        ``task_args(ticket) -> args`` evaluated on the driver at dispatch.
    stragglers : StragglerModel, optional
    straggler_base_seconds : float, optional
        The "mean task time" that straggler delays are multiples of, when known in advance (e.g.
        measured with a dedicated core); skips the warm-up.
    warmup_tasks : int, optional
        Undelayed results (a block's first task, which loads the block, excluded) whose median
        compute time is the "mean task time" of the straggler models (default 2 P).
    max_in_flight, max_retries, backoff : see :class:`SchedulerCore`
    run_name : str
        Names the run's Spark jobs (UI descriptions and tags).
    keep_trajectory : bool
        Record (seconds, version, staleness, block, accepted) per finished task.
    validate_payload : callable, optional
        ``validate_payload(payload) -> bool`` on the driver; an invalid result is rejected and
        counted, and ``max_invalid`` in a row quarantine its block. Default: every number in the
        payload (arrays, tuples, lists, floats) is finite.
    initial_version, block_tasks, bookkeeping, elapsed_offset
        Resume a run: the version clock, each block's task count (it seeds the tasks' samples),
        the counters so far (:meth:`SchedulerCore.bookkeeping`) and the seconds already trained.
    """

    def __init__(
        self,
        transport: Transport,
        task_fn: TaskFunction,
        *,
        num_blocks: int,
        policy: Policy,
        initial_model: Any,
        task_args: Callable[[TaskTicket], Any] | None = None,
        stragglers: StragglerModel | None = None,
        warmup_tasks: int | None = None,
        straggler_base_seconds: float | None = None,
        max_in_flight: int | None = None,
        max_retries: int = 3,
        backoff: float = 0.5,
        run_name: str = "async-spark",
        keep_trajectory: bool = True,
        clock: Callable[[], float] = time.monotonic,
        initial_version: int = 0,
        block_tasks: list[int] | None = None,
        bookkeeping: dict[str, Any] | None = None,
        elapsed_offset: float = 0.0,
        validate_payload: Callable[[Any], bool] | None = None,
        max_invalid: int = 3,
    ) -> None:
        self.core = SchedulerCore(
            num_blocks,
            policy,
            max_in_flight=max_in_flight,
            max_retries=max_retries,
            backoff=backoff,
            clock=clock,
            initial_version=initial_version,
            block_tasks=block_tasks,
            bookkeeping=bookkeeping,
            max_invalid=max_invalid,
        )
        self.validate_payload = finite_payload if validate_payload is None else validate_payload
        if warmup_tasks is not None and (not isinstance(warmup_tasks, int) or warmup_tasks < 1):
            raise ValueError(f"warmup_tasks must be an integer >= 1, got {warmup_tasks!r}")
        self.transport = transport
        self.task_fn = task_fn
        self.task_args = task_args
        self._keeps_tables = transport.keeps_tables(task_fn)
        self.stragglers = stragglers or StragglerModel("none")
        self.warmup_tasks = 2 * num_blocks if warmup_tasks is None else warmup_tasks
        self.run_name = run_name
        self.history = HistoryStore(transport.publisher)
        self.history.publish(initial_version, initial_model)
        self._elapsed_offset = float(elapsed_offset)
        self._clock = clock
        self._started = False
        self._closed = False
        self._stop = threading.Event()
        self._warmup_compute: list[float] = []
        if straggler_base_seconds is not None and not straggler_base_seconds > 0:
            raise ValueError(f"straggler_base_seconds must be > 0, got {straggler_base_seconds!r}")
        self.mean_task_seconds: float | None = straggler_base_seconds
        self.slow_executor: str | None = None
        self.last_error: str | None = None
        self.keep_trajectory = keep_trajectory
        # (seconds, version, staleness, block, accepted, executor) per result, column-wise
        self.trajectory = Columns("fiiibs")
        self._t0 = clock()

    # --- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> AsyncEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        if self._started:
            return
        self.transport.start(
            self.core.num_blocks, self.core.max_in_flight, self.run_name, task_fn=self.task_fn
        )
        self._started = True
        self._t0 = self._clock()

    def stop(self) -> None:
        """Ask :meth:`results` to return after the current result (thread-safe)."""
        self._stop.set()

    def close(self, timeout: float = 60.0) -> None:
        """Cancel everything in flight, account for it, release every broadcast and thread."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        try:
            if self._started:
                for ticket in self.core.request_cancel_all():
                    self.transport.cancel(ticket)
                self.transport.close(timeout)
                deadline = self._clock() + timeout
                while self.core.in_flight and self._clock() < deadline:
                    try:
                        outcome = self.transport.outcomes.get(timeout=0.5)
                    except queue.Empty:
                        continue
                    self._account(outcome)
        finally:
            self.history.close()

    def elapsed(self) -> float:
        """Seconds of the run: since the engine started, plus ``elapsed_offset`` (time before a
        resume)."""
        return self._elapsed_offset + self._clock() - self._t0

    # --- versions -----------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self.core.version

    @property
    def policy(self) -> Policy:
        return self.core.policy

    @property
    def live_blocks(self) -> int:
        return self.core.live_blocks

    def publish(self, model: Any) -> int:
        """Make ``model`` the next version; cancel tasks that can no longer be accepted."""
        obsolete = self.core.advance()
        self.history.publish(self.core.version, model)
        for ticket in obsolete:
            self.transport.cancel(ticket)
        return self.core.version

    def pin(self, version: int) -> None:
        """Keep an old version readable (its broadcast alive) until :meth:`unpin`."""
        self.history.pin(version)

    def unpin(self, version: int) -> None:
        self.history.unpin(version)

    # --- the result stream ----------------------------------------------------------------------
    def results(self, idle_timeout: float = 600.0) -> Iterator[TaskResult]:
        """Accepted results as they complete; dispatches new work as the policy allows.

        Results that arrived together (:meth:`Transport.outcome_waiting`) are all yielded
        before the next dispatch, which then serves every block they freed in one batch.

        Returns when :meth:`stop` is called. Raises :class:`EngineError` when every block has been
        given up, or when no result arrives for ``idle_timeout`` seconds with tasks in flight.
        """
        if not self._started:
            self.start()
        waited = 0.0
        while not self._stop.is_set():
            if not self.transport.outcome_waiting():
                self._dispatch()
            if self.core.in_flight == 0:
                if self.core.live_blocks == 0:
                    raise EngineError(
                        f"every block was given up (failed more than {self.core.max_retries} "
                        f"times in a row, or quarantined for invalid results); "
                        f"last error:\n{self.last_error}"
                    )
                due = self.core.next_retry_due()
                if due is None:
                    raise EngineError(
                        f"policy {self.policy} dispatches nothing and no task is in flight"
                    )
                time.sleep(max(0.0, min(1.0, due - self._clock())))
                continue
            poll = self._poll_interval()
            try:
                outcome = self.transport.outcomes.get(timeout=poll)
            except queue.Empty:
                waited += poll
                if waited > idle_timeout:
                    raise EngineError(
                        f"no task finished in {idle_timeout:.0f}s with {self.core.in_flight} in flight"
                    ) from None
                continue
            waited = 0.0
            decision = self._account(outcome)
            if decision.accepted and outcome.report is not None:
                report = outcome.report
                ticket = decision.ticket
                yield TaskResult(
                    ticket.block,
                    ticket.version,
                    decision.staleness,
                    report.payload,
                    ticket.task_id,
                    ticket.block_task,
                    report.executor,
                    report.compute_seconds,
                    report.sleep_seconds,
                    outcome.seconds,
                )

    def _poll_interval(self) -> float:
        due = self.core.next_retry_due()
        if due is not None:
            return max(0.01, min(0.5, due - self._clock()))
        return 0.5

    def _dispatch(self) -> None:
        tickets = self.core.next_dispatches()
        if not tickets:
            return
        if len(tickets) == 1:  # after most results: nothing to join
            self._submit(tickets[0])
            return
        with self.transport.batch():
            for ticket in tickets:
                self._submit(ticket)

    def _submit(self, ticket: TaskTicket) -> None:
        try:
            handle = self.history.acquire(ticket.version)
            args = self.task_args(ticket) if self.task_args is not None else None
            if not self._keeps_tables:
                args = resolve_held(args)
            delay = self._delay_for(ticket)
            call = TaskCall(
                self.task_fn, handle, ticket.block, ticket.task_id, ticket.version, args, delay
            )
            self.transport.submit(ticket, call)
        except BaseException as exc:
            # The ticket is in flight in the core: close its accounting before propagating.
            self.history.release(ticket.version)
            self.core.complete(ticket.task_id, TaskStatus.FAILED)
            raise EngineError(f"could not dispatch block {ticket.block}: {exc}") from exc

    def _delay_for(self, ticket: TaskTicket):  # type: ignore[no-untyped-def]
        if not self.stragglers.active:
            return NO_DELAY
        return self.stragglers.delay(
            ticket.block,
            ticket.block_task,
            self.core.num_blocks,
            self.mean_task_seconds,
            self.slow_executor,
        )

    def _account(self, outcome: Outcome) -> Decision:
        ticket = outcome.ticket
        self.history.release(ticket.version)
        report = outcome.report
        valid = report is None or bool(self.validate_payload(report.payload))
        decision = self.core.complete(
            ticket.task_id,
            outcome.status,
            duration=outcome.seconds,
            executor=None if report is None else report.executor,
            valid=valid,
        )
        if not valid:
            log.warning(
                "task %d (block %d) returned non-finite or invalid numbers: rejected",
                ticket.task_id,
                ticket.block,
            )
            if self.core.status(ticket.block).value == "quarantined":
                log.warning(
                    "block %d quarantined after %d invalid results in a row",
                    ticket.block,
                    self.core.max_invalid,
                )
        if outcome.status is TaskStatus.FAILED:
            self.last_error = outcome.error
            log.warning(
                "task %d (block %d) failed: %s", ticket.task_id, ticket.block, outcome.error
            )
            if self.core.status(ticket.block).value == "dead":
                log.warning(
                    "block %d given up after %d failures in a row",
                    ticket.block,
                    self.core.max_retries + 1,
                )
        if report is not None and self.mean_task_seconds is None:
            if self.slow_executor is None:
                self.slow_executor = report.executor
            # A block's first task loads it into the worker's cache: not a typical task.
            if report.sleep_seconds == 0 and ticket.block_task > 0:
                self._warmup_compute.append(report.compute_seconds)
            if len(self._warmup_compute) >= self.warmup_tasks:
                # The median: a few cache misses (a block loaded again in another Python worker)
                # must not inflate every straggler's delay.
                self.mean_task_seconds = float(statistics.median(self._warmup_compute))
        if self.keep_trajectory and outcome.status is TaskStatus.OK:
            self.trajectory.append(
                (
                    self.elapsed(),
                    self.core.version,
                    decision.staleness,
                    ticket.block,
                    decision.accepted,
                    "" if report is None else report.executor,
                )
            )
        return decision

    # --- observability ------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Bookkeeping, readable at any time from any thread."""
        snap = self.core.snapshot()
        snap["seconds"] = self.elapsed()
        snap["mean_task_seconds"] = self.mean_task_seconds
        snap["live_broadcasts"] = self.history.live_handles
        snap["stragglers"] = str(self.stragglers)
        counters = self.transport.counters()
        if counters:
            snap["transport"] = counters
        return snap

    def write_trajectory(self, path: str | os.PathLike[str]) -> None:
        """Write the per-task trajectory as JSON lines (atomically)."""
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w") as fh:
            for seconds, version, staleness, block, accepted, executor in self.trajectory:
                fh.write(
                    json.dumps(
                        {
                            "seconds": round(seconds, 6),
                            "version": version,
                            "staleness": staleness,
                            "block": block,
                            "accepted": accepted,
                            "executor": executor,
                        }
                    )
                    + "\n"
                )
        os.replace(tmp, path)

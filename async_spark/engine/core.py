"""The pure heart of the engine: version clock, per-block bookkeeping, policy decisions, retries.

:class:`SchedulerCore` knows nothing of Spark, threads or models: it is driven by three calls —
:meth:`~SchedulerCore.next_dispatches` (which blocks get a task now), :meth:`~SchedulerCore.complete`
(a task came back: accept, reject, count a failure or a cancellation) and
:meth:`~SchedulerCore.advance` (a new model version was published) — with an injectable clock. The
Spark engine and a virtual-time emulator both drive the same object, so the policies and the
accounting are written once and unit-tested without Spark.

Accounting invariant, true after every call::

    dispatched == accepted + rejected + cancelled + failed + in_flight
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Sequence
from enum import Enum
from typing import Any, NamedTuple

import numpy as np

from .policies import Policy

__all__ = ["BlockStatus", "Decision", "SchedulerCore", "TaskTicket", "TaskStatus"]


class BlockStatus(str, Enum):
    IDLE = "idle"
    RUNNING = "running"
    FAILED = "failed"  # failed, waiting for its retry
    DEAD = "dead"  # failed more than max_retries times in a row: given up
    QUARANTINED = "quarantined"  # kept returning invalid (non-finite) results: given up


_GIVEN_UP = frozenset({BlockStatus.DEAD, BlockStatus.QUARANTINED})


class TaskStatus(str, Enum):
    OK = "ok"
    FAILED = "failed"
    CANCELLED = "cancelled"


class TaskTicket(NamedTuple):
    """One dispatched task: which block, which model version it reads, its ids.

    (A named tuple, not a dataclass: one is made for every task, and the driver's time per
    result is the resident transport's limit.)"""

    block: int
    version: int
    task_id: int  # unique within the run
    block_task: int  # index of this task among the block's tasks (0, 1, ...)
    retry: bool  # a re-dispatch after a failure


class Decision(NamedTuple):
    """What the core decided about a finished task."""

    ticket: TaskTicket
    status: TaskStatus
    staleness: int
    accepted: bool


_TAIL_WINDOW = 64  # durations kept per block for the tail estimate


class _Block:
    __slots__ = (
        "status",
        "ticket",
        "cancel_requested",
        "clock",
        "tasks",
        "failures_in_row",
        "retry_at",
        "durations",
        "executor",
        "last_staleness",
        "invalid_in_row",
        "last_dispatch",
    )

    def __init__(self) -> None:
        self.status = BlockStatus.IDLE
        self.ticket: TaskTicket | None = None
        self.cancel_requested = False
        self.clock = 0  # finished tasks (SSP clock)
        self.tasks = 0  # dispatched tasks
        self.failures_in_row = 0
        self.retry_at = 0.0
        self.durations: deque[float] = deque(maxlen=_TAIL_WINDOW)
        self.executor: str | None = None
        self.last_staleness: int | None = None
        self.invalid_in_row = 0
        self.last_dispatch = -1  # task id of its latest dispatch (-1: never)


class _Clocks:
    """Read-only ``clocks[block]`` over the blocks, built in O(1) (no list of P clocks)."""

    __slots__ = ("_blocks",)

    def __init__(self, blocks: Sequence[_Block]) -> None:
        self._blocks = blocks

    def __getitem__(self, block: int) -> int:
        return self._blocks[block].clock


class SchedulerCore:
    """Version clock, block states and policy decisions of an asynchronous run.

    Parameters
    ----------
    num_blocks : int
        P, the number of blocks (>= 1).
    policy : Policy
    max_in_flight : int, optional
        Cap on tasks in flight (default P: one per block).
    max_retries : int
        Consecutive failures of a block tolerated before it is given up (>= 0).
    backoff : float
        Seconds before the first retry of a failed block; doubles per failure, capped at
        ``backoff_max``.
    max_invalid : int
        Invalid results (e.g. NaN) in a row after which a block is quarantined (>= 1).
    clock : callable
        Monotonic seconds; injectable for tests and virtual time.
    """

    def __init__(
        self,
        num_blocks: int,
        policy: Policy,
        *,
        max_in_flight: int | None = None,
        max_retries: int = 3,
        backoff: float = 0.5,
        backoff_max: float = 30.0,
        max_invalid: int = 3,
        clock: Callable[[], float] = time.monotonic,
        initial_version: int = 0,
        block_tasks: list[int] | None = None,
        bookkeeping: dict[str, Any] | None = None,
    ) -> None:
        policy.validate(num_blocks, max_in_flight)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if not backoff >= 0 or not backoff_max >= backoff:
            raise ValueError(
                f"backoff must be >= 0 and backoff_max >= backoff, got {backoff!r}, {backoff_max!r}"
            )
        self.num_blocks = num_blocks
        self.policy = policy
        self.max_in_flight = num_blocks if max_in_flight is None else max_in_flight
        if isinstance(max_invalid, bool) or not isinstance(max_invalid, int) or max_invalid < 1:
            raise ValueError(f"max_invalid must be an integer >= 1, got {max_invalid!r}")
        self.max_invalid = max_invalid
        self.max_retries = max_retries
        self.backoff = float(backoff)
        self.backoff_max = float(backoff_max)
        self._clock = clock
        self._lock = threading.RLock()
        self._blocks = [_Block() for _ in range(num_blocks)]
        self._by_task: dict[int, int] = {}  # task id -> block, for tasks in flight
        # Kept in step with every status change (_set_status), so a dispatch decision costs
        # O(idle blocks), not O(P): with P = 1024 the scans were the driver's bottleneck.
        self._idle: set[int] = set(range(num_blocks))
        self._failed: set[int] = set()
        self._given_up = 0
        # SSP's clocks: how many live blocks have each finished-task count (at most s + 2
        # distinct values under SSP), so the slowest live clock costs no scan of the blocks
        self._live_clocks: Counter[int] = Counter({0: num_blocks})
        # and the idle blocks by clock, so SSP looks only at those it may dispatch
        self._idle_by_clock: dict[int, set[int]] = {0: set(range(num_blocks))}
        if (
            isinstance(initial_version, bool)
            or not isinstance(initial_version, int)
            or initial_version < 0
        ):
            raise ValueError(f"initial_version must be an integer >= 0, got {initial_version!r}")
        self.version = initial_version
        if block_tasks is not None:
            # Resuming: each block's task count seeds its samples, so it must continue, not restart.
            if len(block_tasks) != num_blocks or any(int(t) < 0 for t in block_tasks):
                raise ValueError(
                    f"block_tasks must hold {num_blocks} counts >= 0, got {list(block_tasks)!r}"
                )
            for b, t in zip(self._blocks, block_tasks, strict=True):
                b.tasks = int(t)
        self._next_task_id = 0
        self.counts = Counter(
            {"dispatched": 0, "accepted": 0, "rejected": 0, "cancelled": 0, "failed": 0}
        )
        self.invalid = 0  # rejected because the result was invalid (part of "rejected")
        self.staleness_histogram: Counter[int] = Counter()  # accepted results
        self.rejected_staleness: Counter[int] = Counter()
        if bookkeeping is not None:
            self._restore(bookkeeping)

    # --- queries ------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return len(self._by_task)

    @property
    def live_blocks(self) -> int:
        return self.num_blocks - self._given_up

    def status(self, block: int) -> BlockStatus:
        return self._blocks[block].status

    def given_up_blocks(self) -> list[int]:
        """The blocks given up for good (dead after too many failures, or quarantined)."""
        with self._lock:
            return [i for i, b in enumerate(self._blocks) if b.status in _GIVEN_UP]

    def block_tasks(self) -> list[int]:
        """Tasks dispatched per block so far (a checkpoint stores them; resuming continues them)."""
        with self._lock:
            return [b.tasks for b in self._blocks]

    def next_retry_due(self) -> float | None:
        """Clock time of the earliest pending retry, or None."""
        if not self._failed:  # read on every result: no lock for the common case
            return None
        with self._lock:
            due = [self._blocks[i].retry_at for i in self._failed]
            return min(due) if due else None

    # --- the three driving calls ----------------------------------------------------------------
    def next_dispatches(self) -> list[TaskTicket]:
        """Blocks that get a task now, marked running; the caller must submit every ticket."""
        with self._lock:
            if not self._idle and not self._failed:
                return []  # every live block is running (the usual case after a result)
            # Least recently dispatched first, so no block starves when slots are fewer than blocks.
            slowest = 0
            if self.policy.uses_clocks and self._live_clocks:
                slowest = min(self._live_clocks)
            limit = self.policy.clock_limit(slowest)
            candidates: Collection[int] = self._idle
            if limit is not None:  # blocks held back by SSP wait: leave them out, unsorted
                candidates = [
                    i for c, ids in self._idle_by_clock.items() if c <= limit for i in ids
                ]
            blocks = self._blocks
            if len(candidates) > 1:
                idle = sorted(candidates, key=lambda i: blocks[i].last_dispatch)
            else:
                idle = list(candidates)
            in_flight = len(self._by_task)
            retries: list[int] = []
            if self._failed:
                now = self._clock()
                retry_due = sorted(i for i in self._failed if blocks[i].retry_at <= now)
                # Retries bypass the barrier: a synchronous round waits for the failed block's
                # result, so holding its retry until the whole round is idle would never finish
                # the round.
                retries = retry_due[: max(0, self.max_in_flight - in_flight)]
            chosen = self.policy.select(
                idle,
                live_blocks=self.live_blocks,
                running=in_flight + len(retries),
                clocks=_Clocks(self._blocks),
                slowest_clock=slowest,
                max_in_flight=self.max_in_flight,
                idle_count=len(self._idle),  # a barrier counts the held-back blocks too
            )
            tickets = [self._dispatch(i, retry=True) for i in retries]
            tickets += [self._dispatch(i, retry=False) for i in chosen]
            return tickets

    def _dispatch(self, block: int, retry: bool) -> TaskTicket:
        b = self._blocks[block]
        ticket = TaskTicket(block, self.version, self._next_task_id, b.tasks, retry)
        self._next_task_id += 1
        b.tasks += 1
        b.last_dispatch = ticket.task_id
        self._set_status(block, BlockStatus.RUNNING)
        b.ticket = ticket
        b.cancel_requested = False
        self._by_task[ticket.task_id] = block
        self.counts["dispatched"] += 1
        return ticket

    def advance(self) -> list[TaskTicket]:
        """Publish a new version; return the running tasks that just became obsolete (to cancel)."""
        with self._lock:
            self.version += 1
            obsolete: list[TaskTicket] = []
            if not self.policy.can_obsolete:
                return obsolete
            for block in self._by_task.values():
                b = self._blocks[block]
                t = b.ticket
                if t is not None and not b.cancel_requested:
                    if self.policy.obsolete(self.version - t.version):
                        b.cancel_requested = True
                        obsolete.append(t)
            return obsolete

    def request_cancel_all(self) -> list[TaskTicket]:
        """Mark every running task for cancellation (shutdown)."""
        with self._lock:
            out = []
            for b in self._blocks:
                if b.ticket is not None and not b.cancel_requested:
                    b.cancel_requested = True
                    out.append(b.ticket)
            return out

    def complete(
        self,
        task_id: int,
        status: TaskStatus,
        duration: float | None = None,
        executor: str | None = None,
        valid: bool = True,
    ) -> Decision:
        """Account for a finished task and decide whether its result is applied.

        ``valid=False`` (an OK task whose result failed validation, e.g. non-finite numbers)
        rejects the result; ``max_invalid`` of them in a row quarantine the block.
        """
        with self._lock:
            block = self._by_task.pop(task_id, None)
            if block is None:
                raise KeyError(f"task {task_id} is not in flight")
            b = self._blocks[block]
            ticket = b.ticket
            assert ticket is not None and ticket.task_id == task_id
            b.ticket = None
            staleness = self.version - ticket.version
            if executor is not None:
                b.executor = executor
            accepted = False
            if status is TaskStatus.OK and not valid:
                b.failures_in_row = 0
                b.invalid_in_row += 1
                self.invalid += 1
                self.counts["rejected"] += 1
                self.rejected_staleness[staleness] += 1
                self._set_status(
                    block,
                    BlockStatus.QUARANTINED
                    if b.invalid_in_row >= self.max_invalid
                    else BlockStatus.IDLE,
                )
            elif status is TaskStatus.OK:
                b.failures_in_row = 0
                b.invalid_in_row = 0
                self._tick(b)
                self._set_status(block, BlockStatus.IDLE)
                if duration is not None:
                    b.durations.append(float(duration))
                b.last_staleness = staleness
                accepted = self.policy.accepts(staleness)
                if accepted:
                    self.counts["accepted"] += 1
                    self.staleness_histogram[staleness] += 1
                else:
                    self.counts["rejected"] += 1
                    self.rejected_staleness[staleness] += 1
            elif status is TaskStatus.CANCELLED:
                self.counts["cancelled"] += 1
                self._set_status(block, BlockStatus.IDLE)
            else:
                self.counts["failed"] += 1
                b.failures_in_row += 1
                if b.failures_in_row > self.max_retries:
                    self._set_status(block, BlockStatus.DEAD)
                else:
                    delay = min(self.backoff * 2 ** (b.failures_in_row - 1), self.backoff_max)
                    b.retry_at = self._clock() + delay
                    self._set_status(block, BlockStatus.FAILED)
            return Decision(ticket, status, staleness, accepted)

    def _tick(self, b: _Block) -> None:
        """One more finished task for a live block (its SSP clock)."""
        self._count_clock(b.clock, -1)
        b.clock += 1
        self._count_clock(b.clock, +1)

    def _count_clock(self, clock: int, delta: int) -> None:
        n = self._live_clocks[clock] + delta
        if n:
            self._live_clocks[clock] = n
        else:
            del self._live_clocks[clock]

    def _set_status(self, block: int, status: BlockStatus) -> None:
        b = self._blocks[block]
        old = b.status
        if old is status:
            return
        if old is BlockStatus.IDLE:
            self._idle.discard(block)
            same_clock = self._idle_by_clock[b.clock]
            same_clock.discard(block)
            if not same_clock:
                del self._idle_by_clock[b.clock]
        elif old is BlockStatus.FAILED:
            self._failed.discard(block)
        elif old in _GIVEN_UP:
            self._given_up -= 1
            self._count_clock(b.clock, +1)
        if status is BlockStatus.IDLE:
            self._idle.add(block)
            self._idle_by_clock.setdefault(b.clock, set()).add(block)
        elif status is BlockStatus.FAILED:
            self._failed.add(block)
        elif status in _GIVEN_UP:
            self._given_up += 1
            self._count_clock(b.clock, -1)
        b.status = status

    # --- bookkeeping view -----------------------------------------------------------------------
    def snapshot(self) -> dict:
        """Plain-data view of the bookkeeping, safe to read while the run goes on."""
        with self._lock:
            blocks = []
            for i, b in enumerate(self._blocks):
                d = np.fromiter(b.durations, dtype=float) if b.durations else None
                blocks.append(
                    {
                        "block": i,
                        "status": b.status.value,
                        "tasks": b.tasks,
                        "finished": b.clock,
                        "last_staleness": b.last_staleness,
                        "mean_task_seconds": None if d is None else float(d.mean()),
                        "p95_task_seconds": None if d is None else float(np.quantile(d, 0.95)),
                        "executor": b.executor,
                        "failures_in_row": b.failures_in_row,
                    }
                )
            counts = dict(self.counts)
            counts["in_flight"] = self.in_flight
            counts["invalid"] = self.invalid
            return {
                "version": self.version,
                "policy": str(self.policy),
                "counts": counts,
                "staleness_histogram": dict(sorted(self.staleness_histogram.items())),
                "rejected_staleness": dict(sorted(self.rejected_staleness.items())),
                "live_blocks": self.live_blocks,
                "blocks": blocks,
            }

    def bookkeeping(self) -> dict[str, Any]:
        """The counters a resumed run continues from (plain JSON). Tasks in flight now will not
        finish in the resumed run: they are counted as cancelled, so its accounting closes."""
        with self._lock:
            counts = dict(self.counts)
            counts["cancelled"] += self.in_flight
            return {
                "counts": counts,
                "invalid": self.invalid,
                "staleness_histogram": [
                    [k, v] for k, v in sorted(self.staleness_histogram.items())
                ],
                "rejected_staleness": [[k, v] for k, v in sorted(self.rejected_staleness.items())],
            }

    def _restore(self, saved: dict[str, Any]) -> None:
        try:
            counts = {k: int(saved["counts"][k]) for k in self.counts}
            invalid = int(saved["invalid"])
            hist = Counter({int(k): int(v) for k, v in saved["staleness_histogram"]})
            rejected = Counter({int(k): int(v) for k, v in saved["rejected_staleness"]})
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"bookkeeping to resume from is malformed: {exc!r}") from None
        if min(counts.values(), default=0) < 0 or invalid < 0:
            raise ValueError(f"bookkeeping counts must be >= 0, got {counts}")
        self.counts.update(counts)
        self.invalid = invalid
        self.staleness_histogram = hist
        self.rejected_staleness = rejected

    def accounting_closes(self) -> bool:
        c = self.counts
        return c["dispatched"] == (
            c["accepted"] + c["rejected"] + c["cancelled"] + c["failed"] + self.in_flight
        )

"""A virtual-time cluster emulator: the real engine, real data and real gradients, P emulated workers.

:class:`VirtualEngine` *is* an :class:`~async_spark.engine.AsyncEngine` — the same
:class:`~async_spark.engine.core.SchedulerCore` (policies, staleness, retries), the same
:class:`~async_spark.engine.history.HistoryStore`, the same straggler models and warm-up, the same
trajectory — driven by a :class:`VirtualTransport` and a :class:`VirtualClock` instead of Spark
and ``time.monotonic``. A dispatched task runs at once, in this process
(:func:`~async_spark.engine.task.run_task` on the block from
:func:`~async_spark.data.blocks.get_block`), so its payload is exactly what a worker would return
for that model version; its *duration* comes from a :class:`CostModel`::

    duration = latency + model_bytes / bandwidth          (download the model version and args)
             + task_overhead + compute                    (one core; shared when ``cores`` is set)
             + straggler delay                            (the engine's StragglerModel, as on Spark)
             + latency + result_bytes / bandwidth         (upload the result)

with ``compute`` either the measured in-process time of the task function (``seconds_per_nnz``
None) or the calibrated model ``compute_fixed + seconds_per_nnz * nnz(sampled rows)``. Results
reach the driver in virtual-completion order (an event queue), and the driver is a serial server:
it spends ``message_seconds`` (the transport's own messaging) on each outcome and
``driver_seconds`` (fixed, or the measured real time of the update and dispatch code when None)
on each result before it dispatches again. So staleness, rejections, cancellations and the
trace are what P workers with one core each would produce, and ``elapsed()`` is virtual seconds.

Contention (``cores = C``): the CPU phases of the tasks in flight share C cores by processor
sharing (each progresses at rate ``min(1, C / computing)``), which models ``local[P]`` on a C-core
machine; a sleeping straggler holds its slot but no core.

:func:`async_spark.solvers.emulation.calibrate` measures ``task_overhead_seconds``,
``compute_fixed_seconds``, ``seconds_per_nnz`` and ``message_seconds`` with linear-solver tasks
on the real Spark engine of this machine; :meth:`CostModel.save` writes JSON. The engine knows
nothing of the solvers: what a task's work is (its nonzeros) is given by ``work_fn``.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import json
import math
import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .checks import check_number
from .core import TaskStatus, TaskTicket
from .engine import AsyncEngine
from .history import InlinePublisher
from .policies import Policy
from .stragglers import NO_DELAY, Delay
from .task import TaskFunction, TaskReport, run_task
from .transport import Outcome, TaskCall, Transport

__all__ = [
    "CostModel",
    "VirtualClock",
    "VirtualEngine",
    "VirtualTransport",
    "payload_nbytes",
    "virtual_engine_factory",
]

COST_MODEL_FORMAT = "async-spark-cost-model/1"


# --- the cost model ------------------------------------------------------------------------------
@dataclass(frozen=True)
class CostModel:
    """How long an emulated task and the driver's handling of a result take (virtual seconds).

    Parameters
    ----------
    task_overhead_seconds : float
        Fixed cost of one task beyond its compute (Spark job submission, scheduling, Python worker
        round trip); :func:`calibrate` measures it as the median of (dispatch-to-result time -
        in-worker compute time) with one task at a time.
    seconds_per_nnz : float or None
        Compute per nonzero of the task's sampled rows (dense blocks: per entry). None: use the
        measured in-process compute time of each task (times ``compute_scale``).
    compute_fixed_seconds : float
        Compute per task independent of its size (sampling, Python calls); with ``seconds_per_nnz``.
    compute_scale : float
        Multiplies the measured compute time (``seconds_per_nnz`` None): e.g. a slower worker CPU.
    bandwidth_bytes_per_second : float or None
        Network bandwidth for the model version and arguments sent to a task and its result sent
        back; None: infinite.
    latency_seconds : float
        One-way message latency, paid twice per task.
    cores : int or None
        None: every worker has its own core. C: the CPU phases (overhead and compute) of all tasks
        in flight share C cores (processor sharing) — ``local[P]`` on a C-core machine.
    overhead_uses_core : bool
        Whether the task overhead competes for the shared cores (True in local mode, where
        scheduling and serialization run on the same machine).
    driver_seconds : float or None
        Serial driver time per received result (accounting, task arguments, dispatch) before the
        driver dispatches again. None: the measured real time of the driver code in this process
        (update rule included; then ``update_seconds`` should be 0).
    update_seconds : float
        Serial driver time per published version (the update rule), on top of ``driver_seconds``.
    message_seconds : float
        Serial driver CPU per task spent by the transport itself, which the in-process emulator
        does not run: encoding and sending the ticket, receiving and decoding the reply (the
        resident transport's frames and sockets, or the job transport's job submission from
        Python), fixed part. Charged for every outcome, on top of ``driver_seconds`` in either
        mode; :func:`~async_spark.solvers.emulation.calibrate` measures it with every block in
        flight.
    message_seconds_per_byte : float
        The transport's driver CPU per byte of a task's messages (model version and args out,
        payload back), on top of ``message_seconds``: framing and copying grow with the model.
    source : str
        Free text: where the figures come from (e.g. "calibrated on local[2], 2025-01-01").
    """

    task_overhead_seconds: float = 0.0
    seconds_per_nnz: float | None = None
    compute_fixed_seconds: float = 0.0
    compute_scale: float = 1.0
    bandwidth_bytes_per_second: float | None = None
    latency_seconds: float = 0.0
    cores: int | None = None
    overhead_uses_core: bool = True
    driver_seconds: float | None = 0.0
    update_seconds: float = 0.0
    message_seconds: float = 0.0
    message_seconds_per_byte: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        check_number("task_overhead_seconds", self.task_overhead_seconds)
        if self.seconds_per_nnz is not None:
            check_number("seconds_per_nnz", self.seconds_per_nnz)
        check_number("compute_fixed_seconds", self.compute_fixed_seconds)
        check_number("compute_scale", self.compute_scale, strict=True)
        if self.bandwidth_bytes_per_second is not None:
            check_number("bandwidth_bytes_per_second", self.bandwidth_bytes_per_second, strict=True)
        check_number("latency_seconds", self.latency_seconds)
        if self.cores is not None and (
            isinstance(self.cores, bool) or not isinstance(self.cores, int) or self.cores < 1
        ):
            raise ValueError(f"cores must be an integer >= 1 or None, got {self.cores!r}")
        if not isinstance(self.overhead_uses_core, bool):
            raise ValueError(f"overhead_uses_core must be a bool, got {self.overhead_uses_core!r}")
        if self.driver_seconds is not None:
            check_number("driver_seconds", self.driver_seconds)
        check_number("update_seconds", self.update_seconds)
        check_number("message_seconds", self.message_seconds)
        check_number("message_seconds_per_byte", self.message_seconds_per_byte)
        if not isinstance(self.source, str):
            raise ValueError(f"source must be a string, got {self.source!r}")

    # --- pieces of a task's duration ----------------------------------------------------------
    @property
    def modelled_compute(self) -> bool:
        return self.seconds_per_nnz is not None

    def compute_seconds(self, nnz: float | None, measured: float) -> float:
        """Compute time of a task touching ``nnz`` nonzeros whose in-process time was ``measured``."""
        if self.seconds_per_nnz is None:
            return measured * self.compute_scale
        if nnz is None:
            raise ValueError("seconds_per_nnz needs the task's nonzero count (give work_fn)")
        return self.compute_fixed_seconds + self.seconds_per_nnz * float(nnz)

    def message_cpu_seconds(self, nbytes: int) -> float:
        """The transport's driver CPU for one task whose messages total ``nbytes``."""
        return self.message_seconds + self.message_seconds_per_byte * nbytes

    def transfer_seconds(self, nbytes: int) -> float:
        """One message of ``nbytes``: latency plus bytes over bandwidth."""
        bw = self.bandwidth_bytes_per_second
        return self.latency_seconds + (0.0 if bw is None else nbytes / bw)

    def expected_task_seconds(
        self, nnz: float, model_bytes: int = 0, result_bytes: int = 0
    ) -> float:
        """Uncontended duration of an undelayed task (modelled compute only)."""
        return (
            self.transfer_seconds(model_bytes)
            + self.task_overhead_seconds
            + self.compute_seconds(nnz, 0.0)
            + self.transfer_seconds(result_bytes)
        )

    def replace(self, **changes: Any) -> CostModel:
        """A copy with some fields changed (validated)."""
        return dataclasses.replace(self, **changes)

    # --- JSON (never pickle) ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"format": COST_MODEL_FORMAT, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CostModel:
        if not isinstance(data, dict):
            raise ValueError(f"a cost model must be a JSON object, got {type(data).__name__}")
        fmt = data.get("format", COST_MODEL_FORMAT)
        if fmt != COST_MODEL_FORMAT:
            raise ValueError(f"cost model format must be {COST_MODEL_FORMAT!r}, got {fmt!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names - {"format"})
        if unknown:
            raise ValueError(f"unknown cost model field(s) {unknown}; known: {sorted(names)}")
        return cls(**{k: v for k, v in data.items() if k in names})

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write JSON atomically."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CostModel:
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a JSON cost model: {exc}") from None
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: {exc}") from None


# --- work and sizes of a task --------------------------------------------------------------------
def payload_nbytes(obj: Any, _depth: int = 0) -> int:
    """Bytes a value takes on the wire, roughly: arrays by ``nbytes``, containers summed."""
    if _depth > 8 or obj is None:
        return 0
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if hasattr(obj, "data") and hasattr(obj, "indices") and hasattr(obj, "indptr"):  # CSR/CSC
        return int(obj.data.nbytes + obj.indices.nbytes + obj.indptr.nbytes)
    if isinstance(obj, bool | int | float | np.generic):
        return 8
    if isinstance(obj, str | bytes):
        return len(obj)
    if isinstance(obj, tuple | list):
        return sum(payload_nbytes(v, _depth + 1) for v in obj)
    if isinstance(obj, dict):
        return sum(payload_nbytes(v, _depth + 1) for v in obj.values())
    return 0  # opaque objects (data sources, models) are small descriptions


WorkFunction = Callable[[int, Any], "float | None"]
"""``work_fn(block, args) -> nnz`` of a task (None when unknown)."""


def _no_work(block: int, args: Any) -> float | None:
    return None


# --- the virtual clock and the event simulation ----------------------------------------------------
class VirtualClock:
    """The driver's virtual time in seconds; callable like ``time.monotonic``."""

    __slots__ = ("now",)

    def __init__(self, start: float = 0.0) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance_to(self, t: float) -> None:
        if t > self.now:
            self.now = t

    def advance_by(self, seconds: float) -> None:
        if seconds > 0:
            self.now += seconds


_WAIT, _CPU = 0, 1


class _Task:
    __slots__ = (
        "ticket",
        "status",
        "report",
        "error",
        "phases",
        "phase",
        "dispatched_at",
        "slot",
        "alive",
        "finished_at",
        "done",
        "message_bytes",
    )

    def __init__(self, ticket: TaskTicket, dispatched_at: float, slot: int) -> None:
        self.ticket = ticket
        self.status = TaskStatus.OK
        self.report: TaskReport | None = None
        self.error: str | None = None
        self.phases: list[tuple[int, float]] = []
        self.phase = -1
        self.dispatched_at = dispatched_at
        self.slot = slot
        self.alive = True
        self.finished_at = 0.0
        self.message_bytes = 0  # the ticket's and the reply's, for the driver's messaging
        self.done = False


class _Simulation:
    """Tasks moving through timed phases and CPU phases (processor sharing over ``cores``)."""

    def __init__(self, cores: int | None) -> None:
        self.cores = cores
        self.t = 0.0  # simulated time reached
        self._seq = 0
        self._timed: list[tuple[float, int, _Task]] = []  # (phase end, seq, task)
        # Processor sharing: all computing tasks receive service at the same rate, so a task that
        # starts computing at service level S with work w finishes when the level reaches S + w.
        self._level = 0.0
        self._computing = 0
        self._cpu: list[tuple[float, int, _Task]] = []  # (finish level, seq, task)
        self.done: list[tuple[float, int, _Task]] = []  # (finish time, seq, task)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _rate(self) -> float:
        assert self.cores is not None
        return min(1.0, self.cores / self._computing) if self._computing else 0.0

    def _serve_until(self, t: float) -> None:
        if self._computing:
            self._level += (t - self.t) * self._rate()
        self.t = max(self.t, t)

    def _clean_tops(self) -> None:
        while self._timed and not self._timed[0][2].alive:
            heapq.heappop(self._timed)
        while self._cpu and not self._cpu[0][2].alive:
            heapq.heappop(self._cpu)

    def _next_event(self) -> tuple[float, int]:
        self._clean_tops()
        t_timed = self._timed[0][0] if self._timed else math.inf
        t_cpu = math.inf
        if self._cpu:
            t_cpu = self.t + max(0.0, self._cpu[0][0] - self._level) / self._rate()
        return (t_timed, 0) if t_timed <= t_cpu else (t_cpu, 1)

    def start(self, task: _Task, at: float) -> None:
        """Start ``task`` (phases set) at time ``at`` >= the simulated time."""
        self.advance(at)
        self._enter_next_phase(task)

    def _enter_next_phase(self, task: _Task) -> None:
        while True:
            task.phase += 1
            if task.phase >= len(task.phases):
                task.finished_at = self.t
                task.done = True
                heapq.heappush(self.done, (self.t, self._next_seq(), task))
                return
            kind, amount = task.phases[task.phase]
            if amount <= 0:
                continue
            if kind == _CPU and self.cores is not None:
                self._serve_until(self.t)
                self._computing += 1
                heapq.heappush(self._cpu, (self._level + amount, self._next_seq(), task))
            else:
                heapq.heappush(self._timed, (self.t + amount, self._next_seq(), task))
            return

    def remove(self, task: _Task) -> None:
        """Take a task out (cancelled); its pending phase entries are dropped lazily."""
        if not task.alive:
            return
        in_cpu = (
            0 <= task.phase < len(task.phases)
            and task.phases[task.phase][0] == _CPU
            and self.cores is not None
            and task.phases[task.phase][1] > 0
        )
        task.alive = False
        if in_cpu:
            self._serve_until(self.t)
            self._computing -= 1

    def advance(self, until: float) -> None:
        """Process every phase end up to time ``until``."""
        while True:
            t, kind = self._next_event()
            if t > until:
                self._serve_until(until)
                return
            self._pop(t, kind)

    def step(self) -> bool:
        """Process the next phase end; False when nothing is running."""
        t, kind = self._next_event()
        if t == math.inf:
            return False
        self._pop(t, kind)
        return True

    def _pop(self, t: float, kind: int) -> None:
        self._serve_until(t)
        if kind == 0:
            _, _, task = heapq.heappop(self._timed)
        else:
            _, _, task = heapq.heappop(self._cpu)
            self._computing -= 1
            self._level = max(self._level, 0.0)
        self._enter_next_phase(task)


# --- the transport ---------------------------------------------------------------------------------
class _VirtualOutcomes:
    """The ``outcomes`` queue of a :class:`VirtualTransport`: results in virtual-completion order."""

    def __init__(self, transport: VirtualTransport) -> None:
        self._transport = transport

    def get(self, block: bool = True, timeout: float | None = None) -> Outcome:
        return self._transport._next_outcome()

    def get_nowait(self) -> Outcome:
        return self._transport._next_outcome()

    def empty(self) -> bool:
        return self._transport.pending == 0

    def qsize(self) -> int:
        return self._transport.pending


class VirtualTransport(Transport):
    """Runs each task in this process at dispatch and schedules its outcome on a virtual clock.

    Parameters
    ----------
    cost : CostModel
    clock : VirtualClock
        Shared with the engine (the driver's time).
    work_fn : callable, optional
        ``work_fn(block, args) -> nnz`` for the modelled compute (the linear solvers give
        :func:`async_spark.solvers.emulation.linear_task_work`); without it the compute is the
        measured in-process time of each task.
    task_seconds : callable, optional
        ``task_seconds(ticket) -> seconds``: a hand-built compute time per task that replaces the
        cost model's compute (tests, what-if schedules).
    """

    def __init__(
        self,
        cost: CostModel,
        clock: VirtualClock,
        *,
        work_fn: WorkFunction | None = None,
        task_seconds: Callable[[TaskTicket], float] | None = None,
    ) -> None:
        super().__init__()
        self.cost = cost
        self.clock = clock
        self.publisher = InlinePublisher()
        self.outcomes = _VirtualOutcomes(self)  # type: ignore[assignment]
        self.work_fn: WorkFunction = work_fn or _no_work
        self.task_seconds = task_seconds
        self._sim = _Simulation(cost.cores)
        self._tasks: dict[int, _Task] = {}  # submitted, outcome not yet handed out
        self._free_slots: list[int] = []
        self._closed = False
        self._mark: float | None = None  # real time when driver-side work started
        self.driver_seconds_total = 0.0  # virtual seconds the driver spent on results
        self.driver_results = 0
        self.real_task_seconds = 0.0  # real in-process time spent computing tasks

    @property
    def pending(self) -> int:
        return len(self._tasks)

    def start(
        self, num_blocks: int, slots: int, run_name: str, *, task_fn: TaskFunction | None = None
    ) -> None:
        self.run_name = run_name
        self._free_slots = list(range(slots - 1, -1, -1))

    # --- driver time --------------------------------------------------------------------------
    def _charge_driver(self) -> None:
        """Measured mode: the real time since the last mark is driver work; advance the clock."""
        if self._mark is None:
            return
        if self.cost.driver_seconds is None and not self._closed:
            spent = time.perf_counter() - self._mark
            self.clock.advance_by(spent)
            self.driver_seconds_total += spent
        self._mark = None

    def _restart_mark(self) -> None:
        self._mark = time.perf_counter()

    # --- submit ---------------------------------------------------------------------------------
    def submit(self, ticket: TaskTicket, call: TaskCall) -> None:
        if self._closed:
            raise RuntimeError("transport is closed")
        self._charge_driver()
        if not isinstance(call, TaskCall):
            raise TypeError(f"VirtualTransport runs TaskCall calls only, got {type(call).__name__}")
        task_fn, handle, block, task_id, args, delay = (
            call.task_fn,
            call.model_ref,
            call.block,
            call.task_id,
            call.args,
            call.delay,
        )
        now = self.clock()
        slot = self._free_slots.pop() if self._free_slots else len(self._tasks)
        task = _Task(ticket, now, slot)
        executor = f"emulated-worker-{slot}"
        real_start = time.perf_counter()
        try:
            (report,) = run_task(task_fn, handle, block, task_id, args, NO_DELAY)
            nnz = None if self.task_seconds is not None else self._work(block, args)
        except BaseException as exc:  # noqa: BLE001 - a failing task is an outcome, as on Spark
            from .transport import _describe

            task.status, task.error = TaskStatus.FAILED, _describe(exc)
            task.phases = [(_CPU if self.cost.overhead_uses_core else _WAIT, self._overhead())]
            self._finish_submit(task, real_start)
            return
        if self.task_seconds is not None:
            compute = float(self.task_seconds(ticket))
            if not (math.isfinite(compute) and compute >= 0):
                raise ValueError(f"task_seconds returned {compute!r} for {ticket}")
        else:
            compute = self.cost.compute_seconds(nnz, report.compute_seconds)
        handle_value = getattr(handle, "value", None)
        down_bytes = payload_nbytes(handle_value) + payload_nbytes(args)
        up_bytes = payload_nbytes(report.payload)
        task.message_bytes = down_bytes + up_bytes
        download = self.cost.transfer_seconds(down_bytes)
        upload = self.cost.transfer_seconds(up_bytes)
        sleep = self._sleep_for(delay, executor, compute)
        overhead = self._overhead()
        if self.cost.overhead_uses_core:
            phases = [(_WAIT, download), (_CPU, overhead + compute), (_WAIT, sleep + upload)]
        else:
            phases = [(_WAIT, download + overhead), (_CPU, compute), (_WAIT, sleep + upload)]
        task.phases = phases
        busy = download + overhead + compute + upload  # uncontended, undelayed: the "task time"
        task.report = report._replace(
            compute_seconds=busy, sleep_seconds=sleep, executor=executor, worker_pid=os.getpid()
        )
        self._finish_submit(task, real_start)

    def _overhead(self) -> float:
        return self.cost.task_overhead_seconds

    def _work(self, block: int, args: Any) -> float | None:
        if not self.cost.modelled_compute:
            return None
        return self.work_fn(block, args)

    @staticmethod
    def _sleep_for(delay: Delay, executor: str, compute: float) -> float:
        return float(delay.extra_seconds(executor, compute))

    def _finish_submit(self, task: _Task, real_start: float) -> None:
        self.real_task_seconds += time.perf_counter() - real_start
        self._tasks[task.ticket.task_id] = task
        self._sim.start(task, self.clock())
        self._restart_mark()

    # --- outcomes -------------------------------------------------------------------------------
    def _next_outcome(self) -> Outcome:
        self._charge_driver()
        sim = self._sim
        while not sim.done:
            if not sim.step():
                raise queue.Empty  # nothing in flight
        finished_at, _, task = heapq.heappop(sim.done)
        del self._tasks[task.ticket.task_id]
        self._free_slots.append(task.slot)
        self.clock.advance_to(finished_at)
        if not self._closed:
            # the reply's messaging, whatever it says; then the engine's own work on a result
            spent = self.cost.message_cpu_seconds(task.message_bytes)
            if task.status is TaskStatus.OK:
                spent += self.cost.driver_seconds or 0.0
                self.driver_results += 1
            if spent:
                self.clock.advance_by(spent)
                self.driver_seconds_total += spent
        seconds = finished_at - task.dispatched_at
        self._restart_mark()
        report = task.report if task.status is TaskStatus.OK else None
        return Outcome(task.ticket, task.status, report, seconds, task.error)

    def cancel(self, ticket: TaskTicket) -> None:
        """A cancelled task frees its worker now (Spark kills it) and reports CANCELLED now."""
        task = self._tasks.get(ticket.task_id)
        if task is None or task.done or task.status is not TaskStatus.OK:
            return
        sim = self._sim
        sim.advance(self.clock())
        if task.done:  # it finished meanwhile: its result won the race
            return
        sim.remove(task)
        task.status = TaskStatus.CANCELLED
        task.report = None
        task.done = True
        task.finished_at = max(sim.t, self.clock())
        heapq.heappush(sim.done, (task.finished_at, sim._next_seq(), task))

    def close(self, timeout: float = 30.0) -> None:
        self._closed = True

    # --- statistics -------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        return {
            "driver_seconds_total": self.driver_seconds_total,
            "driver_results": self.driver_results,
            "driver_seconds_per_result": (
                self.driver_seconds_total / self.driver_results if self.driver_results else None
            ),
            "real_task_seconds": self.real_task_seconds,
        }


# --- the engine -----------------------------------------------------------------------------------
class VirtualEngine(AsyncEngine):
    """:class:`~async_spark.engine.AsyncEngine` on a virtual clock with in-process emulated workers.

    Parameters
    ----------
    task_fn, num_blocks, policy, initial_model, task_args, stragglers, straggler_base_seconds,
    warmup_tasks, max_retries, backoff, run_name, keep_trajectory :
        As for :class:`~async_spark.engine.AsyncEngine`.
    cost : CostModel, optional
        Default: measured compute, no overhead, infinite bandwidth, zero latency, free driver.
    workers : int, optional
        Emulated workers = tasks in flight at most (default ``num_blocks``: one worker per block,
        as in ASYNC). Fewer workers than blocks inherit the core's dispatch order (lowest idle
        block first).
    work_fn, task_seconds : see :class:`VirtualTransport`.
    """

    def __init__(
        self,
        task_fn: TaskFunction,
        *,
        num_blocks: int,
        policy: Policy,
        initial_model: Any,
        cost: CostModel | None = None,
        workers: int | None = None,
        work_fn: WorkFunction | None = None,
        task_seconds: Callable[[TaskTicket], float] | None = None,
        max_in_flight: int | None = None,
        **options: Any,
    ) -> None:
        if "transport" in options or "clock" in options:
            raise ValueError("VirtualEngine makes its own transport and clock")
        if workers is not None and max_in_flight is not None and workers != max_in_flight:
            raise ValueError(
                f"workers ({workers!r}) and max_in_flight ({max_in_flight!r}) are the same thing"
            )
        slots = workers if workers is not None else max_in_flight
        if slots is not None and (
            isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= num_blocks
        ):
            raise ValueError(
                f"workers must be an integer in [1, num_blocks={num_blocks}], got {slots!r}"
            )
        self.cost = cost if cost is not None else CostModel()
        if not isinstance(self.cost, CostModel):
            raise ValueError(f"cost must be a CostModel, got {type(self.cost).__name__}")
        self.virtual_clock = VirtualClock()
        transport = VirtualTransport(
            self.cost, self.virtual_clock, work_fn=work_fn, task_seconds=task_seconds
        )
        super().__init__(
            transport,
            task_fn,
            num_blocks=num_blocks,
            policy=policy,
            initial_model=initial_model,
            max_in_flight=slots,
            clock=self.virtual_clock,
            **options,
        )
        self.virtual_transport = transport

    @property
    def workers(self) -> int:
        return self.core.max_in_flight

    def publish(self, model: Any) -> int:
        """As the engine's; the driver then spends ``update_seconds`` of virtual time."""
        version = super().publish(model)
        if self.cost.update_seconds:
            self.virtual_clock.advance_by(self.cost.update_seconds)
            self.virtual_transport.driver_seconds_total += self.cost.update_seconds
        return version

    def _dispatch(self) -> None:
        """Dispatch as the engine does; when nothing is in flight and a failed block waits for its
        retry, the wait passes in virtual time (the real engine would sleep)."""
        super()._dispatch()
        while self.core.in_flight == 0 and self.core.live_blocks > 0:
            due = self.core.next_retry_due()
            if due is None:
                return
            self.virtual_clock.advance_to(due)
            super()._dispatch()

    def snapshot(self) -> dict[str, Any]:
        snap = super().snapshot()
        snap["emulator"] = {
            "workers": self.workers,
            "cost_model": self.cost.to_dict(),
            **self.virtual_transport.stats(),
        }
        return snap


def virtual_engine_factory(
    cost: CostModel | None = None, **options: Any
) -> Callable[..., VirtualEngine]:
    """An ``engine_factory`` for :func:`~async_spark.solvers.linear.train_linear`."""
    return functools.partial(VirtualEngine, cost=cost, **options)

"""The linear solvers on the cluster emulator: their task's work, the engine factory, calibration.

:mod:`async_spark.engine.emulator` emulates any task function; this module tells it what a
linear-solver task costs (the nonzeros of its sampled rows, :meth:`~async_spark.solvers.worker.LinearTask.work`), builds the
``engine_factory`` that :func:`~async_spark.solvers.linear.train_linear` takes
(:func:`virtual_engine_factory`), and measures the cost model on the real Spark engine with
linear-solver tasks (:func:`calibrate`).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from async_spark.engine.core import TaskTicket
from async_spark.engine.emulator import CostModel, VirtualEngine, payload_nbytes
from async_spark.engine.emulator import virtual_engine_factory as _engine_factory
from async_spark.engine.engine import AsyncEngine
from async_spark.engine.policies import Policy

__all__ = ["calibrate", "virtual_engine_factory"]


def virtual_engine_factory(
    cost: CostModel | None = None, **options: Any
) -> Callable[..., VirtualEngine]:
    """An ``engine_factory`` for :func:`~async_spark.solvers.linear.train_linear` on the emulator,
    with the compute of each task modelled from its nonzeros (the task's ``work``)."""

    def factory(task_fn: Any, **engine_options: Any) -> VirtualEngine:
        work_fn = options.get("work_fn") or getattr(task_fn, "work", None)
        return _engine_factory(cost, **{**options, "work_fn": work_fn})(task_fn, **engine_options)

    return factory


def calibrate(
    spark: Any,
    source: Any,
    desc: Any,
    *,
    loss: str = "logistic",
    method: str = "asaga",
    fractions: tuple[float, ...] = (0.05, 0.1, 0.2, 0.5, 1.0),
    tasks_per_fraction: int = 8,
    message_tasks: int = 200,
    seed: int = 0,
    out: str | os.PathLike[str] | None = None,
    source_note: str | None = None,
    transport: str = "resident",
) -> CostModel:
    """Measure the cost model on the real Spark engine of this machine.

    Runs the tasks a run of ``method`` sends (a row of :data:`~.methods.METHODS`: its worker
    computation, and the extra argument its family ships at dispatch, e.g. SAGA's old scalars,
    from the rule's initial state) through :class:`~async_spark.engine.AsyncEngine` on the
    ``transport`` a run would use ("resident":
    :class:`~async_spark.engine.resident.ResidentTransport`, the default, whose overhead is one
    message each way; "jobs": :class:`~async_spark.engine.spark.SparkTransport`, one Spark job
    per task). First one task at a time (``max_in_flight=1``: no queueing, no contention) at
    several batch fractions, to fit

    - ``compute = compute_fixed + seconds_per_nnz * nnz`` by least squares on the in-worker compute
      times (a block's first task, which loads the block, left out);
    - ``task_overhead = median(dispatch-to-result - compute)``.

    Then the transport's own driver CPU, from ``message_tasks`` results at the first fraction
    with every block in flight, twice: without a new version per result (a resident worker holds
    the model: only args and payload travel) and with one, as a run does. Each time this
    process's CPU per result, minus the same loop's on the emulator's in-process transport (the
    engine's bookkeeping and the task arguments, which the emulator runs itself), is what the
    transport adds; the difference between the two runs over the model's bytes gives
    ``message_seconds_per_byte``, and the first run's remainder ``message_seconds``. It is the
    driver's Python side only: the JVM's scheduling of a job-per-task run is not in it.

    Bandwidth and latency are not measured (loopback here): set them for the cluster to predict.
    The model is saved to ``out`` when given.
    """
    from async_spark.solvers.methods import method as method_row

    row = method_row(method)
    if transport not in ("resident", "jobs"):
        raise ValueError(f"transport must be 'resident' or 'jobs', got {transport!r}")
    if not fractions or any(not 0 < f <= 1 for f in fractions):
        raise ValueError(f"fractions must be in (0, 1], got {fractions!r}")
    for name, value, low in (
        ("tasks_per_fraction", tasks_per_fraction, 2),
        ("message_tasks", message_tasks, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    bench = _Bench(spark, source, desc, loss, row, fractions[0], seed, transport)
    overhead, fixed, per_nnz = _fit_task_costs(bench, fractions, tasks_per_fraction)
    message, per_byte = _message_costs(bench, message_tasks)
    master = spark.conf.get("spark.master", "?")
    cost = CostModel(
        task_overhead_seconds=overhead,
        seconds_per_nnz=per_nnz,
        compute_fixed_seconds=fixed,
        message_seconds=message,
        message_seconds_per_byte=per_byte,
        source=source_note
        or (
            f"calibrated on {master} ({os.cpu_count()} cpus), {transport} transport, "
            f"{desc.dataset_id[:48]}, method {method}, {bench.measured} tasks, "
            f"{time.strftime('%Y-%m-%d %H:%M')}"
        ),
    )
    if out is not None:
        cost.save(out)
    return cost


class _Bench:
    """What the calibration's runs share: the task, the rule's initial state, the transport."""

    def __init__(
        self,
        spark: Any,
        source: Any,
        desc: Any,
        loss: str,
        row: Any,
        fraction: float,
        seed: int,
        transport: str,
    ) -> None:
        from async_spark.models.linear import LinearModel, init_params
        from async_spark.solvers.methods import Problem, Setup, StepChoice
        from async_spark.solvers.worker import LinearTask

        self.spark, self.transport, self.row, self.measured = spark, transport, row, 0
        self.fraction = fraction  # of the message phase's tasks
        self.num_blocks = desc.num_blocks
        model = LinearModel(
            loss=loss,
            num_features=desc.d,
            num_classes=desc.num_classes if loss == "softmax" else None,
        )
        self.theta = init_params(model)
        self.task = LinearTask(source, model, seed, row.computation)
        # The method's rule at its initial state, for what its family ships with a task (the
        # step is never applied: results are timed, not used).
        setup = Setup(
            step=1.0,
            step_rule=None,
            momentum=0.0,
            momentum_damping=0.0,
            batch_fraction=fraction,
            synchronous=row.synchronous,
        )
        self.rule = row.family.build_rule(Problem(model, source, desc), setup, StepChoice(1.0, 0.0))
        self.state = self.rule.init(self.theta)

    def args(self, ticket: TaskTicket, fraction: float) -> Any:
        """The args a run of the method sends with ``ticket`` at ``fraction``."""
        from async_spark.solvers.methods import Dispatch
        from async_spark.solvers.worker import TaskArgs

        args = TaskArgs(ticket.block_task, fraction)
        extra, _ = self.row.family.at_dispatch(
            Dispatch(ticket, args, self.task, self.rule, self.state, lambda v: self.theta)
        )
        return args._replace(extra=extra)

    def engine(self, task_args: Callable[[TaskTicket], Any], **options: Any) -> AsyncEngine:
        from async_spark.engine.resident import ResidentTransport
        from async_spark.engine.spark import SparkTransport

        spark = self.spark
        chosen = (
            ResidentTransport(spark)
            if self.transport == "resident"
            else SparkTransport(spark.sparkContext)
        )
        return AsyncEngine(
            chosen,
            self.task,
            num_blocks=self.num_blocks,
            policy=Policy.asynchronous(),
            initial_model=self.theta,
            task_args=task_args,
            **options,
        )


def _fit_task_costs(
    bench: _Bench, fractions: tuple[float, ...], tasks_per_fraction: int
) -> tuple[float, float, float]:
    """(task overhead, fixed compute, compute per nonzero) from tasks run one at a time."""
    from async_spark.solvers.worker import TaskArgs

    # Task 0 loads its block into the worker (not measured); then each fraction in turn.
    plan = [fractions[0]] + [f for f in fractions for _ in range(tasks_per_fraction)]
    issued: dict[int, float] = {}

    def task_args(ticket: TaskTicket) -> Any:
        frac = plan[min(ticket.task_id, len(plan) - 1)]
        issued[ticket.task_id] = frac
        return bench.args(ticket, frac)

    samples: list[tuple[float, float, float]] = []  # (nnz, compute, seconds)
    # one task at a time: no queueing, no contention
    with bench.engine(task_args, max_in_flight=1, run_name="calibrate-cost-model") as engine:
        count = 0
        for r in engine.results():
            count += 1
            if r.block_task > 0:
                args_nnz = bench.task.work(r.block, TaskArgs(r.block_task, issued[r.task_id]))
                samples.append((float(args_nnz or 0.0), r.compute_seconds, r.seconds))
            if count >= len(plan):
                break
    if len(samples) < 3:
        raise RuntimeError(f"calibration measured only {len(samples)} tasks")
    bench.measured = len(samples)
    nnz = np.array([s[0] for s in samples])
    compute = np.array([s[1] for s in samples])
    seconds = np.array([s[2] for s in samples])
    A = np.stack([np.ones_like(nnz), nnz], axis=1)
    if np.ptp(nnz) > 0:
        (fixed, per_nnz), *_ = np.linalg.lstsq(A, compute, rcond=None)
    else:
        fixed, per_nnz = float(np.median(compute)), 0.0
    if per_nnz < 0:  # noise on tiny tasks: all compute is fixed
        fixed, per_nnz = float(np.median(compute)), 0.0
    overhead = max(0.0, float(statistics.median((seconds - compute).tolist())))
    return overhead, max(0.0, float(fixed)), float(per_nnz)


def _message_costs(bench: _Bench, count: int) -> tuple[float, float]:
    """(seconds per task, seconds per byte) of the transport's driver CPU: this process's CPU per
    result on the real transport minus on the emulator's, every block in flight, the first 2 P
    results (workers warming up) not counted; once without a new version per result (the worker
    holds the model: only args and payload travel) and once with one (the model travels too), so
    that the difference prices a byte."""

    sent: list[int] = []  # bytes of each ticket's args

    def task_args(ticket: TaskTicket) -> Any:
        args = bench.args(ticket, bench.fraction)
        sent.append(payload_nbytes(args))
        return args

    def virtual() -> VirtualEngine:
        return VirtualEngine(
            lambda block, model, args: None,
            num_blocks=bench.num_blocks,
            policy=Policy.asynchronous(),
            initial_model=bench.theta,
            task_args=task_args,
            task_seconds=lambda ticket: 1e-3,
            cost=CostModel(),
            run_name="calibrate-messages-emulated",
        )

    cpu: dict[bool, float] = {}
    nbytes: dict[bool, float] = {}
    for publish in (False, True):
        real = bench.engine(task_args, run_name="calibrate-messages")
        seconds, payload = _cpu_per_result(real, bench.theta, count, publish)
        nbytes[publish] = payload + float(np.mean(sent))
        cpu[publish] = seconds - _cpu_per_result(virtual(), bench.theta, count, publish)[0]
    model_bytes = payload_nbytes(bench.theta)
    per_byte = max(0.0, (cpu[True] - cpu[False]) / model_bytes)
    fixed = max(0.0, cpu[False] - per_byte * nbytes[False])
    return fixed, per_byte


def _cpu_per_result(
    engine: AsyncEngine, model: Any, count: int, publish: bool
) -> tuple[float, float]:
    """(CPU seconds of this process per result, mean bytes of a result's payload)."""
    warm, i, nbytes = 2 * engine.core.num_blocks, -1, 0
    with engine:
        for i, r in enumerate(engine.results()):
            if publish:
                engine.publish(model)  # a new version after every result, as in a run
            if i + 1 == warm:
                cpu = time.process_time()
            elif i + 1 > warm:
                nbytes += payload_nbytes(r.payload)
                if i + 1 == warm + count:
                    return (time.process_time() - cpu) / count, nbytes / count
    raise RuntimeError(f"the calibration's run ended after {i + 1} of {warm + count} results")

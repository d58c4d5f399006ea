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
from async_spark.engine.emulator import CostModel, VirtualEngine
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
    seed: int = 0,
    out: str | os.PathLike[str] | None = None,
    source_note: str | None = None,
    transport: str = "resident",
) -> CostModel:
    """Measure the cost model on the real Spark engine of this machine, one task at a time.

    Runs the tasks a run of ``method`` sends (a row of :data:`~.methods.METHODS`: its worker
    computation, and the extra argument its family ships at dispatch, e.g. SAGA's old scalars,
    from the rule's initial state) at several batch fractions through
    :class:`~async_spark.engine.AsyncEngine` on the ``transport`` a run would use ("resident":
    :class:`~async_spark.engine.resident.ResidentTransport`, the default, whose overhead is one
    message each way; "jobs": :class:`~async_spark.engine.spark.SparkTransport`, one Spark job
    per task) with ``max_in_flight=1`` (no queueing, no contention), and fits

    - ``compute = compute_fixed + seconds_per_nnz * nnz`` by least squares on the in-worker compute
      times (a block's first task, which loads the block, left out);
    - ``task_overhead = median(dispatch-to-result - compute)``.

    Bandwidth and latency are not measured (loopback here): set them for the cluster to predict.
    The model is saved to ``out`` when given.
    """
    from async_spark.engine.resident import ResidentTransport
    from async_spark.engine.spark import SparkTransport
    from async_spark.models.linear import LinearModel, init_params
    from async_spark.solvers.methods import Dispatch, Problem, Setup, StepChoice
    from async_spark.solvers.methods import method as method_row
    from async_spark.solvers.worker import LinearTask, TaskArgs

    row = method_row(method)
    if transport not in ("resident", "jobs"):
        raise ValueError(f"transport must be 'resident' or 'jobs', got {transport!r}")
    if not fractions or any(not 0 < f <= 1 for f in fractions):
        raise ValueError(f"fractions must be in (0, 1], got {fractions!r}")
    if isinstance(tasks_per_fraction, bool) or not isinstance(tasks_per_fraction, int):
        raise ValueError(f"tasks_per_fraction must be an integer >= 2, got {tasks_per_fraction!r}")
    if tasks_per_fraction < 2:
        raise ValueError(f"tasks_per_fraction must be an integer >= 2, got {tasks_per_fraction!r}")
    model = LinearModel(
        loss=loss,
        num_features=desc.d,
        num_classes=desc.num_classes if loss == "softmax" else None,
    )
    theta = init_params(model)
    P = desc.num_blocks
    # Task 0 loads its block into the worker (not measured); then each fraction in turn.
    plan = [fractions[0]] + [f for f in fractions for _ in range(tasks_per_fraction)]
    issued: dict[int, float] = {}

    task = LinearTask(source, model, seed, row.computation)
    # The method's rule at its initial state, for what its family ships with a task (the step
    # is never applied: results are timed, not used).
    setup = Setup(
        step=1.0,
        step_rule=None,
        momentum=0.0,
        momentum_damping=0.0,
        batch_fraction=fractions[0],
        synchronous=row.synchronous,
    )
    rule = row.family.build_rule(Problem(model, source, desc), setup, StepChoice(1.0, 0.0))
    state = rule.init(theta)

    def task_args(ticket: TaskTicket) -> TaskArgs:
        frac = plan[min(ticket.task_id, len(plan) - 1)]
        issued[ticket.task_id] = frac
        args = TaskArgs(ticket.block_task, frac)
        extra, _ = row.family.at_dispatch(
            Dispatch(ticket, args, task, rule, state, lambda v: theta)
        )
        return args._replace(extra=extra)

    samples: list[tuple[float, float, float]] = []  # (nnz, compute, seconds)
    chosen = (
        ResidentTransport(spark) if transport == "resident" else SparkTransport(spark.sparkContext)
    )
    with AsyncEngine(
        chosen,
        task,
        num_blocks=P,
        policy=Policy.asynchronous(),
        max_in_flight=1,  # one task at a time: no queueing, no contention
        initial_model=theta,
        task_args=task_args,
        run_name="calibrate-cost-model",
    ) as engine:
        count = 0
        for r in engine.results():
            count += 1
            if r.block_task > 0:
                frac = issued[r.task_id]
                args_nnz = task.work(r.block, TaskArgs(r.block_task, frac))
                samples.append((float(args_nnz or 0.0), r.compute_seconds, r.seconds))
            if count >= len(plan):
                break
    if len(samples) < 3:
        raise RuntimeError(f"calibration measured only {len(samples)} tasks")
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
    fixed = max(0.0, float(fixed))
    overhead = max(0.0, float(statistics.median((seconds - compute).tolist())))
    master = spark.conf.get("spark.master", "?")
    cost = CostModel(
        task_overhead_seconds=overhead,
        seconds_per_nnz=float(per_nnz),
        compute_fixed_seconds=fixed,
        source=source_note
        or (
            f"calibrated on {master} ({os.cpu_count()} cpus), {transport} transport, "
            f"{desc.dataset_id[:48]}, method {method}, {len(samples)} tasks, "
            f"{time.strftime('%Y-%m-%d %H:%M')}"
        ),
    )
    if out is not None:
        cost.save(out)
    return cost

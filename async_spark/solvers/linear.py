"""A linear training run: setup, the engine, the loop and its recording joined.

A run joins independent pieces: a dataset as blocks (:mod:`async_spark.data`), a linear model
(:mod:`async_spark.models`), a method from the table of :mod:`.methods` (its worker computation,
messages and pure update rule) and :class:`~async_spark.engine.AsyncEngine`, then hands them to
the loop of :mod:`.loop`, which :mod:`.recording` records:

- synchronous methods (the rows of :data:`~.methods.METHODS` marked synchronous: ``sgd``,
  ``saga``, ``hb``, ``ag``, ``apg``) wait for one result per live block, combine them in block
  order and apply one update per round (the bulk-synchronous barrier);
- asynchronous methods (the others: ``asgd``, ``asaga``, ``ahb``, ``aag``, ``aapg``, ``dcasgd``)
  apply every accepted result at once, whatever its staleness (bounded by ``--tau`` if given),
  and the freed block gets new work immediately (or as ``--beta``/``--ssp`` allow).

SAGA's history is the driver's table of one scalar per sample (the GLM trick): at dispatch the
driver draws the task's sample from ``(seed, block, task index)`` and ships the old scalars of
those rows only; the worker rebuilds the old gradients from its local rows. The table lives on
the driver, so losing an executor loses no history.

Setup runs once, in scikit-learn's ``_sag.py`` order: validate the options, choose the step,
build the rule.

Snapshots of the parameters are taken every ``eval_every`` seconds of training and evaluated
after training in one Spark job (or in a side thread when a target objective must stop the run),
so the objective never costs the run training time.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from async_spark.data.blocks import BlockSource, DatasetDescriptor
from async_spark.data.frame import frame_of
from async_spark.engine.core import TaskTicket
from async_spark.engine.engine import AsyncEngine
from async_spark.engine.stragglers import StragglerModel
from async_spark.engine.transport import LocalTransport, Transport
from async_spark.models.linear import LinearModel, init_params, regularizer
from async_spark.reporting.progress import TrainingProgress

from .checkpoint import Checkpoint, check_compatible, save_checkpoint, state_from_parts
from .choice import AUTO
from .config import TrainConfig
from .evaluate import Evaluator, WorkerEvaluator
from .loop import BlockShares, Current, Limits, LoopEnd, Messages, run_updates
from .methods import (
    Dispatch,
    Family,
    Method,
    Problem,
    Setup,
    StepChoice,
    method,
    reads_curvature,
)
from .recording import Recorder, RunRecord
from .safeguard import StepSafeguard
from .validation import ConfigError
from .worker import LinearTask, TaskArgs

__all__ = ["TrainResult", "train_linear", "build_model"]

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """What a run produced (the CLI writes it to ``--out``)."""

    config: TrainConfig
    descriptor: DatasetDescriptor
    model: LinearModel
    theta: np.ndarray
    step: float
    wall_seconds: float
    updates: int
    results_accepted: int
    rejected: int
    final_objective: float
    time_to_target: float | None
    trace: Sequence[dict[str, Any]]  # a TraceView: column-wise, read as dicts
    engine_snapshot: dict[str, Any]
    stopped_by: str
    snapshots: list[tuple[float, int, float]] = field(default_factory=list)
    momentum: dict[str, float] = field(default_factory=dict)
    source: Any = None  # the blocks trained on (their standardization, to undo it)
    # the step safeguard's changes (see .safeguard): {"final_step", "changes": [...], ...}, or None
    step_safeguard: dict[str, Any] | None = None
    # from the call to train_linear to the engine's start (data opened and scanned, step chosen,
    # the transport's tasks started): the fixed cost a user pays before the first update
    setup_seconds: float | None = None
    # how far from optimal (models.linear.optimality_norm): at the start and the returned model
    start_gradient_norm: float | None = None
    gradient_norm: float | None = None
    # asynchronous SGD and momentum: each block's share of the recent results at the end and the
    # range of the weights their results got (.loop.BlockShares); None when not weighted
    block_weights: dict[str, Any] | None = None
    # the convergence test: {"tol", "passed": the snapshot that passed it or None}; None untested
    tolerance: dict[str, Any] | None = None

    def coefficients(self) -> tuple[np.ndarray, np.ndarray]:
        """Weights ``(K, d)`` and intercepts ``(K,)`` for the raw (unstandardized) features."""
        from .outputs import original_scale

        return original_scale(self.model, self.theta, self.source)

    def summary(self) -> dict[str, Any]:
        c = self.engine_snapshot["counts"]
        hist = self.engine_snapshot["staleness_histogram"]
        total = sum(hist.values())
        return {
            "method": self.config.method,
            # how method "auto" (the default) chose it: None where the user named the method
            "method_choice": None
            if self.config.chosen_by is None
            else {"asked": AUTO, "chose": self.config.method, "why": self.config.chosen_by},
            "loss": self.config.loss,
            "loss_choice": {"asked": AUTO, "chose": self.config.loss}
            if self.config.loss_chosen
            else None,
            "num_classes": self.descriptor.num_classes,
            "data": self.config.as_dict()["data"],
            "n": self.descriptor.n,
            "d": self.descriptor.d,
            "nnz": self.descriptor.nnz,
            "partitions": self.descriptor.num_blocks,
            "policy": self.engine_snapshot["policy"],
            "stragglers": self.engine_snapshot["stragglers"],
            "step": self.step,
            "step_safeguard": self.step_safeguard,
            "block_weights": self.block_weights,
            "standardize": self.config.standardize,
            "penalty_on": self.config.penalty_on,
            "fit_intercept": self.config.fit_intercept,
            "l2": self.config.l2,
            "l1": self.config.l1,
            "batch_fraction": self.config.batch_fraction,
            "seed": self.config.seed,
            "updates": self.updates,
            "results_accepted": self.results_accepted,
            "rejected": self.rejected,
            "cancelled": c["cancelled"],
            "failed": c["failed"],
            "dispatched": c["dispatched"],
            "setup_seconds": self.setup_seconds,
            "wall_seconds": self.wall_seconds,
            "final_objective": self.final_objective,
            "gradient_norm": self.gradient_norm,
            "gradient_norm_start": self.start_gradient_norm,
            "target_objective": self.config.target_objective,
            "time_to_target": self.time_to_target,
            "tolerance": self.tolerance,
            "stopped_by": self.stopped_by,
            "mean_staleness": (sum(int(k) * v for k, v in hist.items()) / total) if total else 0.0,
            "max_staleness": max((int(k) for k in hist), default=0),
            # [staleness, count] pairs in order of staleness (JSON objects sort keys as text)
            "staleness_histogram": [[int(k), int(v)] for k, v in sorted(hist.items())],
            "task_seconds": _task_seconds(self.engine_snapshot["blocks"]),
            "straggler_base_seconds": self.engine_snapshot["mean_task_seconds"],
            "transport": self.config.transport,
            # how tickets travelled (resident: models full/delta/held, SAGA tables, bytes)
            "transport_counters": self.engine_snapshot.get("transport", {}),
            "config": self.config.as_dict(),
            **({"momentum": self.momentum} if self.momentum else {}),
        }


def _task_seconds(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """Measured task times: the driver's dispatch-to-result seconds of successful tasks
    (compute, transport and any straggler sleep), as the engine keeps them, each block's last 64
    (``engine.core._TAIL_WINDOW``); not the mean over every task of the run. ``mean``: the
    blocks' means over those windows, weighted by the tasks dispatched to each block over the
    run (a fast block that ran many tasks weighs more); ``p95``: the largest of the blocks' 95th
    percentiles over their windows; ``per_block``: each block's window mean (None for a block
    with no successful task)."""
    timed = [b for b in blocks if b.get("mean_task_seconds") is not None]
    tasks = sum(int(b["tasks"]) for b in timed)
    mean = (
        sum(float(b["mean_task_seconds"]) * int(b["tasks"]) for b in timed) / tasks
        if tasks
        else None
    )
    return {
        "mean": mean,
        "p95": max((float(b["p95_task_seconds"]) for b in timed), default=None),
        "per_block": [b.get("mean_task_seconds") for b in blocks],
    }


def build_model(config: TrainConfig, desc: DatasetDescriptor, source: Any = None) -> LinearModel:
    """The run's model. When ``source`` divides the columns by a scale (standardization) and the
    penalty is on the original columns (``penalty_on="original"``), the penalty is rescaled column
    by column so that the trained model, mapped back to the original columns,
    minimizes the problem as the user wrote it. An ``"auto"`` loss is the one ``desc`` was opened
    for (:meth:`~.config.TrainConfig.for_data`)."""
    config = config.for_data(desc)
    scale = getattr(source, "scale", None)
    return LinearModel(
        loss=config.loss,
        num_features=desc.d,
        num_classes=desc.num_classes if config.loss == "softmax" else None,
        l2=config.l2,
        l1=config.l1,
        penalty_scale=None if scale is None or config.penalty_on != "original" else scale,
        center=getattr(source, "center", None),  # standardized sparse columns, see data.transform
        fit_intercept=config.fit_intercept,
    )


def _job_transport(spark: Any, config: TrainConfig) -> Transport:
    from async_spark.engine.connect import require_classic
    from async_spark.engine.spark import SparkTransport

    require_classic(spark, "--transport jobs", "use --transport resident (the default)")

    return SparkTransport(spark.sparkContext, pool="async", publisher=config.publisher)


def _check_frame_run(
    on_frame: bool,
    spark: Any,
    config: TrainConfig,
    transport: Transport | None,
    engine_factory: Any,
    resume: Checkpoint | None,
) -> None:
    """A DataFrame's partitions (``on_frame``) are read only by the resident tasks of its own
    session, and made anew by each :func:`~async_spark.data.frame.open_frame` (no checkpoint
    fits them)."""
    if not on_frame:
        return
    from async_spark.engine.resident import ResidentTransport

    if resume is not None:
        raise ConfigError("resume", "a run on a DataFrame's partitions cannot be resumed")
    resident = transport is None or (
        isinstance(transport, ResidentTransport) and transport.on_frame
    )
    if spark is None or config.transport != "resident" or not resident or engine_factory:
        raise ConfigError(
            "transport",
            "training on a DataFrame's own partitions needs the resident transport on its "
            "session (each partition is read by its resident task); for another transport, "
            "open the data from files",
        )


def _transport(spark: Any, config: TrainConfig, source: Any) -> Transport:
    if spark is None:
        return LocalTransport()
    if config.transport == "resident":
        from async_spark.engine.resident import ResidentTransport

        return ResidentTransport(spark, source=source)
    return _job_transport(spark, config)


def _start(engine: Any, rebuild: Any, spark: Any, config: TrainConfig) -> Any:
    """Start the engine; a resident transport that cannot start falls back to one Spark job per
    task, with one line saying why."""
    try:
        engine.start()
        return engine
    except Exception as exc:  # noqa: BLE001 - any failure to start resident tasks falls back
        from async_spark.engine.resident import ResidentTransport

        transport = getattr(engine, "transport", None)
        if not isinstance(transport, ResidentTransport) or transport.connect or transport.on_frame:
            raise  # no job transport to fall back to on Spark Connect, nor for a DataFrame
        engine.close()
        reason = " ".join(str(exc).split())[:300]
        log.warning("resident transport could not start (%s); using --transport jobs", reason)
        if not config.quiet:
            print(
                f"async-spark: resident transport could not start ({reason}); "
                "falling back to --transport jobs",
                file=sys.stderr,
            )
        engine = rebuild(_job_transport(spark, config))
        engine.start()
        return engine


def decays(config: TrainConfig, row: Method) -> bool:
    """Whether the step safeguard halves the run's step on plateaus (:mod:`.safeguard`): an
    automatic step with the default step rule, of a method that a constant step leaves in a
    noise ball, on noisy gradients: sampled rows (``batch_fraction < 1``), or one block's exact
    gradient per update (ASGD, DC-ASGD: the spread between blocks is the noise). A synchronous
    round of whole blocks is the full gradient: no ball. Nor is an asynchronous momentum method's
    stale oscillation: halving its step leaves the momentum's swing and only slows it (digits with
    whole blocks, ``benchmarks/peers.py --quick``: AAG did not reach 1e-3 within 5 s with the
    halvings, and did in 2.97 s without them; RESULTS.md). The step rule of a decaying run is
    ``constant`` (else SGD's default ``sqrt`` would decay it twice)."""
    fraction = _fraction(config, row)
    return bool(
        config.step_safeguard
        and config.step == "auto"
        and config.step_rule is None
        and row.family.noise_ball
        and (fraction < 1 or not (row.synchronous or row.momentum))
    )


def searches(config: TrainConfig, row: Method) -> bool:
    """Whether the step safeguard searches the run's step upward (:mod:`.safeguard`): an
    automatic step (an explicit ``--step`` is only lowered) of a family that allows it, except
    an asynchronous momentum method, whose stale momentum a raised step amplifies (breast
    cancer, 2 blocks, in process: unsearched AAG reached 1e-3 in about 350 updates, searched it
    was raised to 16x, fell back to 8x and did not in 6 000)."""
    automatic = config.step == "auto" and row.family.step_search
    return automatic and (row.synchronous or not row.momentum)


def _fraction(config: TrainConfig, row: Method) -> float:
    """The run's batch fraction: as given, else the method's (what ``for_method`` sets)."""
    return config.batch_fraction or row.family.batch_fraction


def _exact(config: TrainConfig, row: Method) -> bool:
    """A synchronous round of whole blocks with an automatic step: gradient descent, for which
    a constant step (found by the safeguard's search) is the right rule, not ASYNC's sqrt."""
    whole = _fraction(config, row) >= 1
    return config.step == "auto" and config.step_rule is None and whole and row.synchronous


def _step_and_rule(
    config: TrainConfig, row: Method, problem: Problem
) -> tuple[StepChoice, Any, StepSafeguard | None]:
    """Setup after validation, in scikit-learn's ``_sag.py`` order: the step, then the rule (and
    the step safeguard that may rebuild it with another step)."""
    family, desc = row.family, problem.desc
    setup = Setup(
        step=config.step,
        step_rule=config.step_rule,
        momentum=config.momentum,
        momentum_damping=cast(float, config.for_method().momentum_damping),
        batch_fraction=_fraction(config, row),
        synchronous=row.synchronous,
        max_delay=config.max_delay(desc.num_blocks),
        momentum_restart=config.momentum_restart,
    )
    # an automatic step that the safeguard halves on plateaus is constant between halvings
    decay = decays(config, row)
    if decay or _exact(config, row):
        setup = setup._replace(step_rule="constant")
    step = family.choose_step(problem, setup)
    rule = family.build_rule(problem, setup, step)
    if not config.step_safeguard or family.reads_losses:  # a line search judges its own steps
        return step, rule, None
    safeguard = StepSafeguard(
        step.gamma,
        rebuild=lambda gamma: family.build_rule(problem, setup, step._replace(gamma=gamma)),
        penalty=functools.partial(regularizer, problem.model),
        window=max(2 * desc.num_blocks, 8),
        grace=desc.num_blocks,
        search=searches(config, row),
        decay=decay,
        pool_rows=float(desc.n),  # a pooled estimate samples as many rows as the data has
        block_rows=desc.rows_per_block,  # estimates stratified by block
        sample_fraction=setup.batch_fraction,  # whole blocks: exact losses, no sample
        **rise_test(row),
        log_level=logging.INFO if config.quiet else logging.WARNING,
    )
    return step, rule, safeguard


def rise_test(row: Method) -> dict[str, Any]:
    """The safeguard's rise test for ``row`` (:mod:`.safeguard`): for SGD and SAGA a rise must be
    shared by the blocks, and asynchronously hold two windows (an executor that pauses pulls the
    model between blocks, then its stale results come in a burst); a momentum method's rise is
    its function-value restart, eager: any rise of the blocks two windows share, at once, and
    asynchronously on the scale of exact losses (whole blocks: the rise floor alone), where a
    stale momentum swings."""
    if row.momentum:
        return {"shared": False, "confirm": 1, "exact": not row.synchronous}
    return {"shared": True, "confirm": 1 if row.synchronous else 2, "exact": False}


def _initial(
    problem: Problem, rule: Any, safeguard: StepSafeguard | None, resume: Checkpoint | None
) -> Current:
    """The parameters, rule state and rule the run starts from: fresh, or the checkpoint's."""
    if resume is not None and safeguard is not None and resume.engine.get("step_safeguard"):
        rule = safeguard.restore(resume.engine["step_safeguard"]) or rule  # a changed step stays
    theta = init_params(problem.model)
    current = Current(theta, rule.init(theta), rule)
    if resume is None:
        return current
    check_compatible(resume, problem.desc, theta.size)
    return Current(
        np.array(resume.theta),
        state_from_parts(current.state, resume.state_arrays, resume.state_scalars),
        rule,
    )


@dataclass
class _TaskArgs:
    """``task_args`` of the engine: each task's arguments, with the extra argument its family
    ships at dispatch (the family's memo is kept by ``messages`` until the result returns)."""

    family: Any
    task: LinearTask
    current: Current
    messages: Messages
    batch_fraction: float
    engine: Any = None  # the engine running the tasks (its history store), set once built

    def __call__(self, ticket: TaskTicket) -> TaskArgs:
        args = TaskArgs(ticket.block_task, self.batch_fraction)
        current = self.current
        extra, memo = self.family.at_dispatch(
            Dispatch(
                ticket, args, self.task, current.rule, current.state, self.engine.history.model
            )
        )
        self.messages.dispatched(ticket.block, ticket.task_id, memo)
        return args._replace(extra=extra)


def _engine_maker(
    config: TrainConfig,
    desc: DatasetDescriptor,
    task_args: _TaskArgs,
    stragglers: StragglerModel,
    resume: Checkpoint | None,
    engine_factory: Any,
    run_name: str,
) -> Callable[[Transport | None], Any]:
    """``make(transport)``: the run's engine on ``transport`` (or ``engine_factory``'s) for the
    task of ``task_args``, from the current parameters, continuing a checkpoint's bookkeeping
    when resuming."""
    if resume is None:
        resumed: dict[str, Any] = {}
        base = config.straggler_base
    else:
        resumed = {
            "initial_version": resume.version,
            "block_tasks": resume.block_tasks,
            "bookkeeping": resume.engine.get("bookkeeping"),
            "elapsed_offset": resume.seconds,
        }
        base = config.straggler_base
        if base is None:
            base = resume.engine.get("mean_task_seconds")

    def make(chosen: Transport | None) -> Any:
        factory: Any = engine_factory or functools.partial(AsyncEngine, cast(Transport, chosen))
        return factory(
            task_args.task,
            num_blocks=desc.num_blocks,
            policy=config.policy(),
            initial_model=task_args.current.theta,
            task_args=task_args,
            stragglers=stragglers,
            straggler_base_seconds=base,
            max_retries=config.max_retries,
            run_name=run_name,
            **resumed,
        )

    return make


def _evaluator(spark: Any, problem: Problem, engine: Any = None) -> Evaluator:
    """The objective of snapshots, evaluated on Spark (classic or Connect) or in this process.

    After a run on the resident transport the evaluation is a ``mapInArrow`` job, as the run's
    own job was: Spark keeps separate pools of Python workers for Arrow and for RDD tasks, and
    an RDD job would start new processes (imports, the blocks read again: 1.5 s of the 2 s the
    evaluation of a run on ``builtin:breast_cancer`` took) where this one reuses the run's."""
    from async_spark.engine.connect import is_connect
    from async_spark.engine.resident import ResidentTransport

    connect = is_connect(spark)
    sc = None if spark is None or connect else spark.sparkContext
    arrow = connect or isinstance(getattr(engine, "transport", None), ResidentTransport)
    return Evaluator(
        problem.source, problem.model, problem.desc.n, sc=sc, spark=spark if arrow else None
    )


def _side_evaluation(
    engine: Any, recorder: Recorder, problem: Problem, config: TrainConfig
) -> None:
    """A run that stops at a target objective on the resident transport evaluates its snapshots
    on its own workers: its tasks hold the executors' slots, so an evaluation job would wait
    until training ends and the run would never see its target."""
    from async_spark.engine.resident import ResidentTransport

    transport = getattr(engine, "transport", None)
    if (config.target_objective is None and not config.tol) or not isinstance(
        transport, ResidentTransport
    ):
        return
    recorder.evaluate_side_with(
        WorkerEvaluator(transport, problem.model, problem.desc.n, problem.desc.num_blocks)
    )


def _recorder(
    config: TrainConfig,
    spark: Any,
    problem: Problem,
    theta: np.ndarray,
    resume: Checkpoint | None,
    engine: Any,
    family: Family,
) -> Recorder:
    return Recorder(
        _evaluator(spark, problem, engine),
        exact_values=family.exact_values,
        eval_every=config.eval_every,
        initial_theta=theta,
        target_objective=config.target_objective,
        tol=config.tol,
        checkpoint_every=config.checkpoint_every,
        checkpoint_seconds=config.checkpoint_seconds,
        trace=None if resume is None else resume.trace,
        snapshots=None if resume is None else resume.snapshots,
        now=engine.elapsed(),
    )


def _bar_details(engine: Any) -> dict[str, Any]:
    """What the progress bar shows beside the updates: mean staleness, rejected, failed."""
    hist = engine.core.staleness_histogram
    total = sum(hist.values())
    counts = engine.core.counts
    return {
        "staleness": f"{sum(k * v for k, v in hist.items()) / total:.1f}" if total else "0",
        "rejected": counts["rejected"],
        "failed": counts["failed"],
    }


def _progress_bar(
    config: TrainConfig, run_name: str, updates: int, seconds: float, progress: bool | None
) -> TrainingProgress | None:
    if not (not config.quiet if progress is None else progress):
        return None
    return TrainingProgress(
        run_name,
        max_updates=config.max_updates,
        time_budget=config.time_budget,
        initial_updates=updates,
        initial_seconds=seconds,
    )


def _write_checkpoint(
    config: TrainConfig,
    desc: DatasetDescriptor,
    engine: Any,
    current: Current,
    recorder: Recorder,
    safeguard: StepSafeguard | None,
    done: int,
) -> None:
    """The run's checkpoint after ``done`` updates into ``config.out`` (none without it)."""
    if config.out is None:
        return
    save_checkpoint(
        config.out,
        updates=done,
        version=engine.version,
        seconds=engine.elapsed(),
        theta=current.theta,
        state=current.state,
        block_tasks=engine.core.block_tasks(),
        config={**config.as_dict(), "dataset_id": desc.dataset_id},
        trace=recorder.trace + recorder.rejected_records(engine.trajectory),
        snapshots=recorder.snapshots,
        engine={
            "bookkeeping": engine.core.bookkeeping(),
            "mean_task_seconds": engine.mean_task_seconds,
            "step_safeguard": None if safeguard is None else safeguard.summary(),
        },
        keep=config.keep_checkpoints,
    )


def train_linear(
    config: TrainConfig,
    *,
    spark: Any = None,
    transport: Transport | None = None,
    dataset: tuple[BlockSource, DatasetDescriptor] | Any = None,
    engine_factory: Any = None,
    resume: Checkpoint | None = None,
    stop: threading.Event | None = None,
    progress: bool | None = None,
) -> TrainResult:
    """Run one training job.

    Parameters
    ----------
    config : TrainConfig
    spark : SparkSession, optional
        Where tasks run; None runs them in threads of this process (small data, tests).
    transport : Transport, optional
        Overrides the transport built from ``spark``.
    dataset : (BlockSource, DatasetDescriptor) or DataFrame, optional
        An opened dataset (skips :func:`open_dataset`), or a DataFrame (``features``, ``label``)
        whose own partitions are the blocks (:func:`~async_spark.data.frame.open_frame`).
    engine_factory : callable, optional
        ``engine_factory(task_fn, **engine_options)``: an object with the interface of
        :class:`~async_spark.engine.AsyncEngine` (e.g. a virtual-time emulator, whose clock
        ``engine.elapsed()`` then drives the trace); default: an ``AsyncEngine`` on ``transport``.
    resume : Checkpoint, optional
        Continue the run saved in this checkpoint (see :mod:`.checkpoint`).
    stop : threading.Event, optional
        Set it (e.g. from a signal handler) to end the run after the current update: tasks in
        flight cancelled, a final checkpoint written, ``stopped_by`` ``"interrupted"``.
    progress : bool, optional
        A progress bar (tqdm; a notebook widget) on stderr; default: unless ``config.quiet``.
    """
    called = time.perf_counter()  # setup_seconds: the user's call to the engine's start
    if dataset is not None and not isinstance(dataset, tuple):  # a DataFrame's partitions
        return _on_frame(config, dataset, spark, transport, resume, stop, progress, engine_factory)
    # Setup, once: validate -> step size -> rule.
    stragglers = config.validate().straggler_model()  # parsed once, by validate
    if dataset is not None and config.partitions is None:
        config = dataclasses.replace(config, partitions=dataset[1].num_blocks)
    config = config.for_session(spark).for_method()
    source, desc = config.open_data() if dataset is None else dataset
    config = config.for_data(desc)  # an "auto" loss: the one the labels called for
    problem = Problem(build_model(config, desc, source), source, desc)
    family = (row := method(config.method)).family
    step, rule, safeguard = _step_and_rule(config, row, problem)
    current = _initial(problem, rule, safeguard, resume)
    # tasks compute losses only: the per-column penalty scale stays on the driver
    worker_model = dataclasses.replace(problem.model, penalty_scale=None)
    task = LinearTask(source, worker_model, config.seed, family.computation)
    messages = Messages(family, row.synchronous, desc.num_blocks, config.block_weights)
    task_args = _TaskArgs(family, task, current, messages, cast(float, config.batch_fraction))
    run_name = f"{config.method}-{desc.dataset_id[:24]}"
    make_engine = _engine_maker(
        config, desc, task_args, stragglers, resume, engine_factory, run_name
    )
    _check_frame_run(frame_of(source) is not None, spark, config, transport, engine_factory, resume)
    chosen = None
    if engine_factory is None:
        chosen = transport if transport is not None else _transport(spark, config, source)
    engine = task_args.engine = make_engine(chosen)
    recorder = _recorder(config, spark, problem, current.theta, resume, engine, family)
    updates = 0 if resume is None else resume.updates
    bar = _progress_bar(config, run_name, updates, engine.elapsed(), progress)
    try:
        engine = task_args.engine = _start(engine, make_engine, spark, config)
        _side_evaluation(engine, recorder, problem, config)
        setup_seconds = time.perf_counter() - called
        checkpoint = functools.partial(
            _write_checkpoint, config, desc, engine, current, recorder, safeguard
        )
        with engine:
            end = run_updates(
                engine,
                current,
                messages,
                recorder,
                gamma=step.gamma,
                updates=updates,
                limits=Limits(config.max_updates, config.time_budget, stop),
                checkpoint=checkpoint,
                on_update=None if bar is None else _bar_updater(bar, engine),
                safeguard=safeguard,
            )
            if recorder.checkpoints:
                checkpoint(end.updates)  # the final state, whatever stopped the run
        # After close: results rejected while the run stopped are in the counts, so in the trace.
        recorder.rejected(engine.trajectory)
    finally:
        recorder.close()
        if bar is not None:
            bar.close(functools.partial(_bar_details, engine))
    model = np.array(family.iterate(current.theta, current.state))
    record = recorder.finish(end.wall, engine.version, model)
    _warn_if_separable(config, record.final_objective, model)
    parts = (problem, row, step, model, end, record, engine, safeguard, setup_seconds, current)
    return _result(config, *parts, messages.shares)


#: A mean classification loss below this, without a penalty, means every training row is
#: classified with a margin of about 14 or more (log(1 + e^-14) = 8e-7): separable rows.
SEPARABLE_LOSS = 1e-6


def _warn_if_separable(config: TrainConfig, final_objective: float, theta: np.ndarray) -> None:
    """Without a penalty, a classification loss on separable rows has no minimum (its infimum,
    0, is at infinite weights): the weights returned say when the run stopped, not a solution.
    pyspark.ml's default (regParam 0) meets this on small data; say so instead of returning
    weights of 10^6 silently."""
    if config.loss == "squares" or config.l2 > 0 or config.l1 > 0:
        return
    if not final_objective < SEPARABLE_LOSS:
        return
    log.warning(
        "the training rows are linearly separable and the objective has no penalty (l2 = l1 = 0"
        ", regParam = 0): its infimum, 0, lies at infinite weights, so the weights returned "
        "(largest |w| %.3g, training loss %.3g) only say when the run stopped; set l2 "
        "(--l2, regParam) > 0 for a model with a minimum",
        float(np.max(np.abs(theta), initial=0.0)),
        final_objective,
    )


def _on_frame(
    config: TrainConfig,
    df: Any,
    spark: Any,
    transport: Transport | None,
    resume: Checkpoint | None,
    stop: threading.Event | None,
    progress: bool | None,
    engine_factory: Any,
) -> TrainResult:
    """:func:`train_linear` on ``df``'s own partitions (``config.partitions`` of them, default
    the session's parallelism), released (unpersisted) when the run ends."""
    from async_spark.data.frame import open_frame, release

    if spark is None:
        raise ConfigError("transport", "a DataFrame trains on its own session (spark=...)")
    config = config.validate().for_session(spark)
    _check_frame_run(True, spark, config, transport, engine_factory, resume)  # before any job
    assert config.partitions is not None
    source, desc = open_frame(
        df,
        partitions=config.partitions,
        standardize=config.standardize,
        loss=config.loss,
        center=config.fit_intercept,
        measure_rows=reads_curvature(config.method),  # not for L-BFGS (the default)
    )
    try:
        return train_linear(
            config,
            spark=spark,
            transport=transport,
            dataset=(source, desc),
            resume=resume,
            stop=stop,
            progress=progress,
            engine_factory=engine_factory,
        )
    finally:
        release(source)


def _result(
    config: TrainConfig,
    problem: Problem,
    row: Method,
    step: StepChoice,
    model: np.ndarray,
    end: LoopEnd,
    record: RunRecord,
    engine: Any,
    safeguard: StepSafeguard | None,
    setup_seconds: float,
    current: Current,
    shares: BlockShares | None,
) -> TrainResult:
    """What the run produced, from the loop's end, the recording, the engine's snapshot and
    the rule the run ended with (a momentum rule's ``final_beta`` differs from the automatic
    ``beta`` when the step search raised the step)."""
    snap = engine.snapshot()
    momentum = {}
    if row.momentum:
        ended = {"final_beta": current.rule.beta, "restart": current.rule.restart}
        damping = config.for_method().momentum_damping
        momentum = {**step.info, "damping": damping, **ended}
    return TrainResult(
        config=config,
        descriptor=problem.desc,
        model=problem.model,
        theta=model,
        step=step.gamma,
        wall_seconds=end.wall,
        updates=end.updates,
        results_accepted=snap["counts"]["accepted"],
        rejected=snap["counts"]["rejected"],
        final_objective=record.final_objective,
        time_to_target=record.time_to_target,
        trace=record.trace,
        engine_snapshot=snap,
        stopped_by=end.stopped_by,
        snapshots=record.snapshots,
        momentum=momentum,
        source=problem.source,
        step_safeguard=None if safeguard is None else safeguard.summary(),
        setup_seconds=setup_seconds,
        start_gradient_norm=record.start_gradient_norm,
        gradient_norm=record.gradient_norm,
        block_weights=None if shares is None else shares.summary(),
        tolerance=record.tolerance,
    )


def _bar_updater(bar: TrainingProgress, engine: Any) -> Callable[[int, float], None]:
    details = functools.partial(_bar_details, engine)
    return lambda k, now: bar.update(k, now, details)

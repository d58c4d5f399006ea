"""One training loop for SGD, ASGD, SAGA and ASAGA on the engine.

The loop joins three independent pieces: a dataset as blocks (:mod:`async_spark.data`), a linear
model (:mod:`async_spark.models`) and a pure update rule (:mod:`async_spark.optim`), and drives
them through :class:`~async_spark.engine.AsyncEngine`:

- synchronous methods (``sgd``, ``saga``) wait for one result per live block, combine them and
  apply one update per round (the bulk-synchronous barrier);
- asynchronous methods (``asgd``, ``asaga``) apply every accepted result at once, whatever its
  staleness (bounded by ``--tau`` if given), and the freed block gets new work immediately (or as
  ``--beta``/``--ssp`` allow).

SAGA's history is the driver's table of one scalar per sample (the GLM trick): at dispatch the
driver draws the task's sample from ``(seed, block, task index)`` and ships the old scalars of
those rows only; the worker rebuilds the old gradients from its local rows. The table lives on
the driver, so losing an executor loses no history.

Snapshots of the parameters are taken every ``eval_every`` seconds of training and evaluated
after training in one Spark job (or in a side thread when a target objective must stop the run),
so the objective never costs the run training time.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from async_spark.data.blocks import BlockSource, DatasetDescriptor
from async_spark.engine.core import TaskTicket
from async_spark.engine.engine import AsyncEngine, EngineError
from async_spark.engine.transport import LocalTransport, Transport
from async_spark.models.linear import LinearModel, init_params
from async_spark.optim.saga import SAGAMessage, combine_saga_messages, saga
from async_spark.optim.sgd import SGDMessage, combine_sgd_messages, sample_rows, sgd
from async_spark.optim.steps import auto_step, make_step_rule
from async_spark.reporting.progress import TrainingProgress

from .checkpoint import Checkpoint, check_compatible, save_checkpoint, state_from_parts
from .config import MOMENTUM_METHODS, TrainConfig
from .curvature import gram_max_eigenvalue
from .evaluate import Evaluator
from .momentum import MomentumLinear, momentum_step
from .tasks import LinearTaskArgs, linear_task

__all__ = ["TrainResult", "train_linear", "build_model"]

log = logging.getLogger(__name__)

MAX_SNAPSHOTS = 400  # snapshots kept in memory for evaluation (decimated beyond)
DIVERGENCE_FACTOR = 1e4  # gradient norm growth over the first updates that means divergence


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
    trace: list[dict[str, Any]]
    engine_snapshot: dict[str, Any]
    stopped_by: str
    snapshots: list[tuple[float, int, float]] = field(default_factory=list)
    momentum: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        c = self.engine_snapshot["counts"]
        hist = self.engine_snapshot["staleness_histogram"]
        total = sum(hist.values())
        return {
            "method": self.config.method,
            "loss": self.config.loss,
            "data": self.config.as_dict()["data"],
            "n": self.descriptor.n,
            "d": self.descriptor.d,
            "nnz": self.descriptor.nnz,
            "partitions": self.descriptor.num_blocks,
            "policy": self.engine_snapshot["policy"],
            "stragglers": self.engine_snapshot["stragglers"],
            "step": self.step,
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
            "wall_seconds": self.wall_seconds,
            "final_objective": self.final_objective,
            "target_objective": self.config.target_objective,
            "time_to_target": self.time_to_target,
            "stopped_by": self.stopped_by,
            "mean_staleness": (sum(int(k) * v for k, v in hist.items()) / total) if total else 0.0,
            "max_staleness": max((int(k) for k in hist), default=0),
            "staleness_histogram": {str(k): v for k, v in hist.items()},
            "mean_task_seconds": self.engine_snapshot["mean_task_seconds"],
            **({"momentum": self.momentum} if self.momentum else {}),
        }


def build_model(config: TrainConfig, desc: DatasetDescriptor) -> LinearModel:
    return LinearModel(
        loss=config.loss,
        num_features=desc.d,
        num_classes=desc.num_classes if config.loss == "softmax" else None,
        l2=config.l2,
        l1=config.l1,
    )


class _SnapshotEvaluator:
    """Evaluates snapshots in a side thread (pool ``eval``) to stop at a target objective."""

    def __init__(self, evaluator: Evaluator, target: float) -> None:
        self.evaluator = evaluator
        self.target = target
        self.reached = threading.Event()
        self.values: dict[int, float] = {}
        self._queue: queue.Queue[tuple[int, np.ndarray] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="async-spark-eval", daemon=True)
        self.error: BaseException | None = None
        self._thread.start()

    def submit(self, index: int, theta: np.ndarray) -> None:
        self._queue.put((index, theta))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            # Evaluate only the newest snapshot waiting: older ones are done after training.
            while True:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    return
                item = nxt
            index, theta = item
            try:
                value = float(self.evaluator.objectives(theta[None, :])[0])
            except BaseException as exc:  # noqa: BLE001 - reported by the training loop
                self.error = exc
                self.reached.set()
                return
            self.values[index] = value
            if value <= self.target:
                self.reached.set()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=600)


def _results_or_divergence(engine: Any, gamma: float) -> Any:
    """The engine's results; when every block was quarantined for non-finite results, the run
    diverged: say so (a FloatingPointError that suggests a smaller step)."""
    try:
        yield from engine.results()
    except EngineError as exc:
        if engine.core.invalid and engine.core.live_blocks == 0:
            raise FloatingPointError(
                f"every block returned non-finite gradients: the run diverged; the step {gamma:g} "
                "is too large for this data; try a smaller --step"
            ) from exc
        raise


def train_linear(
    config: TrainConfig,
    *,
    spark: Any = None,
    transport: Transport | None = None,
    dataset: tuple[BlockSource, DatasetDescriptor] | None = None,
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
    dataset : (BlockSource, DatasetDescriptor), optional
        An already opened dataset (skips :func:`open_dataset`).
    engine_factory : callable, optional
        ``engine_factory(task_fn, **engine_options)`` returning an object with the interface of
        :class:`~async_spark.engine.AsyncEngine` (e.g. a virtual-time emulator); the default
        builds an ``AsyncEngine`` on ``transport``. The loop reads time from
        ``engine.elapsed()``, so an emulator's virtual clock drives the trace.
    resume : Checkpoint, optional
        Continue the run saved in this checkpoint (see :mod:`.checkpoint`).
    stop : threading.Event, optional
        Set it (e.g. from a signal handler) to end the run cleanly after the current update:
        in-flight tasks are cancelled, a final checkpoint is written, ``stopped_by`` is
        ``"interrupted"``.
    progress : bool, optional
        A progress bar (tqdm; a widget in a notebook) on stderr; default: unless
        ``config.quiet``.
    """
    config.validate()
    if dataset is None:
        dataset = config.open_data()
    source, desc = dataset
    model = build_model(config, desc)
    P = desc.num_blocks
    n = desc.n
    rule_name = config.rule_name
    rule: Any
    momentum_info: dict[str, float] = {}
    if config.method in MOMENTUM_METHODS:
        if config.step == "auto":
            gamma, beta, momentum_info = momentum_step(config.method, model, source, desc)
        else:
            gamma, beta = float(config.step), float(config.momentum or 0.0)
        momentum_info.update(alpha=gamma, beta=beta, damping=config.momentum_damping)
        rule = MomentumLinear(
            config.method,
            model,
            n=n,
            num_blocks=P,
            batch_fraction=config.batch_fraction,
            alpha=gamma,
            beta=beta,
            momentum_damping=config.momentum_damping,
        )
    else:
        if config.step == "auto" and config.synchronous:
            # A synchronous update averages b N rows: the mini-batch step (larger, still safe).
            gamma = auto_step(
                config.method,
                model,
                float(desc.max_row_norm_sq or 0.0),
                n=n,
                batch=config.batch_fraction * n,
                gram_max=gram_max_eigenvalue(source, desc, intercept=model.fit_intercept),
            )
        elif config.step == "auto":
            # Asynchronous updates are stale: the one-sample bound, without the mini-batch gain
            # (stale updates at the mini-batch step oscillate: measured on builtin:synthetic with
            # 8 blocks in flight, ASAGA at 2x this step went from 0.693 up to 2.4).
            gamma = auto_step(config.method, model, float(desc.max_row_norm_sq or 0.0))
        else:
            gamma = float(config.step)
        step_rule_name = config.step_rule or ("sqrt" if rule_name == "sgd" else "constant")
        # gamma / sqrt(k/P + 1) for one result per update; a synchronous update is a whole round,
        # so its rule is ASYNC's gamma / sqrt(k + 1).
        step_rule = make_step_rule(step_rule_name, gamma, num_blocks=1 if config.synchronous else P)
        make_rule = sgd if rule_name == "sgd" else saga
        rule = make_rule(
            model, n=n, num_blocks=P, batch_fraction=config.batch_fraction, step=step_rule
        )
    iterate = getattr(rule, "iterate", lambda params, state: params)
    theta = init_params(model)
    state: Any = rule.init(theta)
    if resume is not None:
        check_compatible(resume, desc, theta.size)
        theta = np.array(resume.theta)
        state = state_from_parts(state, resume.state_arrays, resume.state_scalars)
    offsets = desc.row_offsets
    # SAGA: block -> (task id, global rows) of its task in flight; at most one per block, so this
    # stays bounded whatever happens to the tasks (rejected, cancelled, failed).
    sampled_rows: dict[int, tuple[int, np.ndarray]] = {}

    def task_args(ticket: TaskTicket) -> LinearTaskArgs:
        old = None
        if rule_name == "saga":
            local = sample_rows(
                config.seed,
                ticket.block,
                ticket.block_task,
                desc.rows_per_block[ticket.block],
                config.batch_fraction,
            )
            rows = local + offsets[ticket.block]
            sampled_rows[ticket.block] = (ticket.task_id, rows)
            old = state.table[rows]  # fancy indexing copies: the table may change meanwhile
        return LinearTaskArgs(
            rule_name, source, model, config.batch_fraction, config.seed, ticket.block_task, old
        )

    sc = None if spark is None else spark.sparkContext
    if transport is None:
        if sc is None:
            transport = LocalTransport()
        else:
            from async_spark.engine.spark import SparkTransport

            transport = SparkTransport(sc, pool="async", publisher=config.publisher)
    evaluator = Evaluator(source, model, n, sc=sc)
    side_eval = (
        _SnapshotEvaluator(evaluator, float(config.target_objective))
        if config.target_objective is not None
        else None
    )

    run_name = f"{config.method}-{desc.dataset_id[:24]}"
    if engine_factory is None:
        engine_factory = functools.partial(AsyncEngine, transport)
    engine = engine_factory(
        linear_task,
        num_blocks=P,
        policy=config.policy(),
        initial_model=theta,
        task_args=task_args,
        stragglers=config.straggler_model(),
        straggler_base_seconds=config.straggler_base,
        max_retries=config.max_retries,
        run_name=run_name,
        progress=False,  # the bar below shows the engine's figures
        **(
            {}
            if resume is None
            else {
                "initial_version": resume.version,
                "block_tasks": resume.block_tasks,
                "elapsed_offset": resume.seconds,
            }
        ),
    )

    trace: list[dict[str, Any]] = [] if resume is None else list(resume.trace)
    snapshots: list[tuple[float, int, np.ndarray]] = (
        [(0.0, 0, theta.copy())] if resume is None else list(resume.snapshots)
    )
    updates = 0 if resume is None else resume.updates
    stopped_by = "max_updates"
    round_buffer: list[Any] = []
    eval_every = config.eval_every
    next_snapshot = (snapshots[-1][0] if snapshots else 0.0) + eval_every
    last_checkpoint = engine.elapsed()
    early_gnorm = 0.0
    segment_updates = 0
    bar = (
        TrainingProgress(
            run_name,
            max_updates=config.max_updates,
            time_budget=config.time_budget,
            initial_updates=updates,
            initial_seconds=engine.elapsed(),
        )
        if (not config.quiet if progress is None else progress)
        else None
    )

    def bar_details() -> dict[str, Any]:
        hist = engine.core.staleness_histogram
        total = sum(hist.values())
        counts = engine.core.counts
        return {
            "staleness": f"{sum(k * v for k, v in hist.items()) / total:.1f}" if total else "0",
            "rejected": counts["rejected"],
            "failed": counts["failed"],
        }

    def checkpoint() -> None:
        if config.out is None:
            return
        save_checkpoint(
            config.out,
            updates=updates,
            version=engine.version,
            seconds=engine.elapsed(),
            theta=theta,
            state=state,
            block_tasks=engine.core.block_tasks(),
            config={**config.as_dict(), "dataset_id": desc.dataset_id},
            trace=trace,
            snapshots=snapshots,
            keep=config.keep_checkpoints,
        )

    def message(result: Any) -> Any:
        if rule_name == "sgd":
            return SGDMessage(result.payload, result.staleness)
        delta, new_scalars = result.payload
        task_id, rows = sampled_rows.pop(result.block)
        assert task_id == result.task_id, "one task in flight per block"
        return SAGAMessage(rows, delta, new_scalars, result.staleness)

    try:
        with engine:
            for result in _results_or_divergence(engine, gamma):
                msg = message(result)
                if config.synchronous:
                    round_buffer.append((result.block, msg))
                    if len(round_buffer) < engine.live_blocks:
                        continue
                    combine = combine_sgd_messages if rule_name == "sgd" else combine_saga_messages
                    # In block order: the round's sum does not depend on the order results
                    # arrived in, so a seeded synchronous run is bit-reproducible.
                    round_buffer.sort(key=lambda item: item[0])
                    msg = combine([m for _, m in round_buffer])
                    round_buffer = []
                gnorm = float(np.linalg.norm(msg[1] if rule_name == "saga" else msg[0]))
                if segment_updates < 10:  # this run's (or this resumed segment's) first updates
                    early_gnorm = max(early_gnorm, gnorm)
                    segment_updates += 1
                elif gnorm > DIVERGENCE_FACTOR * max(early_gnorm, 1e-300):
                    raise FloatingPointError(
                        f"the run diverged at update {updates + 1}: the gradient norm grew "
                        f"{gnorm / early_gnorm:.1e}x above its first updates; the step {gamma:g} "
                        "is too large for this data; try a smaller --step (the last checkpoint, "
                        "if any, is kept)"
                    )
                theta, state = rule.update(msg, state, theta)
                if not np.all(np.isfinite(theta)):
                    raise FloatingPointError(
                        f"the parameters became non-finite at update {updates + 1}: the step "
                        f"{gamma:g} is too large for this data; try a smaller --step"
                    )
                engine.publish(theta)
                updates += 1
                now = engine.elapsed()
                trace.append(
                    {
                        "seconds": round(now, 6),
                        "version": engine.version,
                        "staleness": int(msg.staleness),
                        "block": None if config.synchronous else result.block,
                        "objective": None,
                    }
                )
                if bar is not None:
                    bar.update(updates, now, bar_details)
                if now >= next_snapshot:
                    snapshots.append((now, engine.version, np.array(iterate(theta, state))))
                    if side_eval is not None:
                        side_eval.submit(len(snapshots) - 1, snapshots[-1][2])
                    if len(snapshots) > MAX_SNAPSHOTS and side_eval is None:
                        # A long run keeps bounded memory: every other snapshot goes, and they
                        # are taken half as often from now on (the first and last are kept).
                        snapshots = snapshots[:-1:2] + snapshots[-1:]
                        eval_every *= 2
                    next_snapshot = now + eval_every
                if (
                    config.checkpoint_every is not None and updates % config.checkpoint_every == 0
                ) or (
                    config.checkpoint_seconds is not None
                    and now - last_checkpoint >= config.checkpoint_seconds
                ):
                    checkpoint()
                    last_checkpoint = now
                if config.max_updates is not None and updates >= config.max_updates:
                    stopped_by = "max_updates"
                    break
                if config.time_budget is not None and now >= config.time_budget:
                    stopped_by = "time_budget"
                    break
                if side_eval is not None and side_eval.reached.is_set():
                    if side_eval.error is not None:
                        raise side_eval.error
                    stopped_by = "target_objective"
                    break
                if stop is not None and stop.is_set():
                    stopped_by = "interrupted"
                    break
            wall = engine.elapsed()
            if config.checkpoint_every is not None or config.checkpoint_seconds is not None:
                checkpoint()  # the final state, whatever stopped the run
            # Rejected results (staleness bound) are part of the trace, marked as such.
            for seconds, version, staleness, block, accepted, _ in engine.trajectory:
                if not accepted:
                    trace.append(
                        {
                            "seconds": round(seconds, 6),
                            "version": version,
                            "staleness": staleness,
                            "block": block,
                            "objective": None,
                            "accepted": False,
                        }
                    )
    finally:
        if side_eval is not None:
            side_eval.close()
        if bar is not None:
            bar.close(bar_details)
    if not snapshots or snapshots[-1][1] != engine.version:
        snapshots.append((wall, engine.version, np.array(iterate(theta, state))))

    # Off the clock: every snapshot in one evaluation job.
    known = {} if side_eval is None else side_eval.values
    todo = [i for i in range(len(snapshots)) if i not in known]
    values = dict(known)
    if todo:
        objs = evaluator.objectives(np.stack([snapshots[i][2] for i in todo]))
        values.update(zip(todo, (float(v) for v in objs), strict=True))
    by_version = {snapshots[i][1]: values[i] for i in range(len(snapshots))}
    for rec in trace:
        if rec.get("accepted", True) and rec["version"] in by_version:
            rec["objective"] = by_version[rec["version"]]
    trace.sort(key=lambda r: (r["seconds"], r["version"]))
    trace.insert(
        0, {"seconds": 0.0, "version": 0, "staleness": 0, "block": None, "objective": values[0]}
    )
    time_to_target = None
    if config.target_objective is not None:
        for i, (seconds, _, _) in enumerate(snapshots):
            if values[i] <= config.target_objective:
                time_to_target = seconds
                break
    snap = engine.snapshot()
    return TrainResult(
        config=config,
        descriptor=desc,
        model=model,
        theta=np.array(iterate(theta, state)),
        step=gamma,
        wall_seconds=wall,
        updates=updates,
        results_accepted=snap["counts"]["accepted"],
        rejected=snap["counts"]["rejected"],
        final_objective=values[len(snapshots) - 1],
        time_to_target=time_to_target,
        trace=trace,
        engine_snapshot=snap,
        stopped_by=stopped_by,
        snapshots=[(s, v, values[i]) for i, (s, v, _) in enumerate(snapshots)],
        momentum=momentum_info,
    )

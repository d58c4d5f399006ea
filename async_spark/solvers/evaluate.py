"""Objective evaluation of model snapshots, off the training clock.

All snapshots of a run are evaluated in **one** Spark job over the blocks (each task computes the
loss of every snapshot on its cached block), in the scheduler pool ``eval``, after training or in
a side thread; so measuring never slows the run it measures. Without Spark the same code runs
in-process. On a Spark Connect session (no SparkContext, no broadcast), and after a run on the
resident transport (whose Arrow Python workers hold the blocks), the job is a ``mapInArrow``
over ``spark.range(P, numPartitions=P)``, the snapshots travelling in its closure (in chunks of at
most 16 MiB). When the blocks are a DataFrame's partitions (:mod:`async_spark.data.frame`), the
job is a ``mapInArrow`` over that DataFrame, each task reading its own partition.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from async_spark.data.blocks import BlockSource
from async_spark.data.frame import frame_loss_sums, frame_of
from async_spark.models.linear import LinearModel, optimality_norm, regularizer

from .worker import BlockLossArgs, snapshot_losses

__all__ = ["EvaluationUnavailable", "Evaluator", "WorkerEvaluator"]

log = logging.getLogger(__name__)

_MAX_BROADCAST_BYTES = 64 * 2**20
_MAX_CLOSURE_BYTES = 16 * 2**20  # Connect: the snapshots travel in the plan (a gRPC message)
_MAX_GRADIENT_BYTES = 128 * 2**20  # the blocks' gradient sums collected for optimality norms
_LOSSES_SCHEMA = "rows long, sums binary"


class Evaluator:
    """Objective values of parameter vectors over the whole dataset.

    Parameters
    ----------
    source : BlockSource
    model : LinearModel
    n : int
        Rows in the dataset.
    sc : SparkContext or None
        None evaluates in this process.
    pool : str
        FAIR scheduler pool of the evaluation jobs.
    spark : SparkSession, optional
        Evaluate with one ``mapInArrow`` job per chunk on this session: a Spark Connect one
        (``sc`` None), or a classic one whose Arrow Python workers hold the blocks (after a run on
        the resident transport; ``sc`` then sets the jobs' pool and description).
    """

    def __init__(
        self,
        source: BlockSource,
        model: LinearModel,
        n: int,
        sc: Any = None,
        pool: str = "eval",
        spark: Any = None,
    ) -> None:
        self.source = source
        self.spark = spark
        self.model = model
        self.n = n
        self.sc = sc
        self.pool = pool
        self._rdd = (
            None
            if sc is None or spark is not None
            else sc.parallelize(range(source.num_blocks), source.num_blocks)
        )

    def objectives(self, thetas: np.ndarray | list[np.ndarray]) -> np.ndarray:
        """F(θ) for each row of ``thetas``: mean loss + (l2/2)‖w‖² + l1‖w‖₁."""
        return self.evaluate(thetas)[0]

    def objective_and_norm(self, theta: np.ndarray) -> tuple[float, float]:
        """F(θ) and the largest magnitude of its optimality gradient (the convergence test's
        norm; NaN where the gradient is too large to collect), in one job."""
        objs, norms = self.evaluate(theta[None, :], gradients=(0,), order=math.inf)
        return float(objs[0]), float(norms[0])

    def evaluate(
        self,
        thetas: np.ndarray | list[np.ndarray],
        gradients: Sequence[int] = (),
        order: float = 2,
    ) -> tuple[np.ndarray, np.ndarray]:
        """F(θ) of each row of ``thetas``, and the optimality norm of order ``order``
        (:func:`~async_spark.models.linear.optimality_norm`) of the rows at positions
        ``gradients``, in the same job(s): a gradient costs its tasks one more pass over their
        blocks and the driver p numbers per block, not another job. NaN for a norm when the
        blocks' gradient sums would take more than 128 MiB on the driver (a model of 10^6
        parameters over 64 blocks)."""
        thetas = np.atleast_2d(np.asarray(thetas, dtype=np.float64))
        wanted = [int(i) for i in gradients]
        if any(not 0 <= i < len(thetas) for i in wanted):
            raise IndexError(f"gradients {wanted} out of range for {len(thetas)} snapshot(s)")
        if thetas.shape[0] == 0:
            return np.zeros(0), np.zeros(0)
        p = thetas.shape[1]
        unique = sorted(set(wanted))
        # every block sends its gradient sums to the driver: p numbers per block and position
        if not _gradients_fit(self.source.num_blocks, p, len(unique)):
            log.info(
                "optimality norm skipped: %d blocks x %d parameters x %d snapshot(s) of "
                "gradient sums would exceed %d MiB on the driver",
                self.source.num_blocks,
                p,
                len(unique),
                _MAX_GRADIENT_BYTES >> 20,
            )
            unique = []
        limit = _MAX_CLOSURE_BYTES if self.spark is not None else _MAX_BROADCAST_BYTES
        per_chunk = max(1, limit // max(1, thetas[0].nbytes))
        sums, grads = [], {}
        for i in range(0, len(thetas), per_chunk):
            chunk = thetas[i : i + per_chunk]
            local = [g - i for g in unique if i <= g < i + len(chunk)]
            total = self._loss_sums(chunk, local)
            sums.append(total[: len(chunk)])
            for j, g in enumerate(local):
                grads[g + i] = total[len(chunk) + j * p : len(chunk) + (j + 1) * p]
        reg = np.array([regularizer(self.model, t) for t in thetas])
        norms = {g: optimality_norm(self.model, thetas[g], grads[g] / self.n, order) for g in grads}
        return np.concatenate(sums) / self.n + reg, np.array(
            [norms.get(g, math.nan) for g in wanted]
        )

    def _loss_sums(self, thetas: np.ndarray, gradients: Sequence[int] = ()) -> np.ndarray:
        source, model = self.source, self.model
        gradients = tuple(gradients)
        if frame_of(source) is not None:  # a DataFrame's partitions: read where they live
            parts = frame_loss_sums(source, model, thetas, gradients)
        elif self.spark is not None:
            parts = self._arrow_loss_sums(thetas, gradients)
        elif self.sc is None:
            parts = list(
                snapshot_losses(source, model, thetas, range(source.num_blocks), gradients)
            )
        else:
            bc = self.sc.broadcast(thetas)
            try:
                with self._job(len(thetas)):
                    parts = self._rdd.mapPartitions(  # type: ignore[union-attr]
                        lambda it: snapshot_losses(source, model, bc.value, it, gradients)
                    ).collect()
            finally:
                bc.destroy(blocking=False)
        return _blocks_total(parts, self.n)

    @contextlib.contextmanager
    def _job(self, snapshots: int) -> Iterator[None]:
        """The evaluation job's pool and description, on a classic session (Spark Connect has
        no local properties); the caller's pool is restored after."""
        sc = self.sc
        if sc is None:
            yield
            return
        previous = sc.getLocalProperty("spark.scheduler.pool")
        sc.setLocalProperty("spark.scheduler.pool", self.pool)
        sc.setJobDescription(f"evaluate {snapshots} snapshot(s)")
        try:
            yield
        finally:
            sc.setLocalProperty("spark.scheduler.pool", previous)
            sc.setJobDescription(None)

    def _arrow_loss_sums(
        self, thetas: np.ndarray, gradients: tuple[int, ...]
    ) -> list[tuple[np.ndarray, int]]:
        P = self.source.num_blocks
        spark: Any = self.spark
        function = _ArrowLosses(self.source, self.model, np.ascontiguousarray(thetas), gradients)
        frame = spark.range(P, numPartitions=P).mapInArrow(function, _LOSSES_SCHEMA)
        count = len(thetas) + len(gradients) * thetas.shape[1]
        with self._job(len(thetas)):
            rows = frame.collect()
        return [
            (np.frombuffer(row["sums"], dtype=np.float64, count=count), int(row["rows"]))
            for row in rows
        ]


def _gradients_fit(blocks: int, params: int, snapshots: int) -> bool:
    """Whether every block's gradient sums (p numbers per block and snapshot) fit the driver's
    limit for them."""
    return blocks * params * snapshots * 8 <= _MAX_GRADIENT_BYTES


def _blocks_total(parts: list[tuple[np.ndarray, int]], n: int) -> np.ndarray:
    """The blocks' loss sums added in block order (both evaluators: the same value for a
    snapshot), after checking that they cover the dataset's ``n`` rows."""
    rows = sum(r for _, r in parts)
    if rows != n:
        raise RuntimeError(f"evaluation saw {rows} rows, the dataset has {n}")
    return np.sum([s for s, _ in parts], axis=0)


class _ArrowLosses:
    """``mapInArrow`` function: the loss sums of every snapshot on each block id of the batch."""

    def __init__(
        self,
        source: BlockSource,
        model: LinearModel,
        thetas: np.ndarray,
        gradients: tuple[int, ...] = (),
    ) -> None:
        self.source, self.model, self.thetas = source, model, thetas
        self.gradients = gradients

    def __call__(self, batches: Any) -> Any:
        import pyarrow as pa

        for batch in batches:
            blocks = [int(b) for b in batch.column(0).to_pylist()]
            parts = list(
                snapshot_losses(self.source, self.model, self.thetas, blocks, self.gradients)
            )
            yield pa.RecordBatch.from_pydict(
                {
                    "rows": [rows for _, rows in parts],
                    "sums": [np.asarray(s, dtype=np.float64).tobytes() for s, _ in parts],
                },
                schema=pa.schema([("rows", pa.int64()), ("sums", pa.binary())]),
            )


class EvaluationUnavailable(RuntimeError):
    """A snapshot could not be evaluated now (a worker lost, the run ending): the side evaluator
    skips it and the evaluation after training covers it."""


class WorkerEvaluator:
    """Objective values computed by a resident run's own workers, on the blocks they hold
    (:meth:`~async_spark.engine.resident.ResidentTransport.side_call`, one side task per block).

    What a run on the resident transport uses to stop at a target objective while it trains: its
    tasks hold the executors' slots, so an evaluation job (:class:`Evaluator`) would only run
    once training ends. The blocks' loss sums are added in block order, as :class:`Evaluator`
    does, so both give the same value for a snapshot.
    """

    def __init__(self, transport: Any, model: LinearModel, n: int, num_blocks: int) -> None:
        self.transport = transport
        self.model = model
        self.n = n
        self.num_blocks = num_blocks
        # a side task waits behind at most the run's task on its block, or for a lost block's
        # worker until the transport gives up on it
        self.timeout = float(getattr(transport, "submit_wait", 30.0)) + 30.0

    def objectives(self, thetas: np.ndarray | list[np.ndarray]) -> np.ndarray:
        thetas = np.atleast_2d(np.asarray(thetas, dtype=np.float64))
        return np.array([self._evaluate(theta, gradient=False)[0] for theta in thetas])

    def objective_and_norm(self, theta: np.ndarray) -> tuple[float, float]:
        """F(θ) and the largest magnitude of its optimality gradient, from one side task per
        block (NaN for the norm where the blocks' gradients are too large to collect)."""
        p = int(np.asarray(theta).size)
        return self._evaluate(theta, gradient=_gradients_fit(self.num_blocks, p, 1))

    def _evaluate(self, theta: np.ndarray, gradient: bool) -> tuple[float, float]:
        from async_spark.engine.resident import SideCallFailed

        theta = np.asarray(theta, dtype=np.float64)
        args = BlockLossArgs(gradient=gradient)
        calls = [self.transport.side_call(b, theta, args) for b in range(self.num_blocks)]
        try:
            parts = [call.result(self.timeout) for call in calls]
        except (SideCallFailed, TimeoutError) as exc:
            raise EvaluationUnavailable(f"snapshot not evaluated by the workers: {exc}") from exc
        total = _blocks_total([(np.atleast_1d(s), int(r)) for s, r in parts], self.n)
        value = total[0] / self.n + regularizer(self.model, theta)
        if not gradient:
            return float(value), math.nan
        norm = optimality_norm(self.model, theta, total[1:] / self.n, math.inf)
        return float(value), norm

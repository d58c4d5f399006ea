"""Objective evaluation of model snapshots, off the training clock.

All snapshots of a run are evaluated in **one** Spark job over the blocks (each task computes the
loss of every snapshot on its cached block), in the scheduler pool ``eval``, after training or in
a side thread; so measuring never slows the run it measures. Without Spark the same code runs
in-process.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from async_spark.data.blocks import BlockSource
from async_spark.models.linear import LinearModel, regularizer

from .worker import snapshot_losses

__all__ = ["Evaluator"]

_MAX_BROADCAST_BYTES = 64 * 2**20


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
    """

    def __init__(
        self,
        source: BlockSource,
        model: LinearModel,
        n: int,
        sc: Any = None,
        pool: str = "eval",
    ) -> None:
        self.source = source
        self.model = model
        self.n = n
        self.sc = sc
        self.pool = pool
        self._rdd = (
            None if sc is None else sc.parallelize(range(source.num_blocks), source.num_blocks)
        )

    def objectives(self, thetas: np.ndarray | list[np.ndarray]) -> np.ndarray:
        """F(θ) for each row of ``thetas``: mean loss + (l2/2)‖w‖² + l1‖w‖₁."""
        thetas = np.atleast_2d(np.asarray(thetas, dtype=np.float64))
        if thetas.shape[0] == 0:
            return np.zeros(0)
        per_chunk = max(1, _MAX_BROADCAST_BYTES // max(1, thetas[0].nbytes))
        sums = np.concatenate(
            [self._loss_sums(thetas[i : i + per_chunk]) for i in range(0, len(thetas), per_chunk)]
        )
        reg = np.array([regularizer(self.model, t) for t in thetas])
        out = sums / self.n + reg
        return out

    def _loss_sums(self, thetas: np.ndarray) -> np.ndarray:
        source, model = self.source, self.model
        if self.sc is None:
            parts = list(snapshot_losses(source, model, thetas, range(source.num_blocks)))
        else:
            sc = self.sc
            previous = sc.getLocalProperty("spark.scheduler.pool")
            sc.setLocalProperty("spark.scheduler.pool", self.pool)
            sc.setJobDescription(f"evaluate {len(thetas)} snapshot(s)")
            bc = sc.broadcast(thetas)
            try:
                parts = self._rdd.mapPartitions(  # type: ignore[union-attr]
                    lambda it: snapshot_losses(source, model, bc.value, it)
                ).collect()
            finally:
                bc.destroy(blocking=False)
                sc.setLocalProperty("spark.scheduler.pool", previous)
                sc.setJobDescription(None)
        rows = sum(r for _, r in parts)
        if rows != self.n:
            raise RuntimeError(f"evaluation saw {rows} rows, the dataset has {self.n}")
        return np.sum([s for s, _ in parts], axis=0)

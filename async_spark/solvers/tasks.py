"""Worker-side functions of the linear solvers (they run inside Spark's Python workers).

Each captures plain values only: a :class:`~async_spark.data.blocks.BlockSource`, a
:class:`~async_spark.models.linear.LinearModel` and numbers. The block is found in the worker's
cache (:func:`~async_spark.data.blocks.get_block`), never shipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np

from async_spark.data.blocks import BlockSource, get_block
from async_spark.models.linear import LinearModel, block_loss_sum
from async_spark.optim.saga import saga_task_gradient
from async_spark.optim.sgd import sample_rows, sgd_task_gradient

__all__ = ["LinearTaskArgs", "linear_task", "snapshot_losses"]


class LinearTaskArgs(NamedTuple):
    """Per-task arguments chosen on the driver at dispatch."""

    rule: str  # "sgd" or "saga"
    source: BlockSource
    model: LinearModel
    batch_fraction: float
    seed: int
    block_task: int  # the sample of this task is drawn from (seed, block, block_task)
    old_scalars: np.ndarray | None  # SAGA: the table's scalars of the sampled rows


def linear_task(block_index: int, theta: np.ndarray, args: LinearTaskArgs) -> Any:
    """One task: SGD returns ``grad_sum``; SAGA returns ``(delta_sum, new_scalars)``."""
    block = get_block(args.source, block_index)
    idx = sample_rows(args.seed, block_index, args.block_task, block.rows, args.batch_fraction)
    if args.rule == "sgd":
        return sgd_task_gradient(args.model, block, theta, idx)
    assert args.old_scalars is not None
    return saga_task_gradient(args.model, block, theta, idx, args.old_scalars)


def snapshot_losses(
    source: BlockSource, model: LinearModel, thetas: np.ndarray, blocks: Iterable[int]
) -> Iterator[tuple[np.ndarray, int]]:
    """For each block: the loss sums of every snapshot in ``thetas`` (K, p), and its row count."""
    for b in blocks:
        block = get_block(source, b)
        sums = np.array([block_loss_sum(model, block, theta) for theta in thetas])
        yield sums, block.rows

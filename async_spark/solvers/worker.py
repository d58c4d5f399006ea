r"""What a linear method computes on a block: the worker side of every method (runs on executors).

A task on block ``p`` draws a Bernoulli(b) sample ``S`` of its rows, reproducible from
``(seed, p, task_seq)`` by :func:`sample_rows` on the driver as on the worker, and returns one of

- :func:`gradient_sum` — :math:`\sum_{i\in S}\nabla f_i(\theta)` (SGD, the momentum methods,
  DC-ASGD);
- :func:`saga_delta` — :math:`\big(\sum_{i\in S}(\nabla f_i(\theta) - r_i\otimes\tilde x_i),\;
  \phi_S(\theta)\big)` given the table's old scalars :math:`r_S` (SAGA, with one scalar per sample;
  see :mod:`async_spark.optim.saga`).

:class:`LinearTask` is the task function the engine ships: a frozen value holding plain values
only (the dataset's :class:`~async_spark.data.blocks.BlockSource`, the model and which computation
to run). The block is found in the worker's cache (:func:`~async_spark.data.blocks.get_block`),
never shipped. Per-task arguments (:class:`TaskArgs`) are numbers and arrays, so any transport can
carry them. A task returns ``(payload, loss_stats)``: the method's payload and the sum, the sum of
squares and the count of the losses of its sampled rows at the parameters it read (from the
margins the gradient needs anyway), which the driver's step safeguard watches
(:mod:`.safeguard`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from async_spark.data.blocks import Block, BlockSource, get_block
from async_spark.models.linear import (
    LinearModel,
    block_gradient_sum,
    block_loss_sum,
    gradient_from_scalars,
    loss_derivatives,
    loss_values,
    margins,
    take_rows,
)
from async_spark.optim._validate import check_fraction

__all__ = [
    "COMPUTATIONS",
    "BlockLossArgs",
    "LinearTask",
    "TaskArgs",
    "gradient_sum",
    "loss_stats",
    "sample_rows",
    "saga_delta",
    "snapshot_losses",
]


def sample_rows(
    seed: int, block_index: int, task_seq: int, rows: int, fraction: float
) -> np.ndarray:
    """The Bernoulli(``fraction``) sample of a task: sorted local row indices in ``[0, rows)``.

    Deterministic in ``(seed, block_index, task_seq)`` (numpy ``default_rng`` seeded with that
    triple), so the driver and the worker draw the same sample. Drawn as a Binomial size and a
    uniform subset of that size (the same law as independent coin flips, in O(sample) time).
    ``fraction == 1`` returns every row.
    """
    for name, v in (
        ("seed", seed),
        ("block_index", block_index),
        ("task_seq", task_seq),
        ("rows", rows),
    ):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
    b = check_fraction(fraction)
    if b == 1.0:
        return np.arange(rows, dtype=np.int64)
    rng = np.random.default_rng([int(seed), int(block_index), int(task_seq)])
    k = int(rng.binomial(rows, b))
    idx = rng.choice(rows, size=k, replace=False).astype(np.int64)
    idx.sort()
    return idx


@functools.lru_cache(maxsize=32)
def _cached_sample(
    seed: int, block_index: int, task_seq: int, rows: int, fraction: float
) -> np.ndarray:
    # A resident worker draws a task's sample twice (the rows of SAGA's table it reads, then
    # the task itself): about 0.5 ms each for 10^5 rows. Read-only, as it is shared.
    idx = sample_rows(seed, block_index, task_seq, rows, fraction)
    idx.flags.writeable = False
    return idx


def _sampled(block: Block, sample_idx: np.ndarray) -> Block:
    idx = np.asarray(sample_idx, dtype=np.int64)
    if idx.size == block.rows:  # the whole block (a sample is sorted and distinct): no copy
        return Block(block.X, block.y, 0)
    return Block(take_rows(block.X, idx), block.y[idx], 0)  # one copy of the rows per task


def loss_stats(losses: np.ndarray) -> np.ndarray:
    """``[sum, sum of squares, count]`` of per-sample losses (what a task reports)."""
    return np.array([losses.sum(), np.dot(losses, losses), losses.size], dtype=np.float64)


def _gradient(
    model: LinearModel, sample: Block, theta: np.ndarray, extra: Any
) -> tuple[np.ndarray, np.ndarray]:
    z = margins(model, sample.X, theta)
    grad = gradient_from_scalars(model, sample, loss_derivatives(model, z, sample.y))
    return grad, loss_values(model, z, sample.y)


def _saga(
    model: LinearModel, sample: Block, theta: np.ndarray, old_scalars: Any
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    old = np.asarray(old_scalars, dtype=np.float64)
    if old.shape != (sample.rows, *model.scalar_shape):
        raise ValueError(
            f"old_scalars must have shape {(sample.rows, *model.scalar_shape)}, got {old.shape}"
        )
    if sample.rows == 0:
        return (np.zeros(model.num_params), old.copy()), np.zeros(0)
    z = margins(model, sample.X, theta)
    new = loss_derivatives(model, z, sample.y)
    # One product with the difference: sum (phi_new - r_old) x_i.
    delta = gradient_from_scalars(model, sample, new - old)
    return (delta, new), loss_values(model, z, sample.y)


def gradient_sum(
    model: LinearModel, block: Block, theta: np.ndarray, sample_idx: np.ndarray, extra: Any
) -> np.ndarray:
    r""":math:`\sum_{i \in S}\nabla f_i(\theta)` over local rows ``sample_idx`` (flat, data part
    only; the penalty is the driver's)."""
    return _gradient(model, _sampled(block, sample_idx), theta, extra)[0]


def saga_delta(
    model: LinearModel,
    block: Block,
    theta: np.ndarray,
    sample_idx: np.ndarray,
    old_scalars: Any,
) -> tuple[np.ndarray, np.ndarray]:
    r"""SAGA on local rows ``sample_idx`` given their old scalars :math:`r_S`.

    Returns
    -------
    delta_sum : ndarray (num_params,)
        :math:`\sum_{i\in S}(\nabla f_i(\theta) - r_i\otimes\tilde x_i)`.
    new_scalars : ndarray (|S|,) or (|S|, K)
        :math:`\phi_i(\theta)`, the scalars to store for these rows.
    """
    return _saga(model, _sampled(block, sample_idx), theta, old_scalars)[0]


Computation = Callable[[LinearModel, Block, np.ndarray, Any], tuple[Any, np.ndarray]]

#: The worker computations by name (a method's row names one; the name travels, not the code):
#: ``(model, sampled rows, theta, extra) -> (payload, per-sample losses)``.
COMPUTATIONS: dict[str, Computation] = {"gradient": _gradient, "saga": _saga}


class TaskArgs(NamedTuple):
    """Per-task arguments chosen on the driver at dispatch (numbers and arrays only)."""

    block_task: int  # the sample of this task is drawn from (seed, block, block_task)
    batch_fraction: float
    # SAGA: the table's old scalars of the sampled rows (engine.task.HeldRows on the driver,
    # the rows themselves in the task)
    extra: Any = None


class BlockLossArgs(NamedTuple):
    """Args of a side task (:meth:`~async_spark.engine.resident.ResidentTransport.side_call`):
    the loss sum of the whole block at the model — a snapshot's evaluation by the worker that
    holds the block — and, with ``gradient``, the block's data gradient sum after it (one flat
    vector: what the convergence test needs)."""

    whole_block_loss: bool = True
    gradient: bool = False


@dataclass(frozen=True)
class LinearTask:
    """The task function of a linear run: ``task(block, theta, args) -> (payload, loss_stats)``.

    Plain values only (it travels to every executor); ``computation`` names an entry of
    :data:`COMPUTATIONS`.
    """

    source: BlockSource
    model: LinearModel
    seed: int
    computation: str = "gradient"

    def __post_init__(self) -> None:
        if self.computation not in COMPUTATIONS:
            raise ValueError(
                f"computation must be one of {', '.join(COMPUTATIONS)}, got {self.computation!r}"
            )

    def sample(self, block_index: int, args: TaskArgs, rows: int) -> np.ndarray:
        return _cached_sample(
            int(self.seed),
            int(block_index),
            int(args.block_task),
            int(rows),
            float(args.batch_fraction),
        )

    def __call__(self, block_index: int, theta: np.ndarray, args: TaskArgs) -> Any:
        block = get_block(self.source, block_index)
        # by field, not class: named tuples arrive over the resident wire as look-alikes
        if getattr(args, "whole_block_loss", False):
            if getattr(args, "gradient", False):
                # one pass over the block's margins for both (a task's own gradient kernel)
                grad, losses = _gradient(self.model, block, theta, None)
                return np.concatenate([[losses.sum()], grad]), block.rows
            return block_loss_sum(self.model, block, theta), block.rows
        sample = _sampled(block, self.sample(block_index, args, block.rows))
        payload, losses = COMPUTATIONS[self.computation](self.model, sample, theta, args.extra)
        return payload, loss_stats(losses)

    # A resident worker keeps SAGA's table of its blocks (engine.task.HeldRows): the rows a task
    # reads and writes are its sample, the values it writes its result's new scalars.
    def held_rows(self, block_index: int, args: TaskArgs, num_rows: int) -> np.ndarray:
        return self.sample(block_index, args, num_rows)

    def held_values(self, payload: Any) -> np.ndarray:
        (_, new_scalars), _ = payload
        return np.asarray(new_scalars)

    def work(self, block_index: int, args: Any) -> float | None:
        """Nonzeros this task touches: those of its sampled rows (dense: rows x d); for the
        emulator's cost model."""
        if not isinstance(args, TaskArgs):
            return None
        block = get_block(self.source, block_index)
        idx = self.sample(block_index, args, block.rows)
        X = block.X
        if hasattr(X, "indptr"):
            indptr = np.asarray(X.indptr)
            return float(np.sum(indptr[idx + 1] - indptr[idx]))
        return float(idx.size * X.shape[1])


def snapshot_losses(
    source: BlockSource,
    model: LinearModel,
    thetas: np.ndarray,
    blocks: Iterable[int],
    gradients: Sequence[int] = (),
) -> Iterator[tuple[np.ndarray, int]]:
    """For each block: the loss sums of every snapshot in ``thetas`` (K, p), then the data
    gradient sums of the snapshots at positions ``gradients`` (each p values, flat), and its
    row count. One flat vector per block, so that every evaluation path carries it as it carries
    the losses."""
    for b in blocks:
        block = get_block(source, b)
        sums = np.array([block_loss_sum(model, block, theta) for theta in thetas])
        if gradients:
            grads = [block_gradient_sum(model, block, thetas[i]) for i in gradients]
            sums = np.concatenate([sums, *grads])
        yield sums, block.rows

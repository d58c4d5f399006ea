r"""SAGA (synchronous and asynchronous) with one scalar of history per sample.

For a GLM, :math:`\nabla f_i(\theta) = \phi_i(\theta)\otimes\tilde x_i` with
:math:`\tilde x_i = (x_i, 1)` (see :mod:`async_spark.models.linear`), so SAGA's table of past
gradients :math:`\alpha_i = r_i\otimes\tilde x_i` is stored as the scalars :math:`r_i`
(``n`` floats; ``n x K`` for softmax) plus their average
:math:`\bar\alpha = \frac1N\sum_i r_i\otimes\tilde x_i` (a parameter-sized vector). This is
ASYNC's ASAGA: the driver ships a task only the old scalars of its sampled rows.

Worker (:func:`async_spark.solvers.worker.saga_delta`), rows ``S`` of its block at the (stale)
:math:`\theta`:

.. math:: \Delta = \sum_{i\in S}\big(\nabla f_i(\theta) - r_i\otimes\tilde x_i\big),\qquad
          r_i^{\text{new}} = \phi_i(\theta).

Driver (:meth:`SAGA.update`), with :math:`m = t\,bN/P` (``t`` results combined):

.. math::
    \theta \leftarrow \operatorname{prox}_{\gamma\lambda_1\|\cdot\|_1}\Big(\theta -
        \gamma\big(\tfrac{\Delta}{m} + \bar\alpha + \lambda_2 W\big)\Big),\qquad
    \bar\alpha \leftarrow \bar\alpha + \tfrac{\Delta}{N},\qquad r_S \leftarrow r^{\text{new}}_S.

:math:`\Delta/m + \bar\alpha` is unbiased for :math:`\frac1N\sum_i\nabla f_i` when the block is
uniform (Defazio, Bach & Lacoste-Julien, NIPS 2014; ASYNC, IPDPS 2020). The table starts at
zero (:math:`\alpha_i = 0`, :math:`\bar\alpha = 0`).

The table is kept **by block** (one array of scalars per block, a tuple of P arrays), so an update
returns a new state that replaces only the arrays of the blocks it touched (O(N/P) per
asynchronous result) and never mutates the state it was given: an older state stays valid.
Rows must not be in two tasks at once: the update checks that the table still holds the scalars
the task was given (``message.old_scalars``) when the message carries them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from async_spark.models.linear import LinearModel, prox_penalty, regularizer_gradient
from async_spark.optim._validate import check_fraction, check_problem_size
from async_spark.optim.steps import StepRule, as_step_rule

__all__ = ["SAGA", "SAGAMessage", "SAGAState", "saga", "combine_saga_messages"]


class SAGAMessage(NamedTuple):
    """The results of one or more SAGA tasks as the update rule sees them.

    Attributes
    ----------
    blocks : tuple of int
        The blocks whose rows were sampled (one per task result combined).
    rows : tuple of ndarray of int
        For each block, the local indices of its sampled rows.
    delta_sum : ndarray (num_params,)
    new_scalars : tuple of ndarray
        For each block, ``(len(rows),)`` or ``(len(rows), K)`` scalars to store.
    staleness : int
    num_tasks : int
        Results combined into this message (P for a synchronous round).
    old_scalars : tuple of ndarray, or None
        The scalars the tasks were given; when present, checked against the table.
    block_tasks : tuple of int, or None
        For each block, the ``block_task`` of the task whose result this is: it becomes the
        label of the block's new table (``SAGAState.origins``), by which a resident worker knows
        whether the driver applied its result. None: a fresh negative label per update.
    """

    blocks: tuple[int, ...]
    rows: tuple[np.ndarray, ...]
    delta_sum: np.ndarray
    new_scalars: tuple[np.ndarray, ...]
    staleness: int = 0
    num_tasks: int = 1
    old_scalars: tuple[np.ndarray, ...] | None = None
    block_tasks: tuple[int, ...] | None = None


class SAGAState(NamedTuple):
    r"""``step`` (updates applied), ``table`` (one (rows,) or (rows, K) array of scalars per
    block), ``avg`` :math:`\bar\alpha`, and ``origins``: for each block, a label of its table's
    content (the ``block_task`` of the result that last wrote it; -1 at the start), which
    :class:`~async_spark.engine.task.HeldRows` carries to the workers that keep the tables.
    A state restored without origins gets -1 for every block: labels only need to be unique
    within one transport's lifetime, and the tasks of a resumed run have larger ``block_task``."""

    step: int
    table: tuple[np.ndarray, ...]
    avg: np.ndarray
    origins: np.ndarray | None = None


def combine_saga_messages(messages: Sequence[SAGAMessage]) -> SAGAMessage:
    """Join the results of a synchronous round (disjoint blocks) into one message."""
    if not messages:
        raise ValueError("messages must not be empty")
    olds = [m.old_scalars for m in messages]
    return SAGAMessage(
        tuple(b for m in messages for b in m.blocks),
        tuple(r for m in messages for r in m.rows),
        np.sum([m.delta_sum for m in messages], axis=0),
        tuple(s for m in messages for s in m.new_scalars),
        max(m.staleness for m in messages),
        sum(m.num_tasks for m in messages),
        None if any(o is None for o in olds) else tuple(s for o in olds for s in o),  # type: ignore[union-attr]
        None
        if any(m.block_tasks is None for m in messages)
        else tuple(t for m in messages for t in m.block_tasks),  # type: ignore[union-attr]
    )


@dataclass(frozen=True)
class SAGA:
    """The SAGA update rule (picklable; ``init``/``update`` as in DESIGN)."""

    model: LinearModel
    block_rows: tuple[int, ...]
    batch_fraction: float
    step: StepRule

    @property
    def n(self) -> int:
        return sum(self.block_rows)

    @property
    def num_blocks(self) -> int:
        return len(self.block_rows)

    def init(self, params: np.ndarray) -> SAGAState:
        """Zero table and average."""
        if np.shape(params) != (self.model.num_params,):
            raise ValueError(
                f"params must have shape ({self.model.num_params},), got {np.shape(params)}"
            )
        shape = self.model.scalar_shape
        table = tuple(np.zeros((rows, *shape)) for rows in self.block_rows)
        origins = np.full(self.num_blocks, -1, dtype=np.int64)
        return SAGAState(0, table, np.zeros(self.model.num_params), origins)

    def scalars_for(self, state: SAGAState, block: int, rows: np.ndarray) -> np.ndarray:
        """Driver side at dispatch: a copy of the table's scalars for local ``rows`` of ``block``."""
        return state.table[block][np.asarray(rows, dtype=np.int64)]  # fancy indexing copies

    def update(
        self, message: SAGAMessage, state: SAGAState, params: np.ndarray
    ) -> tuple[np.ndarray, SAGAState]:
        """Driver side: apply one (combined) result; returns a new ``(params, state)``."""
        if message.staleness < 0 or message.num_tasks < 1:
            raise ValueError(
                f"message needs staleness >= 0 and num_tasks >= 1, got {message.staleness}, {message.num_tasks}"
            )
        table = list(state.table)
        origins = (
            np.full(self.num_blocks, -1, dtype=np.int64)
            if state.origins is None
            else np.array(state.origins, dtype=np.int64)
        )
        for i, (block, rows, new) in enumerate(
            zip(message.blocks, message.rows, message.new_scalars, strict=True)
        ):
            rows = np.asarray(rows, dtype=np.int64)
            new = np.asarray(new, dtype=np.float64)
            if new.shape != (rows.size, *self.model.scalar_shape):
                raise ValueError(
                    f"new_scalars must have shape {(rows.size, *self.model.scalar_shape)}, got {new.shape}"
                )
            if message.old_scalars is not None and not np.array_equal(
                table[block][rows], message.old_scalars[i]
            ):
                raise ValueError(
                    "the SAGA table changed for rows of this result since its dispatch: two tasks"
                    " were in flight on the same rows (keep at most one task per block in flight)"
                )
            table[block] = table[block].copy()
            table[block][rows] = new
            origins[block] = (
                message.block_tasks[i] if message.block_tasks is not None else -2 - state.step
            )
        delta = np.asarray(message.delta_sum, dtype=np.float64)
        n = self.n
        m = message.num_tasks * self.batch_fraction * n / self.num_blocks
        gamma = float(self.step(state.step, message.staleness))
        direction = delta / m + state.avg + regularizer_gradient(self.model, params)
        new_params = prox_penalty(self.model, params - gamma * direction, gamma)
        avg = state.avg + delta / n
        return new_params, SAGAState(state.step + 1, tuple(table), avg, origins)


def saga(
    model: LinearModel, *, block_rows: Sequence[int], batch_fraction: float, step: Any
) -> SAGA:
    """Validate and build the SAGA rule.

    Parameters
    ----------
    model : LinearModel
    block_rows : sequence of int
        Rows of each block (N in all, P blocks).
    batch_fraction : float in (0, 1]
    step : float > 0 or StepRule
        ASYNC uses a constant step; see :mod:`async_spark.optim.steps`.
    """
    if not isinstance(model, LinearModel):
        raise ValueError(f"model must be a LinearModel, got {type(model).__name__}")
    rows = tuple(int(r) for r in block_rows)
    if any(r < 0 for r in rows):
        raise ValueError(f"block_rows must be integers >= 0, got {list(block_rows)!r}")
    check_problem_size(sum(rows), len(rows))
    return SAGA(model, rows, check_fraction(batch_fraction), as_step_rule(step))

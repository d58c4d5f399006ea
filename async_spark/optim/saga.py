r"""SAGA (synchronous and asynchronous) with one scalar of history per sample.

For a GLM, :math:`\nabla f_i(\theta) = \phi_i(\theta)\otimes\tilde x_i` with
:math:`\tilde x_i = (x_i, 1)` (see :mod:`async_spark.models.linear`), so SAGA's table of past
gradients :math:`\alpha_i = r_i\otimes\tilde x_i` is stored as the scalars :math:`r_i`
(``n`` floats; ``n x K`` for softmax) plus their average
:math:`\bar\alpha = \frac1N\sum_i r_i\otimes\tilde x_i` (a parameter-sized vector). This is
ASYNC's ASAGA: the driver ships a task only the old scalars of its sampled rows.

Worker (:func:`saga_task_gradient`), rows ``S`` of its block at the (stale) :math:`\theta`:

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

Rows must not be in two tasks at once: the update checks that the table still holds the
scalars the task was given (``message.old_scalars``) when the message carries them.
The table is updated **in place** (O(batch) per update instead of copying N scalars); the
returned state shares the buffer, so an older state must not be reused after an update.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from async_spark.data.blocks import Block
from async_spark.models.linear import (
    LinearModel,
    gradient_from_scalars,
    prox_l1,
    regularizer_gradient,
    sample_scalars,
)
from async_spark.optim.sgd import _check_fraction
from async_spark.optim.steps import StepRule, as_step_rule

__all__ = [
    "SAGA",
    "SAGAMessage",
    "SAGAState",
    "saga",
    "saga_task_gradient",
    "combine_saga_messages",
]


def saga_task_gradient(
    model: LinearModel,
    block: Block,
    theta: np.ndarray,
    sample_idx: np.ndarray,
    old_scalars: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Worker side of SAGA on local rows ``sample_idx`` of ``block``.

    Returns
    -------
    delta_sum : ndarray (num_params,)
        :math:`\sum_{i\in S}(\nabla f_i(\theta) - r_i\otimes\tilde x_i)`.
    new_scalars : ndarray (|S|,) or (|S|, K)
        :math:`\phi_i(\theta)`, the scalars to store for these rows.
    """
    idx = np.asarray(sample_idx, dtype=np.int64)
    old = np.asarray(old_scalars, dtype=np.float64)
    if old.shape != (idx.size, *model.scalar_shape):
        raise ValueError(
            f"old_scalars must have shape {(idx.size, *model.scalar_shape)}, got {old.shape}"
        )
    if idx.size == 0:
        return np.zeros(model.num_params), old.copy()
    new = sample_scalars(model, block, theta, idx)
    # One product with the difference: sum (phi_new - r_old) x_i.
    return gradient_from_scalars(model, block, new - old, idx), new


class SAGAMessage(NamedTuple):
    """A SAGA task's result as the update rule sees it.

    Attributes
    ----------
    rows : ndarray of int
        Global row indices of the sampled rows (``block.row_offset + sample_idx``).
    delta_sum : ndarray (num_params,)
    new_scalars : ndarray (len(rows),) or (len(rows), K)
    staleness : int
    num_tasks : int
        Results combined into this message (P for a synchronous round).
    old_scalars : ndarray or None
        The scalars the task was given; when present, checked against the table.
    """

    rows: np.ndarray
    delta_sum: np.ndarray
    new_scalars: np.ndarray
    staleness: int = 0
    num_tasks: int = 1
    old_scalars: np.ndarray | None = None


class SAGAState(NamedTuple):
    """``step`` (updates applied), ``table`` (N,) or (N, K) scalars, ``avg`` :math:`\\bar\\alpha`."""

    step: int
    table: np.ndarray
    avg: np.ndarray


def combine_saga_messages(messages: Sequence[SAGAMessage]) -> SAGAMessage:
    """Join the results of a synchronous round (disjoint rows) into one message."""
    if not messages:
        raise ValueError("messages must not be empty")
    olds = [m.old_scalars for m in messages]
    return SAGAMessage(
        np.concatenate([np.asarray(m.rows, dtype=np.int64) for m in messages]),
        np.sum([m.delta_sum for m in messages], axis=0),
        np.concatenate([np.asarray(m.new_scalars) for m in messages]),
        max(m.staleness for m in messages),
        sum(m.num_tasks for m in messages),
        None if any(o is None for o in olds) else np.concatenate(olds),  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class SAGA:
    """The SAGA update rule (picklable; ``init``/``update`` as in DESIGN)."""

    model: LinearModel
    n: int
    num_blocks: int
    batch_fraction: float
    step: StepRule

    def init(self, params: np.ndarray) -> SAGAState:
        """Zero table and average."""
        if np.shape(params) != (self.model.num_params,):
            raise ValueError(
                f"params must have shape ({self.model.num_params},), got {np.shape(params)}"
            )
        return SAGAState(
            0, np.zeros((self.n, *self.model.scalar_shape)), np.zeros(self.model.num_params)
        )

    def scalars_for(self, state: SAGAState, rows: np.ndarray) -> np.ndarray:
        """Driver side at dispatch: a copy of the table's scalars for global ``rows``."""
        return state.table[np.asarray(rows, dtype=np.int64)].copy()

    def update(
        self, message: SAGAMessage, state: SAGAState, params: np.ndarray
    ) -> tuple[np.ndarray, SAGAState]:
        """Driver side (``saga_update``): apply one (combined) result."""
        if message.staleness < 0 or message.num_tasks < 1:
            raise ValueError(
                f"message needs staleness >= 0 and num_tasks >= 1, got {message.staleness}, {message.num_tasks}"
            )
        rows = np.asarray(message.rows, dtype=np.int64)
        new = np.asarray(message.new_scalars, dtype=np.float64)
        if new.shape != (rows.size, *self.model.scalar_shape):
            raise ValueError(
                f"new_scalars must have shape {(rows.size, *self.model.scalar_shape)}, got {new.shape}"
            )
        if message.old_scalars is not None and not np.array_equal(
            state.table[rows], message.old_scalars
        ):
            raise ValueError(
                "the SAGA table changed for rows of this result since its dispatch: two tasks were"
                " in flight on the same rows (keep at most one task per block in flight)"
            )
        delta = np.asarray(message.delta_sum, dtype=np.float64)
        m = message.num_tasks * self.batch_fraction * self.n / self.num_blocks
        gamma = float(self.step(state.step, message.staleness))
        direction = delta / m + state.avg + regularizer_gradient(self.model, params)
        new_params = prox_l1(self.model, params - gamma * direction, gamma)
        avg = state.avg + delta / self.n
        table = state.table
        table[rows] = new
        return new_params, SAGAState(state.step + 1, table, avg)


def saga(model: LinearModel, *, n: int, num_blocks: int, batch_fraction: float, step: Any) -> SAGA:
    """Validate and build the SAGA rule (arguments as for :func:`async_spark.optim.sgd.sgd`;
    ASYNC uses a constant ``step``)."""
    if not isinstance(model, LinearModel):
        raise ValueError(f"model must be a LinearModel, got {type(model).__name__}")
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if (
        isinstance(num_blocks, bool)
        or not isinstance(num_blocks, int | np.integer)
        or not 1 <= num_blocks <= n
    ):
        raise ValueError(f"num_blocks must be an integer in [1, n={n}], got {num_blocks!r}")
    return SAGA(model, int(n), int(num_blocks), _check_fraction(batch_fraction), as_step_rule(step))

r"""Mini-batch SGD (synchronous and asynchronous) with ASYNC's conventions.

A task on block ``p`` draws a Bernoulli(b) sample ``S`` of its rows and returns
:math:`g = \sum_{i \in S} \nabla f_i(\theta_{\text{stale}})` (the worker side lives in
:mod:`async_spark.solvers.worker`). The driver applies (:meth:`SGD.update`)

.. math::

    \theta \leftarrow \operatorname{prox}_{\gamma_k \lambda_1 \|\cdot\|_1}\Big(\theta - \gamma_k
    \big(\tfrac{g}{m} + \lambda_2 W\big)\Big), \qquad m = t \cdot \frac{b\,N}{P},

with ``t`` the number of task results summed in ``g`` (1 asynchronously, P for a synchronous
round), so that :math:`g/m` is an unbiased estimate of :math:`\frac1N\sum_i\nabla f_i` for a
uniformly chosen block (ASYNC's ASGD divides by :math:`bN/P`). The penalty's gradient is taken at
the driver's current :math:`\theta` (it needs no data) and the :math:`\ell_1` term by its prox.
The intercept is never penalized.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from async_spark.models.linear import LinearModel, prox_penalty, regularizer_gradient
from async_spark.optim._validate import check_fraction, check_problem_size
from async_spark.optim.steps import StepRule, as_step_rule

__all__ = ["SGD", "SGDMessage", "SGDState", "sgd", "combine_sgd_messages"]


class SGDMessage(NamedTuple):
    """A task's result as the update rule sees it.

    Attributes
    ----------
    grad_sum : ndarray (num_params,)
        :math:`\\sum_{i\\in S}\\nabla f_i` at the task's (possibly stale) parameters.
    staleness : int
        Updates applied between the task's dispatch and now.
    num_tasks : int
        Task results summed into ``grad_sum`` (P for a synchronous round).
    """

    grad_sum: np.ndarray
    staleness: int = 0
    num_tasks: int = 1


class SGDState(NamedTuple):
    """``step``: updates applied so far (k)."""

    step: int


def combine_sgd_messages(messages: Sequence[SGDMessage]) -> SGDMessage:
    """Sum the results of a synchronous round into one message (max staleness kept)."""
    if not messages:
        raise ValueError("messages must not be empty")
    return SGDMessage(
        np.sum([m.grad_sum for m in messages], axis=0),
        max(m.staleness for m in messages),
        sum(m.num_tasks for m in messages),
    )


@dataclass(frozen=True)
class SGD:
    """The SGD update rule (picklable; ``init``/``update`` as in DESIGN)."""

    model: LinearModel
    n: int
    num_blocks: int
    batch_fraction: float
    step: StepRule

    def init(self, params: np.ndarray) -> SGDState:
        if np.shape(params) != (self.model.num_params,):
            raise ValueError(
                f"params must have shape ({self.model.num_params},), got {np.shape(params)}"
            )
        return SGDState(0)

    def update(
        self, message: SGDMessage, state: SGDState, params: np.ndarray
    ) -> tuple[np.ndarray, SGDState]:
        """Apply one (combined) result; returns new ``(params, state)`` (inputs untouched)."""
        if message.staleness < 0 or message.num_tasks < 1:
            raise ValueError(
                f"message needs staleness >= 0 and num_tasks >= 1, got {message.staleness}, {message.num_tasks}"
            )
        m = message.num_tasks * self.batch_fraction * self.n / self.num_blocks
        gamma = float(self.step(state.step, message.staleness))
        direction = np.asarray(message.grad_sum) / m + regularizer_gradient(self.model, params)
        new = prox_penalty(self.model, params - gamma * direction, gamma)
        return new, SGDState(state.step + 1)


def sgd(model: LinearModel, *, n: int, num_blocks: int, batch_fraction: float, step: Any) -> SGD:
    """Validate and build the SGD rule.

    Parameters
    ----------
    model : LinearModel
    n : int >= 1
        N, rows in the dataset.
    num_blocks : int in [1, n]
        P.
    batch_fraction : float in (0, 1]
        b, the Bernoulli sampling rate of a task.
    step : float > 0 or StepRule
        A float is a constant step; see :mod:`async_spark.optim.steps` for the rules.
    """
    if not isinstance(model, LinearModel):
        raise ValueError(f"model must be a LinearModel, got {type(model).__name__}")
    n, num_blocks = check_problem_size(n, num_blocks)
    return SGD(model, n, num_blocks, check_fraction(batch_fraction), as_step_rule(step))

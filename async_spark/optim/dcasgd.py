r"""Delay-compensated asynchronous SGD (DC-ASGD; Zheng et al., "Asynchronous Stochastic Gradient
Descent with Delay Compensation", ICML 2017).

A stale gradient :math:`g = \nabla f(w_{\text{stale}})` is corrected towards the gradient at the
current parameters by a first-order Taylor step whose Hessian is approximated by the outer product
of the gradient, diagonalized and scaled by :math:`\lambda` (the paper's Eq. 10):

.. math::

    \tilde g = g + \lambda\, g \odot g \odot (w - w_{\text{stale}}),\qquad
    w \leftarrow \operatorname{prox}_{\gamma_k\lambda_1\|\cdot\|_1}
        \big(w - \gamma_k(\tilde g + \lambda_2 W)\big),

with :math:`g = \text{grad\_sum}/m` and :math:`m = t\,bN/P` as in :mod:`async_spark.optim.sgd`
(the penalty's gradient is taken at the current :math:`w`, so it needs no compensation). With
:math:`\lambda = 0`, or a fresh result (:math:`w_{\text{stale}} = w`), this is SGD exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from async_spark.models.linear import LinearModel, prox_penalty, regularizer_gradient
from async_spark.optim._validate import check_fraction, check_nonnegative, check_problem_size
from async_spark.optim.steps import StepRule, as_step_rule

__all__ = ["DCASGD", "DCMessage", "DCASGDState", "dcasgd"]


class DCMessage(NamedTuple):
    """A task's gradient sum with the parameters it was computed at.

    Attributes
    ----------
    grad_sum : ndarray (num_params,)
    stale_params : ndarray (num_params,)
        The model version the task read (from the engine's history store).
    staleness : int
    num_tasks : int
    """

    grad_sum: np.ndarray
    stale_params: np.ndarray
    staleness: int = 0
    num_tasks: int = 1


class DCASGDState(NamedTuple):
    """``step``: updates applied so far (k)."""

    step: int


@dataclass(frozen=True)
class DCASGD:
    """The DC-ASGD update rule (``init``/``update`` as in DESIGN)."""

    model: LinearModel
    n: int
    num_blocks: int
    batch_fraction: float
    step: StepRule
    compensation: float

    def init(self, params: np.ndarray) -> DCASGDState:
        if np.shape(params) != (self.model.num_params,):
            raise ValueError(
                f"params must have shape ({self.model.num_params},), got {np.shape(params)}"
            )
        return DCASGDState(0)

    def update(
        self, message: DCMessage, state: DCASGDState, params: np.ndarray
    ) -> tuple[np.ndarray, DCASGDState]:
        m = message.num_tasks * self.batch_fraction * self.n / self.num_blocks
        g = np.asarray(message.grad_sum) / m
        compensated = g + self.compensation * g * g * (params - message.stale_params)
        gamma = float(self.step(state.step, message.staleness))
        direction = compensated + regularizer_gradient(self.model, params)
        return prox_penalty(self.model, params - gamma * direction, gamma), DCASGDState(
            state.step + 1
        )


def dcasgd(
    model: LinearModel,
    *,
    n: int,
    num_blocks: int,
    batch_fraction: float,
    step: Any,
    compensation: float = 0.04,
) -> DCASGD:
    """Validate and build the DC-ASGD rule (arguments as for :func:`async_spark.optim.sgd.sgd`).

    ``compensation`` is :math:`\\lambda \\ge 0`, the paper's variance-control parameter of
    DC-ASGD-c (a constant; 0.04 is of the order the paper uses).
    """
    if not isinstance(model, LinearModel):
        raise ValueError(f"model must be a LinearModel, got {type(model).__name__}")
    n, num_blocks = check_problem_size(n, num_blocks)
    return DCASGD(
        model,
        n,
        num_blocks,
        check_fraction(batch_fraction),
        as_step_rule(step),
        check_nonnegative("compensation", compensation),
    )

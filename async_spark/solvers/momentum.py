r"""Momentum methods (HB, AG, APG) on the engine: the bridge from task gradients to the rules.

A task returns :math:`\sum_{i\in S}\nabla f_i` at the (possibly stale) parameters it read, as for
SGD. The driver turns it into the stochastic gradient of the smooth objective,

.. math:: g = \frac{1}{m}\sum_{i\in S}\nabla f_i + \lambda_2 W,\qquad m = t\,\frac{bN}{P},

and feeds it to the pure rule of :mod:`async_spark.optim.momentum`. The parameters published to
the workers are the rule's ``params`` (the point where the next gradient is taken: :math:`x_k`
for HB, the look-ahead :math:`y_k` for AG and APG); the model reported is the iterate
:math:`x_k` the theory speaks about.

Staleness is one more source of gradient noise, and momentum amplifies old gradients: a result
computed at :math:`y_{k-\tau}` moves the iterate along a direction that momentum keeps applying.
``momentum_damping`` :math:`c \ge 0` uses :math:`\beta_k = \beta/(1 + c\,\tau_k)` for a result of
staleness :math:`\tau_k` (c = 0: plain momentum).

``--step auto`` chooses :math:`(\alpha, \beta)` with
:func:`~async_spark.optim.parameters.momentum_parameters` from :math:`L` and :math:`\mu`:
:math:`L = c_\ell\,\lambda_{\max}(\tilde X^T\tilde X/n) + \lambda_2` (power iteration over the
blocks, :math:`c_\ell = 1/4` for logistic, 1 for squares, 1/2 for softmax) and
:math:`\mu = \lambda_2` (the strong convexity the regularizer guarantees). With the penalty on
the original columns (``penalty_scale`` :math:`s`), :math:`\mu = \lambda_2 \min_j s_j^{-2}`;
APG applies the rest of the penalty by its prox, while HB and AG take the whole penalty's
gradient and count :math:`\lambda_2 \max_j s_j^{-2}` in :math:`L`. The step safeguard's search
may raise the automatic step; the rule is then rebuilt with the momentum of the curvature the
raised step implies (:func:`raised_momentum`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from async_spark.data.blocks import BlockSource, DatasetDescriptor
from async_spark.models.linear import (
    LOSS_CURVATURE,
    LinearModel,
    penalty_gradient,
    prox_penalty,
    regularizer_gradient,
    uniform_l2,
)
from async_spark.optim.momentum import (
    UpdateRule,
    accelerated_projected_gradient,
    heavy_ball,
    nesterov,
)
from async_spark.optim.parameters import momentum_parameters
from async_spark.optim.sgd import SGDMessage

from .curvature import gram_max_eigenvalue

__all__ = ["MOMENTUM_RULES", "MomentumLinear", "momentum_step", "raised_momentum"]


class _WeightsL1:
    """Prox of the penalty part the gradient does not take (see
    :func:`~async_spark.models.linear.prox_penalty`) on the weights only (the intercept is never
    penalized); its value is the l1 term."""

    def __init__(self, model: LinearModel) -> None:
        self.model = model

    def __call__(self, v: np.ndarray, step: float = 1.0) -> np.ndarray:
        return prox_penalty(self.model, v, step)

    def value(self, x: np.ndarray) -> np.ndarray:
        m = self.model.outputs * self.model.num_features
        W = np.abs(np.asarray(x)[..., :m])
        inv = self.model._inverse_scale
        if inv is not None:
            W = W * np.tile(inv, self.model.outputs)
        return np.asarray(self.model.l1 * W.sum(axis=-1))


def _apg(model: LinearModel, alpha: float, beta: float, restart: bool) -> UpdateRule:
    return accelerated_projected_gradient(alpha, beta, _WeightsL1(model), restart)


#: Momentum rules by name: ``(model, alpha, beta, restart) -> UpdateRule``, the name
#: :func:`~async_spark.optim.parameters.momentum_parameters` tunes it as (APG is tuned as AG),
#: whether the rule takes the penalty's prox (HB and AG take the whole penalty's gradient), and
#: whether it has the gradient restart of O'Donoghue & Candès (the accelerated-gradient forms).
MOMENTUM_RULES: dict[str, tuple[Any, str, bool, bool]] = {
    "hb": (lambda model, a, b, restart: heavy_ball(a, b), "hb", False, False),
    "ag": (lambda model, a, b, restart: nesterov(a, b, restart), "ag", False, True),
    "apg": (_apg, "ag", True, True),
}


def _smooth_penalty(rule: str) -> Any:
    """The penalty gradient a rule adds: the uniform part for a proximal rule (its prox applies
    the rest), the whole :math:`\\ell_2` penalty's gradient for one without a prox."""
    return regularizer_gradient if MOMENTUM_RULES[rule][2] else penalty_gradient


def momentum_step(
    rule: str, model: LinearModel, source: BlockSource, desc: DatasetDescriptor
) -> tuple[float, float, dict[str, float]]:
    """``(alpha, beta, curvature)`` from the data for ``--step auto``; ``model.l2 > 0``
    (:meth:`~async_spark.solvers.config.TrainConfig.validate` refuses an automatic momentum step
    without it)."""
    mu = uniform_l2(model)
    lam = gram_max_eigenvalue(source, desc, intercept=model.fit_intercept)
    # a rule without a prox takes the whole penalty's gradient: its curvature counts in L
    penalty_L = mu if MOMENTUM_RULES[rule][2] else _largest_l2(model)
    L = LOSS_CURVATURE[model.loss] * lam + penalty_L
    alpha, beta = momentum_parameters(MOMENTUM_RULES[rule][1], mu, L)
    return alpha, beta, {"L": L, "mu": mu, "kappa": L / mu}


def raised_momentum(rule: str, info: Mapping[str, float], gamma: float) -> float:
    r"""The momentum for a step the safeguard's search raised above the automatic one.

    The automatic :math:`(\alpha_0, \beta_0)` are tuned for the global bound :math:`L`
    (``info``: what :func:`momentum_step` found). A run that tolerates the step
    :math:`\gamma > \alpha_0` has, along its path, a curvature of about
    :math:`L' = L\,\alpha_0/\gamma` (for logistic the bound :math:`\ell'' \le 1/4` is tight only
    at margin 0), so the momentum is the same tuning's for :math:`(\mu, L')`: for AG,
    :math:`\alpha = 1/L'` exactly and :math:`\beta = (\sqrt{\kappa'}-1)/(\sqrt{\kappa'}+1)`,
    :math:`\kappa' = L'/\mu`. Keeping :math:`\beta_0` would give a smaller condition number
    the momentum of a larger one, and a step the search raises with too much momentum
    oscillates where the tuned pair converges. A lowered step keeps :math:`\beta_0` (the
    curvature bound did not change; the step is lowered for noise)."""
    mu = float(info["mu"])
    curvature = max(float(info["L"]) * float(info["alpha"]) / gamma, mu)
    return momentum_parameters(MOMENTUM_RULES[rule][1], mu, curvature)[1]


def _largest_l2(model: LinearModel) -> float:
    scale = model.penalty_scale
    return model.l2 if scale is None else model.l2 / min(scale) ** 2


@dataclass(frozen=True)
class MomentumLinear:
    """HB / AG / APG as an update rule over SGD messages (same interface as SGD and SAGA).

    Parameters
    ----------
    rule : "hb", "ag" or "apg"
    model : LinearModel
    n, num_blocks, batch_fraction : as for SGD
    alpha, beta : step and momentum
    momentum_damping : c >= 0; a result of staleness tau (carried by the message) uses
        beta / (1 + c * tau)
    restart : the gradient restart of AG and APG (:func:`~async_spark.optim.momentum.nesterov`);
        not for HB
    """

    rule: str
    model: LinearModel
    n: int
    num_blocks: int
    batch_fraction: float
    alpha: float
    beta: float
    momentum_damping: float = 0.0
    restart: bool = False

    def __post_init__(self) -> None:
        if self.rule not in MOMENTUM_RULES:
            raise ValueError(f"rule must be one of {', '.join(MOMENTUM_RULES)}, got {self.rule!r}")
        if self.restart and not MOMENTUM_RULES[self.rule][3]:
            raise ValueError(f"restart applies to ag and apg, not {self.rule!r}")
        if not self.momentum_damping >= 0:
            raise ValueError(f"momentum_damping must be >= 0, got {self.momentum_damping!r}")

    @functools.cached_property
    def _fresh(self) -> UpdateRule:
        return self._rule_with(self.beta)

    def _rule_with(self, beta: float) -> UpdateRule:
        return MOMENTUM_RULES[self.rule][0](self.model, float(self.alpha), beta, self.restart)

    def init(self, params: np.ndarray) -> Any:
        return self._fresh.init(params)

    def update(self, message: SGDMessage, state: Any, params: np.ndarray) -> tuple[np.ndarray, Any]:
        m = message.num_tasks * self.batch_fraction * self.n / self.num_blocks
        g = np.asarray(message.grad_sum) / m + _smooth_penalty(self.rule)(self.model, params)
        rule = self._fresh
        if self.momentum_damping > 0:
            rule = self._rule_with(self.beta / (1.0 + self.momentum_damping * message.staleness))
        return rule.update(g, state, params)

    @staticmethod
    def iterate(params: np.ndarray, state: Any) -> np.ndarray:
        """The iterate x_k (``params`` for HB, ``state.x`` for AG and APG)."""
        return getattr(state, "x", params)

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
:math:`\mu = \lambda_2` (the strong convexity the regularizer guarantees).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from async_spark.data.blocks import BlockSource, DatasetDescriptor
from async_spark.models.linear import LinearModel, prox_l1, regularizer_gradient
from async_spark.optim.momentum import accelerated_projected_gradient, heavy_ball, nesterov
from async_spark.optim.parameters import momentum_parameters
from async_spark.optim.sgd import SGDMessage

from .curvature import gram_max_eigenvalue

__all__ = ["MOMENTUM_METHODS", "MomentumLinear", "gram_max_eigenvalue", "momentum_step"]

MOMENTUM_METHODS = ("hb", "ag", "apg", "ahb", "aag", "aapg")
_BASE = {"hb": "hb", "ahb": "hb", "ag": "ag", "aag": "ag", "apg": "apg", "aapg": "apg"}
_LOSS_CURVATURE = {"logistic": 0.25, "squares": 1.0, "softmax": 0.5}


def momentum_step(
    method: str, model: LinearModel, source: BlockSource, desc: DatasetDescriptor
) -> tuple[float, float, dict[str, float]]:
    """``(alpha, beta, curvature)`` from the data for ``--step auto``."""
    if model.l2 <= 0:
        raise ValueError(
            "--step auto for momentum methods needs --l2 > 0 (mu = l2 is the strong convexity "
            "used to choose the momentum); or give --step and --momentum"
        )
    lam = gram_max_eigenvalue(source, desc, intercept=model.fit_intercept)
    L = _LOSS_CURVATURE[model.loss] * lam + model.l2
    mu = model.l2
    kind = "hb" if _BASE[method] == "hb" else "ag"  # APG is tuned as AG
    alpha, beta = momentum_parameters(kind, mu, L)
    return alpha, beta, {"L": L, "mu": mu, "kappa": L / mu}


class _WeightsL1:
    """Prox of l1 * ||W||_1 on the weights only (the intercept is never penalized)."""

    def __init__(self, model: LinearModel) -> None:
        self.model = model

    def __call__(self, v: np.ndarray, step: float = 1.0) -> np.ndarray:
        return prox_l1(self.model, v, step)

    def value(self, x: np.ndarray) -> np.ndarray:
        m = self.model.outputs * self.model.num_features
        return np.asarray(self.model.l1 * np.abs(np.asarray(x)[..., :m]).sum(axis=-1))


class MomentumLinear:
    """HB / AG / APG as an update rule over SGD messages (same interface as SGD and SAGA).

    Parameters
    ----------
    method : one of MOMENTUM_METHODS (the leading "a" only marks asynchronous use)
    model : LinearModel
    n, num_blocks, batch_fraction : as for SGD
    alpha, beta : step and momentum
    momentum_damping : c >= 0, beta / (1 + c * staleness)
    """

    def __init__(
        self,
        method: str,
        model: LinearModel,
        *,
        n: int,
        num_blocks: int,
        batch_fraction: float,
        alpha: float,
        beta: float,
        momentum_damping: float = 0.0,
    ) -> None:
        if method not in MOMENTUM_METHODS:
            raise ValueError(f"method must be one of {', '.join(MOMENTUM_METHODS)}, got {method!r}")
        if not momentum_damping >= 0:
            raise ValueError(f"momentum_damping must be >= 0, got {momentum_damping!r}")
        self.model = model
        self.n, self.num_blocks, self.batch_fraction = n, num_blocks, batch_fraction
        self.alpha, self.beta, self.damping = float(alpha), float(beta), float(momentum_damping)
        self._staleness = 0
        base = _BASE[method]
        beta_fn = self._beta if self.damping > 0 else self.beta
        if base == "hb":
            self.rule = heavy_ball(self.alpha, beta_fn)
        elif base == "ag":
            self.rule = nesterov(self.alpha, beta_fn)
        else:  # apg: the prox of the L1 term on the weights (the intercept is never penalized)
            self.rule = accelerated_projected_gradient(self.alpha, beta_fn, _WeightsL1(model))

    def _beta(self, k: int) -> float:
        return self.beta / (1.0 + self.damping * self._staleness)

    def init(self, params: np.ndarray) -> Any:
        return self.rule.init(params)

    def update(self, message: SGDMessage, state: Any, params: np.ndarray) -> tuple[np.ndarray, Any]:
        m = message.num_tasks * self.batch_fraction * self.n / self.num_blocks
        g = np.asarray(message.grad_sum) / m + regularizer_gradient(self.model, params)
        self._staleness = int(message.staleness)
        return self.rule.update(g, state, params)

    @staticmethod
    def iterate(params: np.ndarray, state: Any) -> np.ndarray:
        """The iterate x_k (``params`` for HB, ``state.x`` for AG and APG)."""
        return getattr(state, "x", params)

r"""Momentum update rules: heavy ball, Nesterov's AG, accelerated projected gradient, robust momentum.

Each rule is a pure pair ``init(params) -> state`` / ``update(grad, state, params) ->
(params, state)`` (the :class:`UpdateRule` tuple), with its state one typed ``NamedTuple``, so a
state is a checkpointable value and the rules run unchanged on one vector ``(d,)`` or on a stack of
independent chains ``(chains, d)``. ``grad`` is either the (noisy) gradient evaluated at
``params`` or a callable ``params -> gradient``. Step size and momentum are floats or callables of
the step count ``k = state.step`` (0 at the first update), checked when evaluated.

**Where the gradient is taken.** ``params`` is always the point where the *next* gradient is
evaluated, exactly as in ``torch.optim.SGD`` and ``optax.sgd``; this is what a worker of the
engine receives. For heavy ball this is the iterate :math:`x_k`; for AG, APG and robust momentum
it is the extrapolated point :math:`y_k`, and the state carries :math:`x_k` (``state.x``), which is
the sequence the theory speaks about.

Iterations (Can, Gürbüzbalaban & Zhu, "Accelerated Linear Convergence of Stochastic Momentum
Methods in Wasserstein Distances", ICML 2019, arXiv:1901.07445, with noisy gradients
:math:`\tilde\nabla f = \nabla f + w`):

- heavy ball (Polyak 1964): :math:`x_{k+1} = x_k - \alpha\tilde\nabla f(x_k) + \beta(x_k-x_{k-1})`;
- AG (Nesterov 1983): :math:`y_k = (1+\beta)x_k - \beta x_{k-1}`,
  :math:`x_{k+1} = y_k - \alpha\tilde\nabla f(y_k)`;
- APG: :math:`x_{k+1} = \operatorname{prox}_{\alpha g}(y_k - \alpha\tilde\nabla f(y_k))` (a
  projection when g is the indicator of a convex set, see :mod:`async_spark.optim.projections`);
- robust momentum (Cyrus, Hu, Van Scoy & Lessard, ACC 2018): :math:`y_k = x_k + \gamma(x_k -
  x_{k-1})`, :math:`x_{k+1} = x_k + \beta(x_k - x_{k-1}) - \alpha\tilde\nabla f(y_k)`.

All start from :math:`x_{-1} = x_0` (zero velocity). With constant α and β,
``torch.optim.SGD(lr=α, momentum=β, dampening=0)`` produces the same iterates as
:func:`heavy_ball` (``nesterov=False``) and as :func:`nesterov` (``nesterov=True``, where torch's
parameters are our :math:`y_k`); with a changing learning rate torch scales its momentum buffer
differently (its buffer holds :math:`(x_k - x_{k+1})/\alpha_k`), whereas these rules follow the
paper's form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from async_spark.optim._validate import (
    Hyper,
    check_choice,
    check_hyper,
    check_momentum,
    check_positive,
    resolve,
)
from async_spark.optim.parameters import (
    PARAMETER_CHOICES,
    momentum_parameters,
    robust_momentum_parameters,
)
from async_spark.optim.projections import Prox

__all__ = [
    "Gradient",
    "UpdateRule",
    "HeavyBallState",
    "NesterovState",
    "APGState",
    "RobustMomentumState",
    "heavy_ball",
    "nesterov",
    "accelerated_projected_gradient",
    "robust_momentum",
    "momentum_rule",
]

#: The message an update consumes: a gradient at ``params`` or a callable computing it.
Gradient = np.ndarray | Callable[[np.ndarray], np.ndarray]


class UpdateRule(NamedTuple):
    """A pure update rule: ``state = init(params)``; ``params, state = update(grad, state, params)``."""

    init: Callable[[np.ndarray], Any]
    update: Callable[[Gradient, Any, np.ndarray], tuple[np.ndarray, Any]]


class HeavyBallState(NamedTuple):
    """State of :func:`heavy_ball`: the step count and the previous iterate :math:`x_{k-1}`."""

    step: int
    prev: np.ndarray


class NesterovState(NamedTuple):
    """State of :func:`nesterov`: the step count and :math:`x_k` (``params`` is :math:`y_k`)."""

    step: int
    x: np.ndarray


class APGState(NamedTuple):
    """State of :func:`accelerated_projected_gradient`: step count and the feasible :math:`x_k`."""

    step: int
    x: np.ndarray


class RobustMomentumState(NamedTuple):
    """State of :func:`robust_momentum`: step count, :math:`x_k` and :math:`x_{k-1}`."""

    step: int
    x: np.ndarray
    prev: np.ndarray


def _gradient(grad: Gradient, params: np.ndarray) -> np.ndarray:
    g = grad(params) if callable(grad) else grad
    g = np.asarray(g)
    if g.shape != params.shape:
        raise ValueError(f"grad must have the shape of params {params.shape}, got {g.shape}")
    return g


def _params(params: Any) -> np.ndarray:
    p = np.asarray(params)
    if not np.issubdtype(p.dtype, np.floating):
        p = p.astype(np.float64)
    return p


# ------------------------------------------------------------------------------------------ rules


def heavy_ball(alpha: Hyper, beta: Hyper) -> UpdateRule:
    r"""Polyak's heavy ball: :math:`x_{k+1} = x_k - \alpha_k g_k + \beta_k (x_k - x_{k-1})`.

    ``g_k`` is the (noisy) gradient at ``params`` :math:`= x_k`. With ``beta=0`` this is gradient
    descent.

    Parameters
    ----------
    alpha : float > 0 or callable ``k -> float``
        Step size.
    beta : float in [0, 1) or callable ``k -> float``
        Momentum.
    """
    alpha = check_hyper("alpha", alpha, check_positive)
    beta = check_hyper("beta", beta, check_momentum)

    def init(params: np.ndarray) -> HeavyBallState:
        p = _params(params)
        return HeavyBallState(step=0, prev=p.copy())

    def update(
        grad: Gradient, state: HeavyBallState, params: np.ndarray
    ) -> tuple[np.ndarray, HeavyBallState]:
        x = _params(params)
        g = _gradient(grad, x)
        a = resolve("alpha", alpha, state.step, check_positive)
        b = resolve("beta", beta, state.step, check_momentum)
        new = x - a * g + b * (x - state.prev)
        return new, HeavyBallState(step=state.step + 1, prev=x)

    return UpdateRule(init, update)


def _extrapolate(
    x_new: np.ndarray, x: np.ndarray, y: np.ndarray, b: float, restart: bool
) -> np.ndarray:
    r""":math:`y_{k+1} = x_{k+1} + \beta_k(x_{k+1} - x_k)`, or :math:`x_{k+1}` (the momentum
    restarted) for a chain whose gradient-mapping test fires (see :func:`nesterov`)."""
    y_new = x_new + b * (x_new - x)
    if not restart:
        return y_new
    fired = np.sum((y - x_new) * (x_new - x), axis=-1, keepdims=True) > 0
    return np.where(fired, x_new, y_new)


def nesterov(alpha: Hyper, beta: Hyper, restart: bool = False) -> UpdateRule:
    r"""Nesterov's accelerated gradient, in the look-ahead form.

    With ``params`` :math:`= y_k` and ``state.x`` :math:`= x_k`:

    .. math:: x_{k+1} = y_k - \alpha_k g_k, \qquad y_{k+1} = x_{k+1} + \beta_k (x_{k+1} - x_k),

    which is :math:`y_k = (1+\beta)x_k - \beta x_{k-1}`, :math:`x_{k+1} = y_k - \alpha
    \tilde\nabla f(y_k)` of the paper. For a strongly convex f use
    :func:`~async_spark.optim.momentum_parameters` (``"ag"``: α = 1/L,
    β = (√κ−1)/(√κ+1)); for a merely convex f the schedule ``beta=lambda k: k / (k + 3)``
    gives Nesterov's O(1/k²) method.

    ``restart``: the gradient scheme of O'Donoghue & Candès ("Adaptive restart for accelerated
    gradient schemes", Found. Comput. Math. 15, 2015): when :math:`(y_k - x_{k+1})^\top
    (x_{k+1} - x_k) > 0` (for AG :math:`\alpha_k g_k^\top(x_{k+1} - x_k) > 0`: the step
    points against the momentum), the momentum is dropped, :math:`y_{k+1} = x_{k+1}`. With a β
    tuned for a condition number larger than the problem's (μ underestimated: an automatic β
    counts only the regularizer's), plain AG oscillates around the minimizer; restarted, it
    converges at about the rate of the true κ, and the objective stops rippling.
    """
    alpha = check_hyper("alpha", alpha, check_positive)
    beta = check_hyper("beta", beta, check_momentum)

    def init(params: np.ndarray) -> NesterovState:
        p = _params(params)
        return NesterovState(step=0, x=p.copy())

    def update(
        grad: Gradient, state: NesterovState, params: np.ndarray
    ) -> tuple[np.ndarray, NesterovState]:
        y = _params(params)
        g = _gradient(grad, y)
        a = resolve("alpha", alpha, state.step, check_positive)
        b = resolve("beta", beta, state.step, check_momentum)
        x_new = y - a * g
        y_new = _extrapolate(x_new, state.x, y, b, restart)
        return y_new, NesterovState(step=state.step + 1, x=x_new)

    return UpdateRule(init, update)


def accelerated_projected_gradient(
    alpha: Hyper, beta: Hyper, prox: Prox, restart: bool = False
) -> UpdateRule:
    r"""Accelerated projected (proximal) gradient: the AG step followed by a prox.

    .. math:: x_{k+1} = \operatorname{prox}_{\alpha_k g}(y_k - \alpha_k g_k), \qquad
              y_{k+1} = x_{k+1} + \beta_k (x_{k+1} - x_k),

    for :math:`\min_x f(x) + g(x)` with g given by ``prox`` (``prox(v, step)``, e.g.
    :class:`~async_spark.optim.projections.Box`, ``Ball``, ``Simplex``, ``L1``,
    ``ElasticNet``). ``state.x`` is feasible; ``params`` (:math:`y_k`, where the gradient is
    taken) may lie outside the set. ``init`` applies the prox to the starting point.
    ``restart``: as :func:`nesterov`'s, on the gradient mapping :math:`(y_k - x_{k+1})/\alpha_k`.
    """
    alpha = check_hyper("alpha", alpha, check_positive)
    beta = check_hyper("beta", beta, check_momentum)
    if not callable(prox):
        raise ValueError(f"prox must be callable as prox(v, step), got {prox!r}")

    def init(params: np.ndarray) -> APGState:
        p = _params(params)
        return APGState(step=0, x=np.asarray(prox(p, 1.0), dtype=p.dtype))

    def update(grad: Gradient, state: APGState, params: np.ndarray) -> tuple[np.ndarray, APGState]:
        y = _params(params)
        g = _gradient(grad, y)
        a = resolve("alpha", alpha, state.step, check_positive)
        b = resolve("beta", beta, state.step, check_momentum)
        x_new = np.asarray(prox(y - a * g, a), dtype=y.dtype)
        y_new = _extrapolate(x_new, state.x, y, b, restart)
        return y_new, APGState(step=state.step + 1, x=x_new)

    return UpdateRule(init, update)


def robust_momentum(mu: float, L: float, rho: float) -> UpdateRule:
    r"""Robust momentum (Cyrus, Hu, Van Scoy & Lessard, ACC 2018).

    One parameter :math:`\rho \in [1 - 1/\sqrt\kappa, 1 - 1/\kappa]` trades the worst-case rate ρ
    for robustness to gradient noise (larger ρ: slower, smaller stationary spread). With
    ``params`` :math:`= y_k`, ``state.x`` :math:`= x_k`, ``state.prev`` :math:`= x_{k-1}`:

    .. math:: x_{k+1} = (1+\beta)x_k - \beta x_{k-1} - \alpha g_k, \qquad
              y_{k+1} = (1+\gamma)x_{k+1} - \gamma x_k,

    with (α, β, γ) from :func:`~async_spark.optim.robust_momentum_parameters`.
    """
    alpha, beta, gamma = robust_momentum_parameters(mu, L, rho)

    def init(params: np.ndarray) -> RobustMomentumState:
        p = _params(params)
        return RobustMomentumState(step=0, x=p.copy(), prev=p.copy())

    def update(
        grad: Gradient, state: RobustMomentumState, params: np.ndarray
    ) -> tuple[np.ndarray, RobustMomentumState]:
        y = _params(params)
        g = _gradient(grad, y)
        x = state.x
        x_new = x + beta * (x - state.prev) - alpha * g
        y_new = x_new + gamma * (x_new - x)
        return y_new.astype(y.dtype, copy=False), RobustMomentumState(
            step=state.step + 1, x=x_new.astype(y.dtype, copy=False), prev=x
        )

    return UpdateRule(init, update)


def momentum_rule(method: str, mu: float, L: float, *, prox: Prox | None = None) -> UpdateRule:
    """The rule for ``method`` with (α, β) from :func:`momentum_parameters` (``--step auto``).

    ``"gd"`` and ``"hb"`` give :func:`heavy_ball`; ``"ag"`` and ``"ag-lessard"`` give
    :func:`nesterov`, or :func:`accelerated_projected_gradient` when ``prox`` is given.
    A ``prox`` with ``"gd"``/``"hb"`` is refused (projected heavy ball is not covered here).
    """
    check_choice("method", method, PARAMETER_CHOICES)
    alpha, beta = momentum_parameters(method, mu, L)
    if method in ("gd", "hb"):
        if prox is not None:
            raise ValueError(
                f"prox is only supported with method 'ag' or 'ag-lessard', got {method!r}"
            )
        return heavy_ball(alpha, beta)
    if prox is not None:
        return accelerated_projected_gradient(alpha, beta, prox)
    return nesterov(alpha, beta)

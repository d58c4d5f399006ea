r"""Step-size rules for (asynchronous) SGD and SAGA, and the ``--step auto`` choice.

A step rule is a picklable callable ``rule(k, staleness) -> gamma_k`` where ``k`` is the number
of updates applied so far and ``staleness`` the number of updates applied between the dispatch
of the task whose result is being applied and now.

- :class:`ConstantStep`: :math:`\gamma_k = \gamma` (SAGA; SGD to a noise ball).
- :class:`InvSqrtStep`: :math:`\gamma_k = \gamma / \sqrt{k/P + 1}`, ASYNC's ASGD rule (one
  "epoch" of P results per unit of the square root). With ``num_blocks=1`` it is the synchronous
  rule :math:`\gamma/\sqrt{k+1}` (k = rounds).
- :class:`StalenessScaledStep`: :math:`\gamma_k = \mathrm{base}(k, \tau) / (1 + \tau)`, the
  staleness-aware rule of Zhang, Gupta, Lian & Liu (IJCAI 2016), who divide the learning rate by
  the staleness; ``1 + tau`` keeps a fresh result (tau = 0) at the base step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from async_spark.models.linear import LOSS_CURVATURE, LinearModel, sample_smoothness, uniform_l2

__all__ = [
    "StepRule",
    "ConstantStep",
    "InvSqrtStep",
    "StalenessScaledStep",
    "STEP_RULES",
    "make_step_rule",
    "as_step_rule",
    "auto_step",
    "asynchronous_step",
    "minibatch_smoothness",
]

STEP_RULES = ("constant", "sqrt", "staleness")


class StepRule(Protocol):
    """``rule(k, staleness) -> gamma``."""

    def __call__(self, k: int, staleness: int = 0) -> float: ...


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}") from None
    if not (math.isfinite(v) and v > 0.0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v


@dataclass(frozen=True)
class ConstantStep:
    r""":math:`\gamma_k = \gamma`."""

    gamma: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "gamma", _positive("gamma", self.gamma))

    def __call__(self, k: int, staleness: int = 0) -> float:
        return self.gamma


@dataclass(frozen=True)
class InvSqrtStep:
    r""":math:`\gamma_k = \gamma / \sqrt{k/P + 1}` (ASYNC's ASGD; P = ``num_blocks``)."""

    gamma: float
    num_blocks: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "gamma", _positive("gamma", self.gamma))
        if not isinstance(self.num_blocks, int) or self.num_blocks < 1:
            raise ValueError(f"num_blocks must be an integer >= 1, got {self.num_blocks!r}")

    def __call__(self, k: int, staleness: int = 0) -> float:
        return self.gamma / math.sqrt(k / self.num_blocks + 1.0)


@dataclass(frozen=True)
class StalenessScaledStep:
    r""":math:`\gamma_k = \mathrm{base}(k, \tau) / (1 + \tau)` (Zhang et al., IJCAI 2016)."""

    base: Any  # a StepRule

    def __call__(self, k: int, staleness: int = 0) -> float:
        if staleness < 0:
            raise ValueError(f"staleness must be >= 0, got {staleness!r}")
        return float(self.base(k, staleness)) / (1.0 + staleness)


def make_step_rule(name: str, gamma: float, num_blocks: int = 1) -> StepRule:
    """Build a rule by name: ``constant``, ``sqrt`` (γ/√(k/P+1)) or ``staleness``
    (constant γ divided by 1 + staleness)."""
    if name == "constant":
        return ConstantStep(gamma)
    if name == "sqrt":
        return InvSqrtStep(gamma, num_blocks)
    if name == "staleness":
        return StalenessScaledStep(ConstantStep(gamma))
    raise ValueError(f"step rule must be one of {', '.join(STEP_RULES)}, got {name!r}")


def as_step_rule(step: Any) -> StepRule:
    """A float becomes a :class:`ConstantStep`; a callable is used as given."""
    if callable(step):
        return step  # type: ignore[no-any-return]
    return ConstantStep(step)


def minibatch_smoothness(l_max: float, l_avg: float, n: int, batch: float) -> float:
    r"""Expected smoothness of a mini-batch of ``batch`` rows out of ``n`` (sampling without
    replacement; Gower et al., ICML 2019, Proposition 3.8):

    .. math:: \mathcal L(m) = \frac{n (m-1)}{m (n-1)} L + \frac{n - m}{m (n-1)} L_{\max},

    between :math:`L_{\max}` (m = 1) and :math:`L` (m = n)."""
    m = min(max(float(batch), 1.0), float(n))
    if n <= 1:
        return l_max
    return n * (m - 1) / (m * (n - 1)) * l_avg + (n - m) / (m * (n - 1)) * l_max


def auto_step(
    method: str,
    model: LinearModel,
    max_row_norm_sq: float,
    *,
    n: int | None = None,
    batch: float | None = None,
    gram_max: float | None = None,
) -> float:
    r"""A safe step size from the data, as for SAG/SAGA.

    With :math:`L_{\max}` from :func:`async_spark.models.sample_smoothness` (per-sample
    smoothness from :math:`\max_i\|x_i\|^2`, counting the intercept's constant feature) and
    :math:`L = L_{\max} + \lambda_2` (the penalty is part of every :math:`f_i`'s smoothness):

    - ``saga``/``asaga``: :math:`\gamma = 1/(3L)`, the step of Defazio, Bach & Lacoste-Julien,
      "SAGA", NIPS 2014, Theorem 1 (convergence with and without strong convexity);
    - ``sgd``/``asgd``: :math:`\gamma = 1/(2L)`, the largest constant step of Gower et al.,
      "SGD: General Analysis and Improved Rates", ICML 2019 (Theorem 3.1 with the expected
      smoothness bounded by :math:`L_{\max}`).

    **Mini-batches.** An update averages ``batch`` sampled rows (``b N / P`` for one asynchronous
    result, ``b N`` for a synchronous round). When ``n``, ``batch`` and ``gram_max``
    (:math:`\lambda_{\max}` of :math:`\tilde X^T \tilde X / n`) are given, :math:`L_{\max}` is
    replaced by the mini-batch expected smoothness :func:`minibatch_smoothness`, with the
    average smoothness :math:`L = c_\ell\,\lambda_{\max} + \lambda_2` (after Gazagnadou, Gower &
    Salmon, "Optimal mini-batch and step sizes for SAGA", ICML 2019) — much larger steps for
    large batches, the same step for one row.

    Staleness is not accounted for; an asynchronous run may combine this with
    :class:`StalenessScaledStep`.
    """
    L = sample_smoothness(model, max_row_norm_sq) + uniform_l2(model)
    if n is not None and batch is not None and gram_max is not None:
        c = LOSS_CURVATURE[model.loss]
        L = minibatch_smoothness(L, c * gram_max + uniform_l2(model), n, batch)
    if method in ("saga", "asaga"):
        return 1.0 / (3.0 * L)
    if method in ("sgd", "asgd"):
        return 1.0 / (2.0 * L)
    raise ValueError(f"method must be one of sgd, asgd, saga, asaga, got {method!r}")


def asynchronous_step(
    method: str,
    model: LinearModel,
    max_row_norm_sq: float,
    *,
    n: int,
    batch: float,
    gram_max: float,
    max_delay: int,
) -> float:
    r"""The default step of an asynchronous method whose updates average ``batch`` rows and arrive
    up to ``max_delay`` updates late.

    .. math::

        \gamma = \max\Big(\gamma_1,\ \min\big(\gamma_b,\ \frac{1}{4 L\,\tau}\big)\Big),

    - :math:`\gamma_b`: :func:`auto_step` with the mini-batch expected smoothness of one task's
      ``batch`` rows (Gower et al., ICML 2019; Gazagnadou, Gower & Salmon, ICML 2019) — the step
      a fresh update of that size may take;
    - :math:`1/(4L\tau)`: the delay condition of asynchronous SGD with :math:`\tau` concurrent
      updates in flight and :math:`L` the smoothness of the full objective
      (:math:`c_\ell\lambda_{\max}(\tilde X^T\tilde X/n) + \lambda_2`): Koloskova, Stich & Jaggi,
      "Sharper convergence guarantees for asynchronous SGD", NeurIPS 2022, and Mishchenko, Bach,
      Even & Woodworth, "Asynchronous SGD beats minibatch SGD under arbitrary delays", NeurIPS
      2022, whose steps shrink with the number of concurrent workers, not the largest delay;
      infinite when ``max_delay`` is 0;
    - :math:`\gamma_1`: the one-sample step :func:`auto_step` without the mini-batch gain, the
      regime of Leblond, Pedregosa & Lacoste-Julien's ASAGA (AISTATS 2017) on sparse data with
      little overlap between rows, where staleness costs little; kept as a floor because on
      row-normalized data the delay condition is the more conservative of the two.

    Neither theorem covers the maximum of the two on every dataset; the loop's divergence guard
    stops a run whose gradients explode, with a hint to lower ``--step``.
    """
    one_row = auto_step(method, model, max_row_norm_sq)
    fresh_batch = auto_step(method, model, max_row_norm_sq, n=n, batch=batch, gram_max=gram_max)
    if max_delay <= 0:
        return max(one_row, fresh_batch)
    L = LOSS_CURVATURE[model.loss] * gram_max + uniform_l2(model)
    return max(one_row, min(fresh_batch, 1.0 / (4.0 * L * max_delay)))

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

from async_spark.models.linear import LinearModel, sample_smoothness

__all__ = [
    "StepRule",
    "ConstantStep",
    "InvSqrtStep",
    "StalenessScaledStep",
    "STEP_RULES",
    "make_step_rule",
    "as_step_rule",
    "auto_step",
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
    L = sample_smoothness(model, max_row_norm_sq) + model.l2
    if n is not None and batch is not None and gram_max is not None:
        c = {"logistic": 0.25, "squares": 1.0, "softmax": 0.5}[model.loss]
        L = minibatch_smoothness(L, c * gram_max + model.l2, n, batch)
    if method in ("saga", "asaga"):
        return 1.0 / (3.0 * L)
    if method in ("sgd", "asgd"):
        return 1.0 / (2.0 * L)
    raise ValueError(f"method must be one of sgd, asgd, saga, asaga, got {method!r}")

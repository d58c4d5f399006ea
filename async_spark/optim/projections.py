r"""Projections onto simple convex sets and proximal maps of simple penalties.

The accelerated projected (proximal) gradient method (APG) takes the AG step and then applies

.. math::  \operatorname{prox}_{t g}(v) = \arg\min_x \; g(x) + \tfrac{1}{2t}\|x - v\|^2 ,

which for the indicator :math:`g = \iota_C` of a closed convex set is the Euclidean projection
onto :math:`C` (independent of the step :math:`t`). See Can, Gürbüzbalaban & Zhu, "Accelerated
Linear Convergence of Stochastic Momentum Methods in Wasserstein Distances" (ICML 2019,
arXiv:1901.07445) for APG under noisy gradients, and Beck & Teboulle (2009) for the proximal form.

Two layers:

- kernels ``project_box``, ``project_ball``, ``project_simplex``, ``prox_l1``,
  ``prox_elastic_net``: pure functions of arrays. They act on the last axis, so a stack of
  iterates of shape ``(chains, d)`` is handled in one call; the dtype of ``x`` is kept.
- validated operators :class:`Box`, :class:`Ball`, :class:`Simplex`, :class:`L1`,
  :class:`ElasticNet`: frozen objects with ``op(v, step) -> prox`` and ``op.value(x)`` (the
  penalty, ``inf`` outside a constraint set), which refuse an empty set or a negative weight with a
  ``ValueError`` naming the parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from async_spark.optim._validate import (
    as_float_array,
    check_nonnegative,
    check_positive,
)

__all__ = [
    "Prox",
    "project_box",
    "project_ball",
    "project_simplex",
    "prox_l1",
    "prox_elastic_net",
    "Box",
    "Ball",
    "Simplex",
    "L1",
    "ElasticNet",
]


class Prox(Protocol):
    """A proximal operator ``prox(v, step) -> x`` with its penalty ``value(x)``."""

    def __call__(self, v: np.ndarray, step: float = 1.0) -> np.ndarray: ...

    def value(self, x: np.ndarray) -> np.ndarray: ...


# ----------------------------------------------------------------------------------------- kernels


def project_box(x: np.ndarray, lo: Any, hi: Any) -> np.ndarray:
    r"""Projection onto the box :math:`\{x : lo \le x \le hi\}` (coordinatewise clip).

    ``lo`` and ``hi`` broadcast against ``x`` (scalars or arrays of shape ``(d,)``); ``-inf`` /
    ``inf`` leave a side open. Assumes ``lo <= hi`` (checked by :class:`Box`).
    """
    x = np.asarray(x)
    return np.clip(x, lo, hi).astype(x.dtype, copy=False)


def project_ball(x: np.ndarray, radius: float, center: Any = None) -> np.ndarray:
    r"""Projection onto the Euclidean ball :math:`\{x : \|x - c\|_2 \le r\}`.

    .. math:: P(x) = c + (x - c)\,\min\!\left(1, \frac{r}{\|x - c\|_2}\right)

    Acts on the last axis: for ``x`` of shape ``(chains, d)`` each row is projected.
    """
    x = np.asarray(x)
    c = 0.0 if center is None else np.asarray(center, dtype=x.dtype)
    diff = x - c
    norm = np.linalg.norm(diff, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(norm > radius, radius / norm, 1.0)
    return (c + diff * scale).astype(x.dtype, copy=False)


def project_simplex(x: np.ndarray, total: float = 1.0) -> np.ndarray:
    r"""Projection onto the simplex :math:`\{x \ge 0, \sum_i x_i = s\}` along the last axis.

    The sort-based algorithm of Held, Wolfe & Crowder (1974) / Duchi et al. (2008): with
    :math:`u` the coordinates sorted in decreasing order and
    :math:`k = \max\{j : u_j - (\sum_{i\le j} u_i - s)/j > 0\}`,
    :math:`\theta = (\sum_{i \le k} u_i - s)/k` and :math:`P(x) = \max(x - \theta, 0)`.
    """
    x = np.asarray(x)
    u = -np.sort(-x, axis=-1)
    css = np.cumsum(u, axis=-1) - total
    j = np.arange(1, x.shape[-1] + 1, dtype=x.dtype)
    cond = u - css / j > 0
    # k = index of the last True (cond is True for a prefix); at least 1.
    k = x.shape[-1] - np.argmax(cond[..., ::-1], axis=-1)
    theta = np.take_along_axis(css, (k - 1)[..., None], axis=-1) / k[..., None]
    return np.maximum(x - theta, 0).astype(x.dtype, copy=False)


def prox_l1(x: np.ndarray, step: float, lam: float) -> np.ndarray:
    r"""Soft thresholding, the prox of :math:`g = \lambda \|x\|_1`:
    :math:`\operatorname{sign}(x)\max(|x| - t\lambda, 0)`."""
    x = np.asarray(x)
    return (np.sign(x) * np.maximum(np.abs(x) - step * lam, 0)).astype(x.dtype, copy=False)


def prox_elastic_net(x: np.ndarray, step: float, l1: float, l2: float) -> np.ndarray:
    r"""Prox of the elastic net :math:`g = \lambda_1\|x\|_1 + \tfrac{\lambda_2}{2}\|x\|_2^2`:
    :math:`\operatorname{soft}(x, t\lambda_1) / (1 + t\lambda_2)`."""
    return (prox_l1(x, step, l1) / (1.0 + step * l2)).astype(np.asarray(x).dtype, copy=False)


# ------------------------------------------------------------------------------ validated operators


@dataclass(frozen=True)
class Box:
    """The box ``lo <= x <= hi`` (``lo``/``hi`` scalars or arrays; ``-inf``/``inf`` allowed)."""

    lo: Any
    hi: Any

    def __post_init__(self) -> None:
        lo = np.asarray(self.lo, dtype=np.float64)
        hi = np.asarray(self.hi, dtype=np.float64)
        if np.any(np.isnan(lo)) or np.any(np.isnan(hi)):
            raise ValueError("lo and hi must not be NaN")
        try:
            empty = np.any(lo > hi)
        except ValueError:
            raise ValueError(
                f"lo and hi must broadcast together, got shapes {lo.shape} and {hi.shape}"
            ) from None
        if empty:
            raise ValueError("hi must be >= lo in every coordinate (the box is empty)")
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)

    def __call__(self, v: np.ndarray, step: float = 1.0) -> np.ndarray:
        return project_box(v, self.lo, self.hi)

    def value(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        inside = np.all((x >= self.lo) & (x <= self.hi), axis=-1)
        return np.where(inside, 0.0, np.inf)


@dataclass(frozen=True)
class Ball:
    """The Euclidean ball ``||x - center|| <= radius`` (``radius >= 0``)."""

    radius: float
    center: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "radius", check_nonnegative("radius", self.radius))
        if self.center is not None:
            object.__setattr__(self, "center", as_float_array("center", self.center))

    def __call__(self, v: np.ndarray, step: float = 1.0) -> np.ndarray:
        return project_ball(v, self.radius, self.center)

    def value(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        c = 0.0 if self.center is None else self.center
        norm = np.linalg.norm(x - c, axis=-1)
        return np.where(norm <= self.radius * (1 + 1e-12), 0.0, np.inf)


@dataclass(frozen=True)
class Simplex:
    """The simplex ``x >= 0, sum(x) = total`` (``total > 0``)."""

    total: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", check_positive("total", self.total))

    def __call__(self, v: np.ndarray, step: float = 1.0) -> np.ndarray:
        return project_simplex(v, self.total)

    def value(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        tol = 1e-9 * max(1.0, self.total)
        ok = np.all(x >= -tol, axis=-1) & (np.abs(np.sum(x, axis=-1) - self.total) <= tol)
        return np.where(ok, 0.0, np.inf)


@dataclass(frozen=True)
class L1:
    """The penalty ``lam * ||x||_1`` (``lam >= 0``)."""

    lam: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "lam", check_nonnegative("lam", self.lam))

    def __call__(self, v: np.ndarray, step: float = 1.0) -> np.ndarray:
        return prox_l1(v, step, self.lam)

    def value(self, x: np.ndarray) -> np.ndarray:
        return self.lam * np.sum(np.abs(np.asarray(x)), axis=-1)


@dataclass(frozen=True)
class ElasticNet:
    """The penalty ``l1 * ||x||_1 + l2 / 2 * ||x||^2`` (``l1, l2 >= 0``)."""

    l1: float
    l2: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "l1", check_nonnegative("l1", self.l1))
        object.__setattr__(self, "l2", check_nonnegative("l2", self.l2))

    def __call__(self, v: np.ndarray, step: float = 1.0) -> np.ndarray:
        return prox_elastic_net(v, step, self.l1, self.l2)

    def value(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        return self.l1 * np.sum(np.abs(x), axis=-1) + 0.5 * self.l2 * np.sum(x * x, axis=-1)

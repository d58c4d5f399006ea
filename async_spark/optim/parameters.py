r"""Step size and momentum from the curvature constants (μ, L), and (μ, L) from data.

For an L-smooth, μ-strongly convex f with condition number :math:`\kappa = L/\mu`, the classical
tunings (and their rates on quadratics :math:`\mu I \preceq Q \preceq L I`) are

============  =====================================  ===================================================  ===============================
method        α                                      β                                                    rate ρ on quadratics
============  =====================================  ===================================================  ===============================
``"ag"``      :math:`1/L`                            :math:`(\sqrt\kappa-1)/(\sqrt\kappa+1)`              :math:`1-1/\sqrt\kappa`
``"ag-lessard"`` :math:`4/(3L+\mu)`                  :math:`(\sqrt{3\kappa+1}-2)/(\sqrt{3\kappa+1}+2)`    :math:`1-2/\sqrt{3\kappa+1}`
``"hb"``      :math:`4/(\sqrt L+\sqrt\mu)^2`         :math:`((\sqrt\kappa-1)/(\sqrt\kappa+1))^2`          :math:`(\sqrt\kappa-1)/(\sqrt\kappa+1)`
``"gd"``      :math:`2/(L+\mu)`                      0                                                    :math:`(\kappa-1)/(\kappa+1)`
============  =====================================  ===================================================  ===============================

(Nesterov 2004; Polyak 1964; Lessard, Recht & Packard 2016; as used by Can, Gürbüzbalaban & Zhu,
ICML 2019, arXiv:1901.07445.) The rates are checked against the spectral radius of the iteration
matrix in :func:`async_spark.theory.momentum_rate`.

Robust momentum (Cyrus, Hu, Van Scoy & Lessard, ACC 2018) has one parameter
:math:`\rho \in [1 - 1/\sqrt\kappa,\, 1 - 1/\kappa]` that trades the rate ρ for robustness to
gradient noise; :func:`robust_momentum_parameters` gives its (α, β, γ).

:func:`estimate_curvature` estimates (μ, L) of a regularized linear model from its design matrix
by power iteration on the Gram operator :math:`G = X^\top X / n` (dense or CSR, never formed).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

from async_spark.optim._validate import (
    check_choice,
    check_curvature,
    check_interval,
    check_nonnegative,
    check_positive,
)

__all__ = [
    "PARAMETER_CHOICES",
    "momentum_parameters",
    "robust_momentum_parameters",
    "Curvature",
    "estimate_curvature",
]

PARAMETER_CHOICES = ("ag", "ag-lessard", "hb", "gd")  # the tunings momentum_parameters knows


def momentum_parameters(method: str, mu: float, L: float) -> tuple[float, float]:
    r"""Step size α and momentum β for ``method`` from the curvature constants.

    Parameters
    ----------
    method : {"ag", "ag-lessard", "hb", "gd"}
        Nesterov's accelerated gradient with :math:`\alpha = 1/L`, the Lessard–Recht–Packard
        tuning of AG, Polyak's heavy ball, or gradient descent (reference). See the module table.
    mu, L : float
        Strong convexity and smoothness constants, :math:`0 < \mu \le L`.

    Returns
    -------
    (alpha, beta) : tuple of float

    Raises
    ------
    ValueError
        ``method`` unknown, ``mu <= 0``, ``L < mu`` or non-finite values.
    """
    check_choice("method", method, PARAMETER_CHOICES)
    mu, L = check_curvature(mu, L)
    kappa = L / mu
    sk = math.sqrt(kappa)
    if method == "ag":
        return 1.0 / L, (sk - 1.0) / (sk + 1.0)
    if method == "ag-lessard":
        s3 = math.sqrt(3.0 * kappa + 1.0)
        return 4.0 / (3.0 * L + mu), (s3 - 2.0) / (s3 + 2.0)
    if method == "hb":
        return 4.0 / (math.sqrt(L) + math.sqrt(mu)) ** 2, ((sk - 1.0) / (sk + 1.0)) ** 2
    return 2.0 / (L + mu), 0.0


def robust_momentum_parameters(mu: float, L: float, rho: float) -> tuple[float, float, float]:
    r"""(α, β, γ) of the robust momentum method for a target rate ρ.

    The method (Cyrus, Hu, Van Scoy & Lessard, "A robust accelerated optimization algorithm for
    strongly convex functions", ACC 2018) iterates

    .. math::
        x_{k+1} = x_k + \beta (x_k - x_{k-1}) - \alpha \nabla f(y_k), \qquad
        y_k = x_k + \gamma (x_k - x_{k-1}),

    with :math:`\alpha = \kappa(1-\rho)^2(1+\rho)/L`, :math:`\beta = \kappa\rho^3/(\kappa-1)`,
    :math:`\gamma = \rho^3/((\kappa-1)(1-\rho)^2(1+\rho))`. It converges at rate ρ for every
    f in the class; :math:`\rho = 1 - 1/\sqrt\kappa` is the triple momentum method (fastest,
    least robust) and :math:`\rho = 1 - 1/\kappa` the most robust to gradient noise.

    Parameters
    ----------
    mu, L : float
        Curvature constants with :math:`0 < \mu < L` (κ > 1).
    rho : float
        Target rate in :math:`[1 - 1/\sqrt\kappa, 1 - 1/\kappa]`.
    """
    mu, L = check_curvature(mu, L)
    kappa = L / mu
    if not kappa > 1.0:
        raise ValueError(f"L must be > mu for robust momentum (kappa > 1), got L={L!r}, mu={mu!r}")
    lo, hi = 1.0 - 1.0 / math.sqrt(kappa), 1.0 - 1.0 / kappa
    # Allow a rounding error at the ends of the interval.
    eps = 1e-12
    rho = check_interval("rho", rho, lo - eps, hi + eps)
    rho = min(max(rho, lo), hi)
    alpha = kappa * (1.0 - rho) ** 2 * (1.0 + rho) / L
    beta = kappa * rho**3 / (kappa - 1.0)
    gamma = rho**3 / ((kappa - 1.0) * (1.0 - rho) ** 2 * (1.0 + rho))
    return alpha, beta, gamma


class Curvature(NamedTuple):
    """Estimated curvature constants of a regularized linear model.

    Attributes
    ----------
    L : float
        Smoothness constant (upper bound of the Hessian's eigenvalues).
    mu : float
        Strong convexity constant (lower bound of the Hessian's eigenvalues).
    gram_max, gram_min : float
        Largest and smallest eigenvalues of :math:`X^\\top X / n` found by power iteration.
    converged : bool
        Whether both power iterations met the tolerance.
    """

    L: float
    mu: float
    gram_max: float
    gram_min: float
    converged: bool


def _power_iteration(
    matvec: Any, d: int, rng: np.random.Generator, tol: float, max_iter: int
) -> tuple[float, bool]:
    """Largest eigenvalue of a symmetric PSD operator by power iteration (Rayleigh quotient)."""
    v = rng.standard_normal(d)
    v /= np.linalg.norm(v)
    lam = 0.0
    for _ in range(max_iter):
        w = matvec(v)
        lam = float(v @ w)
        nw = float(np.linalg.norm(w))
        if nw == 0.0:
            return 0.0, True
        # Stop on the eigen-residual ||Av - lam v|| <= tol * ||Av||: then lam is within that
        # distance of an eigenvalue (and the Rayleigh quotient error is of second order).
        if float(np.linalg.norm(w - lam * v)) <= tol * nw:
            return lam, True
        v = w / nw
    return lam, False


def estimate_curvature(
    X: Any,
    l2: float = 0.0,
    *,
    loss: str = "squared",
    tol: float = 1e-6,
    max_iter: int = 2000,
    seed: int = 0,
) -> Curvature:
    r"""Estimate (L, μ) of a regularized linear model from its design matrix.

    With :math:`G = X^\top X / n`, the Hessians of the two losses satisfy

    - ``"squared"``: :math:`f(w) = \frac{1}{2n}\|Xw - y\|^2 + \frac{l_2}{2}\|w\|^2` has the constant
      Hessian :math:`G + l_2 I`, so :math:`L = \lambda_{\max}(G) + l_2` and
      :math:`\mu = \lambda_{\min}(G) + l_2`;
    - ``"logistic"``: :math:`f(w) = \frac1n\sum_i \log(1 + e^{-y_i x_i^\top w}) +
      \frac{l_2}{2}\|w\|^2` has :math:`l_2 I \preceq \nabla^2 f \preceq G/4 + l_2 I`, so
      :math:`L = \lambda_{\max}(G)/4 + l_2` and :math:`\mu = l_2` (the data give no uniform
      lower bound).

    :math:`\lambda_{\max}(G)` comes from power iteration on :math:`v \mapsto X^\top(Xv)/n`
    (``X`` dense or scipy sparse; ``G`` is never formed), :math:`\lambda_{\min}(G)` from power
    iteration on the shifted operator :math:`\lambda_{\max} I - G` (only for ``"squared"``; it is
    0 when n < d). Power iteration converges from below, so ``L`` may be underestimated by about
    ``tol`` relative, and ``mu`` overestimated when the gap at the bottom of the spectrum is small:
    a ``RuntimeWarning`` says when ``max_iter`` was reached.

    Parameters
    ----------
    X : ndarray (n, d) or scipy.sparse matrix
    l2 : float, default 0
        L2 regularization weight, ``>= 0``.
    loss : {"squared", "logistic"}
    tol : float
        Relative eigen-residual :math:`\|Gv - \lambda v\| / \|Gv\|` at which to stop.
    max_iter : int
        Iterations per power iteration.
    seed : int
        Seed of the random start vector.
    """
    l2 = check_nonnegative("l2", l2)
    check_choice("loss", loss, ("squared", "logistic"))
    tol = check_positive("tol", tol)
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter!r}")
    if sp.issparse(X):
        X = sp.csr_matrix(X)
    else:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be a 2-D array, got shape {X.shape}")
    n, d = X.shape
    if n == 0 or d == 0:
        raise ValueError(f"X must have at least one row and one column, got shape {X.shape}")
    if sp.issparse(X):
        if not np.all(np.isfinite(X.data)):
            raise ValueError("X must be finite")
    elif not np.all(np.isfinite(X)):
        raise ValueError("X must be finite")

    def gram(v: np.ndarray) -> np.ndarray:
        return np.asarray(X.T @ (X @ v)).ravel() / n

    rng = np.random.default_rng(seed)
    gmax, ok_max = _power_iteration(gram, d, rng, tol, int(max_iter))
    if loss == "logistic":
        gmin, ok_min = 0.0, True
        L, mu = gmax / 4.0 + l2, l2
    else:
        if n < d:
            gmin, ok_min = 0.0, True
        else:

            def shifted(v: np.ndarray) -> np.ndarray:
                return gmax * v - gram(v)

            top, ok_min = _power_iteration(shifted, d, rng, tol, int(max_iter))
            gmin = max(gmax - top, 0.0)
        L, mu = gmax + l2, gmin + l2
    converged = ok_max and ok_min
    if not converged:
        warnings.warn(
            f"estimate_curvature: power iteration did not reach tol={tol} in {max_iter} "
            "iterations; the estimates are approximate",
            RuntimeWarning,
            stacklevel=2,
        )
    return Curvature(
        L=float(L),
        mu=float(mu),
        gram_max=float(gmax),
        gram_min=float(gmin),
        converged=bool(converged),
    )

r"""Linear rates of GD, heavy ball and AG on quadratics, as the spectral radius of the iteration.

For :math:`f(x) = \tfrac12 x^\top Q x - b^\top x` with :math:`\mu I \preceq Q \preceq L I`, the
error state :math:`\xi_k = (x_k - x^*, x_{k-1} - x^*)` of the (stochastic) methods evolves as
:math:`\xi_{k+1} = M \xi_k - \alpha B w_{k+1}`, :math:`B = [I; 0]`, with

.. math::
    M_{\mathrm{AG}} = \begin{pmatrix} (1+\beta)(I-\alpha Q) & -\beta(I-\alpha Q) \\ I & 0
    \end{pmatrix},\qquad
    M_{\mathrm{HB}} = \begin{pmatrix} (1+\beta)I - \alpha Q & -\beta I \\ I & 0 \end{pmatrix},

and GD is HB with β = 0 (Can, Gürbüzbalaban & Zhu, ICML 2019, arXiv:1901.07445, Section on
quadratics). In the eigenbasis of Q, M is block diagonal with one 2×2 block per eigenvalue λ,
whose eigenvalues are the roots of

.. math::
    z^2 - (1+\beta)(1-\alpha\lambda) z + \beta(1-\alpha\lambda) = 0 \quad (\mathrm{AG}), \qquad
    z^2 - (1+\beta-\alpha\lambda) z + \beta = 0 \quad (\mathrm{HB}),

so the rate is :math:`\rho(M) = \max_\lambda \max |z|`. Where a root is double (AG with α = 1/L
at λ = μ; tuned HB at λ = μ and λ = L) the error decays as :math:`k\,\rho^k` rather than
:math:`\rho^k`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from async_spark.optim._validate import (
    as_float_array,
    check_choice,
    check_momentum,
    check_positive,
)

__all__ = ["RATE_METHODS", "characteristic_roots", "momentum_rate", "iteration_matrix"]

RATE_METHODS = ("gd", "hb", "ag")


def _check_method_params(method: str, alpha: Any, beta: Any) -> tuple[str, float, float]:
    check_choice("method", method, RATE_METHODS)
    a = check_positive("alpha", alpha)
    b = check_momentum("beta", beta)
    if method == "gd" and b != 0.0:
        raise ValueError(f"beta must be 0 for method 'gd', got {beta!r}")
    return method, a, b


def _check_eigenvalues(eigenvalues: Any) -> np.ndarray:
    lam = as_float_array("eigenvalues", eigenvalues).astype(np.float64).ravel()
    if lam.size == 0:
        raise ValueError("eigenvalues must be non-empty")
    if np.any(lam < 0):
        raise ValueError(f"eigenvalues must be >= 0 (a convex quadratic), got min {lam.min()!r}")
    return lam


def characteristic_roots(method: str, alpha: float, beta: float, eigenvalues: Any) -> np.ndarray:
    """The two eigenvalues (complex) of the 2×2 iteration block for each Hessian eigenvalue.

    Returns an array of shape ``(len(eigenvalues), 2)``.
    """
    method, a, b = _check_method_params(method, alpha, beta)
    lam = _check_eigenvalues(eigenvalues)
    t = 1.0 - a * lam
    if method == "ag":
        s, p = (1.0 + b) * t, b * t
    else:  # hb, and gd as hb with beta = 0
        s, p = 1.0 + b - a * lam, np.full_like(lam, b)
    disc = np.sqrt((s * s - 4.0 * p).astype(np.complex128))
    return np.stack([(s + disc) / 2.0, (s - disc) / 2.0], axis=-1)


def momentum_rate(method: str, alpha: float, beta: float, eigenvalues: Any) -> float:
    r"""Spectral radius of the iteration matrix of ``method`` on a quadratic.

    Parameters
    ----------
    method : {"gd", "hb", "ag"}
    alpha : float
        Step size, > 0.
    beta : float
        Momentum in [0, 1) (must be 0 for ``"gd"``).
    eigenvalues : array_like
        Eigenvalues of the Hessian Q (>= 0). The worst case over :math:`[\mu, L]` for GD, HB and
        AG is attained at the ends, so ``[mu, L]`` gives the class rate.

    Returns
    -------
    float
        :math:`\rho(M) = \max_\lambda \max|z_\lambda|`; < 1 iff the iteration converges. For
        example with :func:`~async_spark.optim.momentum_parameters` and :math:`\kappa = L/\mu`:
        AG gives :math:`1 - 1/\sqrt\kappa`, HB :math:`(\sqrt\kappa-1)/(\sqrt\kappa+1)` and GD
        :math:`(\kappa-1)/(\kappa+1)`.
    """
    roots = characteristic_roots(method, alpha, beta, eigenvalues)
    return float(np.max(np.abs(roots)))


def iteration_matrix(method: str, Q: Any, alpha: float, beta: float) -> np.ndarray:
    r"""The 2d × 2d matrix M of :math:`\xi_{k+1} = M\xi_k - \alpha B w_{k+1}` (see module doc).

    ``Q`` must be a symmetric positive semidefinite (d, d) matrix.
    """
    method, a, b = _check_method_params(method, alpha, beta)
    Q = as_float_array("Q", Q).astype(np.float64)
    if Q.ndim != 2 or Q.shape[0] != Q.shape[1] or Q.shape[0] == 0:
        raise ValueError(f"Q must be a non-empty square matrix, got shape {Q.shape}")
    scale = max(float(np.max(np.abs(Q))), 1e-300)
    if not np.allclose(Q, Q.T, rtol=0.0, atol=1e-10 * scale):
        raise ValueError("Q must be symmetric")
    if float(np.linalg.eigvalsh(Q)[0]) < -1e-10 * scale:
        raise ValueError("Q must be positive semidefinite")
    d = Q.shape[0]
    eye = np.eye(d)
    if method == "ag":
        T = eye - a * Q
        top = np.hstack([(1.0 + b) * T, -b * T])
    else:
        top = np.hstack([(1.0 + b) * eye - a * Q, -b * eye])
    bottom = np.hstack([eye, np.zeros((d, d))])
    return np.vstack([top, bottom])

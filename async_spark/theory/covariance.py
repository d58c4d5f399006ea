r"""Stationary covariance and exact Gaussian law of GD/HB/AG iterates on noisy quadratics.

With additive i.i.d. gradient noise :math:`w_k` of covariance :math:`\Sigma_w`, the error state
:math:`\xi_k = (x_k - x^*, x_{k-1} - x^*)` of a momentum method on a quadratic follows the linear
recursion :math:`\xi_{k+1} = M\xi_k - \alpha B w_{k+1}`, :math:`B = [I; 0]`
(:func:`~async_spark.theory.rates.iteration_matrix`). When :math:`\rho(M) < 1` its stationary
covariance X is the unique solution of the discrete Lyapunov equation

.. math:: X = M X M^\top + \alpha^2 B \Sigma_w B^\top ,

and with Gaussian noise the invariant distribution is exactly :math:`\mathcal N(0, X)` for
:math:`\xi` (i.e. centred at :math:`(x^*, x^*)`), the law of :math:`\xi_k` from a Gaussian start
stays Gaussian with :math:`m_{k+1} = M m_k`, :math:`C_{k+1} = M C_k M^\top + \alpha^2 B\Sigma_w
B^\top`, and the 2-Wasserstein distance between the two is in closed form
(:func:`~async_spark.theory.wasserstein.w2_gaussian`). See Can, Gürbüzbalaban & Zhu (ICML 2019,
arXiv:1901.07445), the quadratic case.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg

from async_spark.optim._validate import as_float_array, check_positive
from async_spark.theory.rates import iteration_matrix

__all__ = ["noise_covariance", "stationary_covariance", "iterate_law"]


def noise_covariance(noise_cov: Any, d: int) -> np.ndarray:
    r"""The (d, d) noise covariance :math:`\Sigma_w` from a scalar, a diagonal or a matrix.

    A scalar ``s`` means :math:`s I` (variance ``s`` per coordinate, :math:`E\|w\|^2 = d s`);
    a vector of length d means a diagonal; a (d, d) matrix must be symmetric PSD.
    """
    S = as_float_array("noise_cov", noise_cov).astype(np.float64)
    if S.ndim == 0:
        if S < 0:
            raise ValueError(f"noise_cov must be >= 0, got {float(S)!r}")
        return float(S) * np.eye(d)
    if S.ndim == 1:
        if S.shape != (d,):
            raise ValueError(f"noise_cov as a diagonal must have length {d}, got {S.shape}")
        if np.any(S < 0):
            raise ValueError("noise_cov diagonal entries must be >= 0")
        return np.diag(S)
    if S.shape != (d, d):
        raise ValueError(f"noise_cov must be a scalar, (d,) or (d, d) with d={d}, got {S.shape}")
    scale = max(float(np.max(np.abs(S))), 1e-300)
    if not np.allclose(S, S.T, rtol=0.0, atol=1e-10 * scale):
        raise ValueError("noise_cov must be symmetric")
    if float(np.linalg.eigvalsh(S)[0]) < -1e-10 * scale:
        raise ValueError("noise_cov must be positive semidefinite")
    return 0.5 * (S + S.T)


def _system(
    method: str, Q: Any, alpha: float, beta: float, noise_cov: Any
) -> tuple[np.ndarray, np.ndarray]:
    M = iteration_matrix(method, Q, alpha, beta)
    d = M.shape[0] // 2
    S = noise_covariance(noise_cov, d)
    a = check_positive("alpha", alpha)
    W = np.zeros_like(M)
    W[:d, :d] = a * a * S
    return M, W


def stationary_covariance(
    method: str, Q: Any, alpha: float, beta: float, noise_cov: Any
) -> np.ndarray:
    r"""Stationary covariance of :math:`(x_k - x^*, x_{k-1} - x^*)`, a (2d, 2d) matrix.

    Solves :math:`X = M X M^\top + \alpha^2 B\Sigma_w B^\top` with
    ``scipy.linalg.solve_discrete_lyapunov``.

    Parameters
    ----------
    method : {"gd", "hb", "ag"}
    Q : (d, d) array
        Symmetric positive semidefinite Hessian.
    alpha, beta : float
        Step size > 0 and momentum in [0, 1) (0 for ``"gd"``).
    noise_cov : float, (d,) or (d, d) array
        Covariance of the additive gradient noise (see :func:`noise_covariance`).

    Returns
    -------
    X : (2d, 2d) ndarray
        Symmetric PSD; the top-left block is the stationary covariance of :math:`x_k`, so
        :math:`E_\pi\|x - x^*\|^2 = \operatorname{tr} X_{11}`.

    Raises
    ------
    ValueError
        Bad parameters, or :math:`\rho(M) \ge 1` (no stationary distribution).
    """
    M, W = _system(method, Q, alpha, beta, noise_cov)
    rho = float(np.max(np.abs(np.linalg.eigvals(M))))
    if rho >= 1.0:
        raise ValueError(
            f"alpha and beta give spectral radius {rho:.6g} >= 1 for this Q: the iteration "
            "diverges and has no stationary distribution (alpha must be smaller)"
        )
    X = scipy.linalg.solve_discrete_lyapunov(M, W)
    return np.asarray(0.5 * (X + X.T))


def iterate_law(
    method: str,
    Q: Any,
    alpha: float,
    beta: float,
    noise_cov: Any,
    mean0: Any,
    cov0: Any = None,
    steps: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    r"""The exact Gaussian law of :math:`\xi_k` for k = 0..steps.

    Parameters
    ----------
    mean0 : (2d,) or (d,) array
        Mean of :math:`\xi_0 - (x^*, x^*)`; a (d,) vector means :math:`x_{-1} = x_0` (the rules'
        start).
    cov0 : (2d, 2d) array, optional
        Covariance of :math:`\xi_0` (default 0: a deterministic start).

    Returns
    -------
    means : (steps + 1, 2d) ndarray
    covs : (steps + 1, 2d, 2d) ndarray
    """
    M, W = _system(method, Q, alpha, beta, noise_cov)
    n2 = M.shape[0]
    m = as_float_array("mean0", mean0).astype(np.float64).ravel()
    if m.shape == (n2 // 2,):
        m = np.concatenate([m, m])
    if m.shape != (n2,):
        raise ValueError(f"mean0 must have length {n2 // 2} or {n2}, got {m.shape}")
    C = np.zeros((n2, n2)) if cov0 is None else as_float_array("cov0", cov0).astype(np.float64)
    if C.shape != (n2, n2):
        raise ValueError(f"cov0 must have shape {(n2, n2)}, got {C.shape}")
    if int(steps) < 0:
        raise ValueError(f"steps must be >= 0, got {steps!r}")
    means = np.empty((int(steps) + 1, n2))
    covs = np.empty((int(steps) + 1, n2, n2))
    means[0], covs[0] = m, C
    for k in range(int(steps)):
        m = M @ m
        C = M @ C @ M.T + W
        means[k + 1], covs[k + 1] = m, C
    return means, covs

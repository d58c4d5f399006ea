r"""Wasserstein distances, and the AG noise bound and ball radius in the strongly convex case.

Distances
---------
- :func:`w2_gaussian`: closed form between Gaussians (Dowson & Landau 1982; Givens & Shortt 1984),

  .. math:: W_2^2(\mathcal N(m_1, S_1), \mathcal N(m_2, S_2)) = \|m_1 - m_2\|^2
            + \operatorname{tr}\big(S_1 + S_2 - 2 (S_2^{1/2} S_1 S_2^{1/2})^{1/2}\big).

- :func:`wasserstein_empirical` (and :func:`w1_empirical`, :func:`w2_empirical`): :math:`W_p`
  between two empirical measures with the same number n of equally weighted atoms. An optimal
  plan is then a permutation (Birkhoff–von Neumann), so :math:`W_p^p = \min_\sigma \frac1n
  \sum_i \|x_i - y_{\sigma(i)}\|^p`: exact by sorting in 1-D (the monotone coupling), exact by
  ``scipy.optimize.linear_sum_assignment`` in d-D (O(n³), so n is capped).

AG under noisy gradients (strongly convex f)
--------------------------------------------
Setting of Can, Gürbüzbalaban & Zhu, "Accelerated Linear Convergence of Stochastic Momentum
Methods in Wasserstein Distances" (ICML 2019, arXiv:1901.07445), strongly convex AG:

- **Assumptions.** f is μ-strongly convex and L-smooth, κ = L/μ; AG with α = 1/L and
  β = (√κ−1)/(√κ+1); the noise :math:`w_{k+1}` of :math:`\tilde\nabla f(y_k) = \nabla f(y_k) +
  w_{k+1}` has conditional mean zero and conditional second moment
  :math:`E[\|w_{k+1}\|^2 \mid \mathcal F_k] \le \sigma^2` (it may depend on :math:`y_k`).
- **Lyapunov function.** The analysis rests on the Lyapunov function of Hu & Lessard (2017),
  :math:`V(\xi_k) = \xi_k^\top (\tilde P\otimes I)\xi_k + f(x_k) - f^*` with
  :math:`\xi_k = (x_k - x^*, x_{k-1} - x^*)` and :math:`\tilde P = p p^\top`,
  :math:`p = (\sqrt{L/2},\ \sqrt{\mu/2} - \sqrt{L/2})`, which contracts by
  :math:`\rho = 1 - 1/\sqrt\kappa` per deterministic step. Under noise the two terms of V that
  are quadratic in :math:`x_{k+1} = y_k - \alpha(\nabla f(y_k) + w)` pick up
  :math:`\alpha^2 (L/2) \sigma^2` each (the :math:`\tilde P_{11} = L/2` block and the
  L-smoothness bound on :math:`f(x_{k+1})`), while the cross terms vanish in expectation:

  .. math:: E\,V(\xi_{k+1}) \le \rho\, E\,V(\xi_k) + \sigma^2/L, \qquad
            E[f(x_k) - f^*] \le E\,V(\xi_k) \le \rho^k V(\xi_0)
            + \frac{\sigma^2}{L}\frac{1-\rho^k}{1-\rho} \le \rho^k V(\xi_0) + \frac{\sqrt\kappa\,\sigma^2}{L}.

  (:func:`ag_lyapunov_bound`; the accelerated rate of the noiseless case is recovered at
  σ = 0.)
- **Ball radius.** For the unique invariant law π (its x-marginal :math:`\pi_x`), stationarity
  and strong convexity give :math:`E_\pi\|x - x^*\|^2 \le \frac{2}{\mu} E_\pi[f - f^*] \le
  \frac{2\sqrt\kappa\sigma^2}{\mu L}`, so :math:`W_1(\pi_x, \delta_{x^*}) \le W_2(\pi_x,
  \delta_{x^*}) \le r(\sigma) = \sqrt2\,\sigma\,\kappa^{3/4}/L` (:func:`ag_invariant_radius`), and
  by the triangle inequality

  .. math:: W_1(\nu_k, \pi_x) \le W_2(\nu_k, \pi_x) \le \sqrt{2V(\xi_0)/\mu}\;\rho^{k/2} + 2 r(\sigma):

  the law :math:`\nu_k` of :math:`x_k` reaches the ball of radius ε around π after
  :math:`k = O(\sqrt\kappa\log(1/\varepsilon))` iterations (:func:`ag_iterations`) as long as
  :math:`2 r(\sigma) \le \varepsilon/2`, i.e. the **noise bound**
  :math:`\sigma^2 \le \varepsilon^2 L^2 / (32\,\kappa^{3/2})` (:func:`ag_noise_bound`).

These are the paper's statements in form (accelerated linear rate to an ε-ball around the unique
invariant distribution in :math:`W_1`, under an explicit upper bound on the noise variance),
with constants derived above from the same Lyapunov function and checked numerically in the
tests (against the exact stationary law on quadratics and a simulation on a non-quadratic f).
The paper's own theorem states its constants for a coupling argument that also allows noise that
depends on the iterate; those exact constants were not available to transcribe here and are not
what these functions return.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from async_spark.optim._validate import (
    as_float_array,
    check_curvature,
    check_nonnegative,
    check_positive,
)

__all__ = [
    "sqrtm_psd",
    "w2_gaussian",
    "wasserstein_empirical",
    "w1_empirical",
    "w2_empirical",
    "ag_lyapunov_matrix",
    "ag_lyapunov_value",
    "ag_lyapunov_bound",
    "ag_invariant_radius",
    "ag_noise_bound",
    "ag_iterations",
]


# --------------------------------------------------------------------------------------- distances


def sqrtm_psd(A: Any) -> np.ndarray:
    """Symmetric square root of a symmetric PSD matrix (eigenvalues clipped at 0)."""
    A = np.asarray(A, dtype=np.float64)
    w, V = np.linalg.eigh(0.5 * (A + A.T))
    return np.asarray((V * np.sqrt(np.clip(w, 0.0, None))) @ V.T)


def _gaussian(name: str, mean: Any, cov: Any) -> tuple[np.ndarray, np.ndarray]:
    m = as_float_array(f"mean{name}", mean).astype(np.float64).ravel()
    S = as_float_array(f"cov{name}", cov).astype(np.float64)
    if S.ndim == 0 and m.size == 1:
        S = S.reshape(1, 1)
    if S.shape != (m.size, m.size):
        raise ValueError(f"cov{name} must have shape {(m.size, m.size)}, got {S.shape}")
    scale = max(float(np.max(np.abs(S))), 1e-300)
    if not np.allclose(S, S.T, rtol=0.0, atol=1e-9 * scale):
        raise ValueError(f"cov{name} must be symmetric")
    if float(np.linalg.eigvalsh(S)[0]) < -1e-9 * scale:
        raise ValueError(f"cov{name} must be positive semidefinite")
    return m, S


def w2_gaussian(mean1: Any, cov1: Any, mean2: Any, cov2: Any) -> float:
    r"""2-Wasserstein distance between :math:`\mathcal N(m_1, S_1)` and :math:`\mathcal N(m_2, S_2)`.

    Closed form (see module doc); singular covariances (point masses) are allowed.
    """
    m1, S1 = _gaussian("1", mean1, cov1)
    m2, S2 = _gaussian("2", mean2, cov2)
    if m1.shape != m2.shape:
        raise ValueError(f"mean1 and mean2 must have the same shape, got {m1.shape}, {m2.shape}")
    r2 = sqrtm_psd(S2)
    cross = sqrtm_psd(r2 @ S1 @ r2)
    bures = float(np.trace(S1) + np.trace(S2) - 2.0 * np.trace(cross))
    return math.sqrt(max(float(np.sum((m1 - m2) ** 2)) + bures, 0.0))


def wasserstein_empirical(x: Any, y: Any, p: float = 2.0, *, max_n: int = 2000) -> float:
    r""":math:`W_p` between the empirical measures of two samples of equal size n.

    Parameters
    ----------
    x, y : array (n,) or (n, d)
        Samples (rows are points).
    p : float >= 1
    max_n : int
        Largest n accepted in d > 1 (the assignment problem is O(n³) time, O(n²) memory).

    Returns
    -------
    float
        :math:`\big(\min_\sigma \frac1n\sum_i \|x_i - y_{\sigma(i)}\|^p\big)^{1/p}`.
    """
    p = check_positive("p", p)
    if p < 1.0:
        raise ValueError(f"p must be >= 1, got {p!r}")
    a = as_float_array("x", x).astype(np.float64)
    b = as_float_array("y", y).astype(np.float64)
    if a.ndim == 1:
        a = a[:, None]
    if b.ndim == 1:
        b = b[:, None]
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("x and y must be 1-D or 2-D arrays of points")
    if a.shape != b.shape:
        raise ValueError(f"x and y must have the same shape (equal size), got {a.shape}, {b.shape}")
    n, d = a.shape
    if n == 0:
        raise ValueError("x and y must be non-empty")
    if d == 1:
        cost = np.abs(np.sort(a[:, 0]) - np.sort(b[:, 0])) ** p
        return float(np.mean(cost) ** (1.0 / p))
    if n > max_n:
        raise ValueError(f"x and y must have at most max_n={max_n} points in d > 1, got {n}")
    diff = a[:, None, :] - b[None, :, :]
    C = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff)) ** p
    rows, cols = linear_sum_assignment(C)
    return float(np.mean(C[rows, cols]) ** (1.0 / p))


def w1_empirical(x: Any, y: Any, *, max_n: int = 2000) -> float:
    """:math:`W_1` between two equal-size samples (see :func:`wasserstein_empirical`)."""
    return wasserstein_empirical(x, y, 1.0, max_n=max_n)


def w2_empirical(x: Any, y: Any, *, max_n: int = 2000) -> float:
    """:math:`W_2` between two equal-size samples (see :func:`wasserstein_empirical`)."""
    return wasserstein_empirical(x, y, 2.0, max_n=max_n)


# ------------------------------------------------------------------------ AG: Lyapunov and bounds


def ag_lyapunov_matrix(mu: float, L: float) -> np.ndarray:
    r"""The 2×2 matrix :math:`\tilde P = p p^\top`, :math:`p = (\sqrt{L/2}, \sqrt{\mu/2} -
    \sqrt{L/2})`, of the Hu–Lessard Lyapunov function for AG (α = 1/L, β = (√κ−1)/(√κ+1))."""
    mu, L = check_curvature(mu, L)
    p = np.array([math.sqrt(L / 2.0), math.sqrt(mu / 2.0) - math.sqrt(L / 2.0)])
    return np.outer(p, p)


def ag_lyapunov_value(x: Any, x_prev: Any, x_star: Any, f_gap: Any, mu: float, L: float) -> Any:
    r""":math:`V = \|p_1 (x_k - x^*) + p_2 (x_{k-1} - x^*)\|^2 + f(x_k) - f^*` (last axis = d)."""
    mu, L = check_curvature(mu, L)
    p1, p2 = math.sqrt(L / 2.0), math.sqrt(mu / 2.0) - math.sqrt(L / 2.0)
    z = p1 * (np.asarray(x) - x_star) + p2 * (np.asarray(x_prev) - x_star)
    return np.sum(z * z, axis=-1) + np.asarray(f_gap)


def ag_lyapunov_bound(k: Any, mu: float, L: float, sigma2: float, v0: float) -> Any:
    r"""Bound on :math:`E\,V(\xi_k)`, hence on :math:`E[f(x_k)] - f^*`, for stochastic AG.

    :math:`\rho^k V_0 + \frac{\sigma^2}{L}\frac{1-\rho^k}{1-\rho}` with
    :math:`\rho = 1 - 1/\sqrt\kappa` (module doc: assumptions and derivation). ``k`` may be an
    array; ``sigma2`` bounds :math:`E\|w\|^2` (the total, not per coordinate).
    """
    mu, L = check_curvature(mu, L)
    sigma2 = check_nonnegative("sigma2", sigma2)
    v0 = check_nonnegative("v0", v0)
    kk = np.asarray(k, dtype=np.float64)
    if np.any(kk < 0):
        raise ValueError("k must be >= 0")
    rho = 1.0 - 1.0 / math.sqrt(L / mu)
    rk = rho**kk
    if rho == 0.0:  # kappa = 1: one step lands on x* up to noise
        geo = np.where(kk > 0, 1.0, 0.0)
    else:
        geo = (1.0 - rk) / (1.0 - rho)
    return rk * v0 + sigma2 / L * geo


def ag_invariant_radius(mu: float, L: float, sigma2: float) -> float:
    r"""Radius :math:`r(\sigma) = \sqrt{2\sqrt\kappa\,\sigma^2/(\mu L)} = \sqrt2\,\sigma\kappa^{3/4}/L`
    of the :math:`W_2` (hence :math:`W_1`) ball around :math:`\delta_{x^*}` that holds the
    x-marginal of AG's invariant distribution (module doc)."""
    mu, L = check_curvature(mu, L)
    sigma2 = check_nonnegative("sigma2", sigma2)
    return math.sqrt(2.0 * math.sqrt(L / mu) * sigma2 / (mu * L))


def ag_noise_bound(mu: float, L: float, epsilon: float) -> float:
    r"""Largest noise variance :math:`\sigma^2 = \varepsilon^2 L^2 / (32\kappa^{3/2})` for which
    AG's iterates reach the ε-ball (in :math:`W_1` and :math:`W_2`) around the invariant
    distribution, i.e. :math:`2 r(\sigma) \le \varepsilon / 2` (module doc)."""
    mu, L = check_curvature(mu, L)
    epsilon = check_positive("epsilon", epsilon)
    kappa = L / mu
    return epsilon**2 * L**2 / (32.0 * kappa**1.5)


def ag_iterations(mu: float, L: float, v0: float, epsilon: float) -> int:
    r"""Iterations after which :math:`\sqrt{2V_0/\mu}\,\rho^{k/2} \le \varepsilon/2`, so that
    :math:`W_2(\nu_k, \pi_x) \le \varepsilon` when σ² is below :func:`ag_noise_bound`:
    :math:`k = \lceil 2\log(2\sqrt{2V_0/\mu}/\varepsilon) / \log(1/\rho)\rceil =
    O(\sqrt\kappa \log(1/\varepsilon))`."""
    mu, L = check_curvature(mu, L)
    v0 = check_nonnegative("v0", v0)
    epsilon = check_positive("epsilon", epsilon)
    start = math.sqrt(2.0 * v0 / mu)
    if start <= epsilon / 2.0:
        return 0
    rho = 1.0 - 1.0 / math.sqrt(L / mu)
    if rho == 0.0:
        return 1
    return int(math.ceil(2.0 * math.log(2.0 * start / epsilon) / -math.log(rho)))

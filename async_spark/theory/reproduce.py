r"""Reproduction of the stochastic momentum paper's claims with many independent chains.

Can, Gürbüzbalaban & Zhu, "Accelerated Linear Convergence of Stochastic Momentum Methods in
Wasserstein Distances" (ICML 2019, arXiv:1901.07445). Every chain runs the library's own update
rules (:mod:`async_spark.optim.momentum`) on a stack of iterates of shape ``(chains, d)``; the
theory side comes from :mod:`async_spark.theory`. Nothing is fitted to the theory: the measured
figures come from the chains alone, and theory is used only to size the runs.

(a) **Contraction rate.** Quadratics :math:`f(x) = \frac12 (x-x^*)^\top Q (x-x^*)` with
    :math:`\kappa \in \{10, 100, 1000\}` (L = 1, μ = 1/κ, eigenvalues log-spaced in [μ, L],
    random rotation), Gaussian gradient noise with :math:`E\|w\|^2 = \sigma^2`,
    :math:`\sigma \in \{0, 0.1, 1\}`, GD/HB/AG with the tuned (α, β) of
    :func:`~async_spark.optim.momentum_parameters`. "Rate" chains start together far from
    :math:`x^*`; their law :math:`\nu_k` is Gaussian, so :math:`W_2(\nu_k, \pi)` is computed in
    closed form between the empirical mean/covariance of the chains at step k and the empirical
    invariant law (the "stationary" chains below). The rate is the fitted decay of
    :math:`\log W_2` (with a :math:`\log k` term when the theory has a double root, i.e. a
    :math:`k\rho^k` transient) over the window between the first decade and 30× the estimation
    floor, and is compared with :func:`~async_spark.theory.momentum_rate`.
(b) **Stationary covariance.** "Stationary" chains start at :math:`x^*`, run past the
    covariance transient, and the covariance of :math:`(x_k - x^*, x_{k-1} - x^*)` averaged over
    chains and steps is compared with :func:`~async_spark.theory.stationary_covariance`
    (relative Frobenius error).
(c) GD vs HB vs AG side by side: rates and stationary spread :math:`E\|x - x^*\|^2`.
(d) L2-regularized logistic regression on scikit-learn's bundled breast_cancer data
    (standardized), with additive gradient noise: the spread of AG's iterates around
    :math:`w^*` for σ ∈ {0, 0.1, 1} and α ∈ {1/(4L), 1/(2L), 1/L} against the Lyapunov solution
    for the Hessian at :math:`w^*` and, at α = 1/L, against the Lyapunov bound of
    :func:`~async_spark.theory.ag_lyapunov_bound` (L and μ estimated from the data with
    :func:`~async_spark.optim.estimate_curvature`).
(e) Weakly convex: least squares with a rank-deficient design (a diagonal CSR design with a
    null space, whose nonzero spectrum accumulates at 0), GD (α = 1/L) against AG with
    β_k = k/(k+3); and APG against projected GD on the same objective over a Euclidean ball that
    cuts off the minimizers. The log-log slope of the expected suboptimality over a window
    (−1 expected for GD, −2 for AG/APG) and the noise floor it meets for σ > 0.

``async-spark momentum [--quick] [--out DIR] [--seed S]`` runs it (:mod:`async_spark.cli.momentum`).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import brentq

from async_spark.optim.momentum import (
    UpdateRule,
    accelerated_projected_gradient,
    heavy_ball,
    momentum_rule,
    nesterov,
)
from async_spark.optim.parameters import estimate_curvature, momentum_parameters
from async_spark.optim.projections import Ball
from async_spark.theory.covariance import stationary_covariance
from async_spark.theory.rates import characteristic_roots, momentum_rate
from async_spark.theory.wasserstein import ag_lyapunov_bound, w2_gaussian

__all__ = ["ReproductionConfig", "run_reproduction"]

KAPPAS = (10, 100, 1000)
SIGMAS = (0.0, 0.1, 1.0)
METHODS = ("gd", "hb", "ag")


@dataclass(frozen=True)
class ReproductionConfig:
    """Sizes of the experiments (``quick`` shrinks them to run in seconds)."""

    d: int = 8
    rate_chains: int = 1000
    cov_chains: int = 4000
    rate_decades: float = 7.0
    rate_step_cap: int = 12000
    cov_relaxations: float = 40.0
    cov_step_cap: int = 20000
    logistic_chains: int = 128
    logistic_relaxations: float = 40.0
    weak_rank: int = 4000
    weak_null: int = 1000
    weak_chains: int = 16
    weak_steps: int = 1000

    @staticmethod
    def quick() -> ReproductionConfig:
        return ReproductionConfig(
            d=6,
            rate_chains=200,
            cov_chains=1000,
            rate_decades=6.0,
            rate_step_cap=3000,
            cov_relaxations=6.0,
            cov_step_cap=3000,
            logistic_chains=16,
            logistic_relaxations=6.0,
            weak_rank=1000,
            weak_null=200,
            weak_chains=8,
            weak_steps=300,
        )


# ---------------------------------------------------------------------------------------- helpers


def _x_of(method: str, params: np.ndarray, state: Any) -> np.ndarray:
    """The theory's iterate x_k: params for heavy ball / GD, state.x for AG and APG."""
    return params if method in ("gd", "hb") else state.x


def _has_double_root(method: str, alpha: float, beta: float, lam: np.ndarray) -> bool:
    """Whether the root of largest modulus is (numerically) repeated, i.e. a k*rho^k transient."""
    if method == "gd":
        return False
    roots = characteristic_roots(method, alpha, beta, lam)
    mod = np.abs(roots)
    top = float(mod.max())
    i = int(np.argmax(mod.max(axis=1)))
    return bool(abs(roots[i, 0] - roots[i, 1]) <= 1e-4 * max(top, 1e-12))


def _fit_rate(w2: np.ndarray, ks: np.ndarray, jordan: bool) -> float:
    """Fit log w2_k = c + p log k + k log rho (p only with ``jordan``); return rho."""
    cols = [np.ones_like(ks, dtype=np.float64), ks.astype(np.float64)]
    if jordan:
        cols.insert(1, np.log(ks.astype(np.float64)))
    A = np.stack(cols, axis=1)
    coef, *_ = np.linalg.lstsq(A, np.log(w2), rcond=None)
    return float(math.exp(coef[-1]))


def _quadratic(kappa: float, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    lam = np.geomspace(1.0 / kappa, 1.0, d)
    U, _ = np.linalg.qr(rng.standard_normal((d, d)))
    Q = (U * lam) @ U.T
    return 0.5 * (Q + Q.T), lam


# ------------------------------------------------------------------------------ (a)(b)(c) quadratics


def _quadratic_cell(
    kappa: float, sigma: float, method: str, cfg: ReproductionConfig, rng: np.random.Generator
) -> dict[str, Any]:
    d = cfg.d
    L, mu = 1.0, 1.0 / kappa
    Q, lam = _quadratic(kappa, d, rng)
    x_star = rng.standard_normal(d)
    alpha, beta = momentum_parameters(method, mu, L)
    rho = momentum_rate(method, alpha, beta, lam)
    rule = momentum_rule(method, mu, L)
    noise_var = sigma**2 / d  # per coordinate: E||w||^2 = sigma^2

    # Run lengths from the theoretical rate (sizing only).
    neglog = -math.log(rho)
    jordan = _has_double_root(method, alpha, beta, lam)
    k_rate = min(cfg.rate_step_cap, int(math.ceil(cfg.rate_decades * math.log(10) / neglog)) + 5)
    # Covariance transient ~ (k^j rho^k)^2 with j = 1 for a double root: run it below ~e^-8.
    burn_exponent = 4.0 + (2.0 * math.log(1.0 / neglog) if jordan else 0.0)
    burn = min(cfg.cov_step_cap, int(math.ceil(burn_exponent / neglog)) + 20)
    collect = min(cfg.cov_step_cap, int(math.ceil(cfg.cov_relaxations / (1.0 - rho))) + 50)
    steps = max(k_rate, burn + collect)

    nr, nc = cfg.rate_chains, cfg.cov_chains
    # Rate chains start at x* + R u, u with equal weight on every eigendirection of Q.
    R = 1e6
    u = np.linalg.qr(rng.standard_normal((d, d)))[0].sum(axis=1)
    u /= np.linalg.norm(u)
    params = np.vstack([np.tile(x_star + R * u, (nr, 1)), np.tile(x_star, (nc, 1))])
    state = rule.init(params)
    x_prev = params.copy()

    rate_mean = np.empty((k_rate + 1, d))
    rate_cov = np.empty((k_rate + 1, d, d))
    rate_mean[0], rate_cov[0] = x_star + R * u, np.zeros((d, d))
    s1 = np.zeros(2 * d)
    s2 = np.zeros((2 * d, 2 * d))
    count = 0
    t0 = time.perf_counter()
    for k in range(steps):
        noise = rng.standard_normal(params.shape) * math.sqrt(noise_var) if sigma > 0 else 0.0
        grad = (params - x_star) @ Q + noise
        params, state = rule.update(grad, state, params)
        x = _x_of(method, params, state)
        if k + 1 <= k_rate:
            xr = x[:nr]
            rate_mean[k + 1] = xr.mean(axis=0)
            rate_cov[k + 1] = np.cov(xr, rowvar=False) if sigma > 0 else 0.0
        if k >= burn:
            xi = np.hstack([x[nr:], x_prev[nr:]]) - np.concatenate([x_star, x_star])
            s1 += xi.sum(axis=0)
            s2 += xi.T @ xi
            count += xi.shape[0]
        x_prev = x
    seconds = time.perf_counter() - t0

    # (b) stationary covariance of (x_k - x*, x_{k-1} - x*), chains x steps.
    mean_xi = s1 / count
    cov_emp = s2 / count - np.outer(mean_xi, mean_xi)
    X = stationary_covariance(method, Q, alpha, beta, noise_var)
    if sigma > 0:
        cov_err: float | None = float(np.linalg.norm(cov_emp - X) / np.linalg.norm(X))
    else:
        cov_err = None  # the invariant law is the point mass at (x*, x*)
    spread_theory = float(np.trace(X[:d, :d]))
    spread_emp = float(np.trace(cov_emp[:d, :d]) + mean_xi[:d] @ mean_xi[:d])

    # (a) W2(nu_k, pi) against the empirical invariant law, and the fitted rate.
    pi_mean = x_star + mean_xi[:d]
    pi_cov = cov_emp[:d, :d] if sigma > 0 else np.zeros((d, d))
    every = max(1, k_rate // 400)
    ks = np.arange(0, k_rate + 1, every)
    w2 = np.array([w2_gaussian(rate_mean[k], rate_cov[k], pi_mean, pi_cov) for k in ks])
    if sigma > 0:
        floor = math.sqrt(max(spread_emp, 0.0) * (d + 1) / nr)
    else:
        floor = 1e-10 * R
    start = int(np.argmax(w2 <= 0.1 * w2[0]))  # skip the first decade (transient)
    above = w2 >= 30.0 * floor
    end = int(np.argmin(above)) if not above.all() else ks.size
    window = np.arange(max(start, 1), end)
    rate_meas: float | None = None
    rel, log_rel = float("nan"), None
    if window.size >= 5:
        fitted = _fit_rate(w2[window], ks[window], jordan)
        rate_meas = fitted
        rel = abs(fitted - rho) / rho
        log_rel = abs(math.log(fitted) - math.log(rho)) / abs(math.log(rho))
    return {
        "kappa": kappa,
        "sigma": sigma,
        "method": method,
        "alpha": alpha,
        "beta": beta,
        "rate_theory": rho,
        "rate_measured": rate_meas,
        "rate_rel_err": rel,
        "log_rate_rel_err": log_rel,
        "fit_window": [int(ks[window[0]]), int(ks[window[-1]])] if window.size else None,
        "fit_model": "c + p log k + k log rho" if jordan else "c + k log rho",
        "cov_rel_frobenius": cov_err,
        "spread_theory": spread_theory,
        "spread_measured": spread_emp,
        "chains": {"rate": nr, "stationary": nc},
        "steps": steps,
        "burn_in": burn,
        "seconds": seconds,
        "w2_curve": w2.tolist(),
        "w2_curve_every": every,
    }


# ------------------------------------------------------------------------------- (d) logistic


def _breast_cancer() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    X = np.asarray(data.data, dtype=np.float64)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    y = np.where(np.asarray(data.target) == 1, 1.0, -1.0)
    return X, y


def _logistic(
    X: np.ndarray, y: np.ndarray, l2: float
) -> tuple[Any, Any, np.ndarray, float, np.ndarray]:
    n = X.shape[0]

    def value(W: np.ndarray) -> np.ndarray:
        m = (W @ X.T) * y
        return np.logaddexp(0.0, -m).mean(axis=-1) + 0.5 * l2 * np.sum(W * W, axis=-1)

    def grad(W: np.ndarray) -> np.ndarray:
        m = (W @ X.T) * y
        s = 0.5 * (1.0 - np.tanh(0.5 * m))  # sigmoid(-m), stable
        return -((s * y) @ X) / n + l2 * W

    # w* by Newton's method (the objective is smooth and l2-strongly convex).
    w = np.zeros(X.shape[1])
    for _ in range(50):
        g = grad(w)
        m = (X @ w) * y
        p = 0.5 * (1.0 + np.tanh(0.5 * m))
        H = (X.T * (p * (1 - p))) @ X / n + l2 * np.eye(X.shape[1])
        step = np.linalg.solve(H, g)
        w = w - step
        if float(np.linalg.norm(step)) < 1e-14 * max(1.0, float(np.linalg.norm(w))):
            break
    m = (X @ w) * y
    p = 0.5 * (1.0 + np.tanh(0.5 * m))
    H = (X.T * (p * (1 - p))) @ X / n + l2 * np.eye(X.shape[1])
    return value, grad, w, float(value(w)), 0.5 * (H + H.T)


def _logistic_experiment(cfg: ReproductionConfig, rng: np.random.Generator) -> dict[str, Any]:
    X, y = _breast_cancer()
    n, d = X.shape
    l2 = 1e-2
    curv = estimate_curvature(X, l2, loss="logistic")
    L, mu = curv.L, curv.mu
    _, beta = momentum_parameters("ag", mu, L)
    value, grad, w_star, f_star, H = _logistic(X, y, l2)
    hess_eigs = np.linalg.eigvalsh(H)
    rows = []
    for sigma in SIGMAS:
        for frac in (0.25, 0.5, 1.0):
            alpha = frac / L
            rho_lin = momentum_rate("ag", alpha, beta, hess_eigs)
            X_lin = stationary_covariance("ag", H, alpha, beta, sigma**2 / d)
            spread_theory = float(np.trace(X_lin[:d, :d]))
            chains = cfg.logistic_chains if sigma > 0 else 1
            burn = int(math.ceil(6.0 / -math.log(rho_lin))) + 20
            collect = int(math.ceil(cfg.logistic_relaxations / (1.0 - rho_lin))) + 50
            rule = nesterov(alpha, beta)
            params = np.tile(w_star, (chains, 1))
            state = rule.init(params)
            acc_spread, acc_gap, count = 0.0, 0.0, 0
            for k in range(burn + collect):
                noise = rng.standard_normal(params.shape) * (sigma / math.sqrt(d))
                params, state = rule.update(grad(params) + noise, state, params)
                if k >= burn and (k - burn) % 4 == 0:  # every 4th step: f is costly
                    diff = state.x - w_star
                    acc_spread += float(np.sum(diff * diff))
                    acc_gap += float(np.sum(value(state.x) - f_star))
                    count += chains
            spread = acc_spread / count
            gap = acc_gap / count
            row: dict[str, Any] = {
                "sigma": sigma,
                "alpha_times_L": frac,
                "alpha": alpha,
                "beta": beta,
                "rate_linearized": rho_lin,
                "spread_measured": spread,
                "spread_theory_linearized": spread_theory,
                "spread_ratio": spread / spread_theory if spread_theory > 0 else None,
                "suboptimality_measured": gap,
                "steps": burn + collect,
                "chains": chains,
            }
            if frac == 1.0:
                row["suboptimality_lyapunov_bound"] = float(
                    ag_lyapunov_bound(np.inf, mu, L, sigma**2, 0.0)
                )
            rows.append(row)
    return {
        "dataset": "sklearn breast_cancer (569 x 30, standardized)",
        "l2": l2,
        "L_estimated": L,
        "mu": mu,
        "kappa": L / mu,
        "power_iteration_converged": curv.converged,
        "hessian_eigs_at_optimum": [float(hess_eigs[0]), float(hess_eigs[-1])],
        "rows": rows,
    }


# --------------------------------------------------------------------- (e) weakly convex and APG


def _weak_problem(
    cfg: ReproductionConfig,
) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray, np.ndarray, float]:
    """Rank-deficient least squares f(w) = ||Xw - y||^2 / (2n) with X = sqrt(n) diag(sqrt(lam)).

    The nonzero Gram eigenvalues lam_i = L (i/r)^2 and the initial error c_i ~ lam_i^(-1/4) make
    the measure lam c^2 dN(lam) flat near 0: the regime where GD's suboptimality decays as 1/k
    and Nesterov's as 1/k^2 (until the smallest eigenvalue is resolved).
    """
    r, z = cfg.weak_rank, cfg.weak_null
    d = r + z
    L = 1.0
    lam = np.zeros(d)
    lam[:r] = L * (np.arange(1, r + 1) / r) ** 2
    c = np.zeros(d)
    c[:r] = lam[:r] ** -0.25
    c *= math.sqrt(2.0 / float(np.sum(lam * c * c)))  # f(0) - f* = 1
    n = d
    X = sp.diags(np.sqrt(n * lam)).tocsr()
    y = X @ c
    return X, y, lam, c, L


def _run_weak(
    rule: UpdateRule,
    method: str,
    grad: Any,
    value: Any,
    x0: np.ndarray,
    chains: int,
    steps: int,
    sigma: float,
    rng: np.random.Generator,
) -> np.ndarray:
    d = x0.size
    params = np.tile(x0, (chains, 1))
    state = rule.init(params)
    gaps = np.empty(steps + 1)
    gaps[0] = float(np.mean(value(_x_of(method, params, state))))
    for k in range(steps):
        g = grad(params)
        if sigma > 0:
            g = g + rng.standard_normal(params.shape) * (sigma / math.sqrt(d))
        params, state = rule.update(g, state, params)
        gaps[k + 1] = float(np.mean(value(_x_of(method, params, state))))
    return gaps


def _slope(gaps: np.ndarray, lo: int, hi: int) -> float:
    ks = np.arange(lo, hi + 1)
    A = np.stack([np.ones(ks.size), np.log(ks)], axis=1)
    coef, *_ = np.linalg.lstsq(A, np.log(gaps[lo : hi + 1]), rcond=None)
    return float(coef[1])


def _weak_experiment(cfg: ReproductionConfig, rng: np.random.Generator) -> dict[str, Any]:
    X, y, lam, c, L = _weak_problem(cfg)
    n = X.shape[0]
    XT = X.T.tocsr()

    def grad(W: np.ndarray) -> np.ndarray:
        return np.asarray((XT @ (X @ W.T - y[:, None])).T) / n

    def f(W: np.ndarray) -> np.ndarray:
        return 0.5 * np.sum(lam * (W - c) ** 2, axis=-1)  # f - f*, f* = 0

    def nesterov_beta(k: int) -> float:
        return k / (k + 3.0)

    steps = cfg.weak_steps
    lo, hi = 10, max(20, steps // 3)
    x0 = np.zeros(lam.size)
    out: dict[str, Any] = {
        "design": f"diagonal CSR, rank {cfg.weak_rank} of {lam.size}, eigenvalues L (i/r)^2",
        "steps": steps,
        "slope_window": [lo, hi],
        "unconstrained": {},
        "ball": {},
    }
    sigmas = (0.0, 0.01, 0.1)
    for sigma in sigmas:
        chains = cfg.weak_chains if sigma > 0 else 1
        runs = {
            "gd": _run_weak(heavy_ball(1.0 / L, 0.0), "gd", grad, f, x0, chains, steps, sigma, rng),
            "ag": _run_weak(
                nesterov(1.0 / L, nesterov_beta), "ag", grad, f, x0, chains, steps, sigma, rng
            ),
        }
        out["unconstrained"][str(sigma)] = {
            m: {
                "slope": _slope(g, lo, hi) if sigma == 0 else None,
                "gap_final": float(g[-1]),
                "gap_min": float(g.min()),
                "gap_curve": g[:: max(1, steps // 150)].tolist(),
            }
            for m, g in runs.items()
        }

    # APG over the ball ||w|| <= R that excludes the minimizer c.
    radius = 0.9 * float(np.linalg.norm(c))

    def norm_w(nu: float) -> float:
        return float(np.linalg.norm(lam * c / (lam + nu))) - radius

    nu = brentq(norm_w, 1e-14, 1e6, xtol=1e-300, rtol=1e-14)
    w_con = lam * c / (lam + nu)
    f_con = float(f(w_con))
    ball = Ball(radius)

    def f_gap(W: np.ndarray) -> np.ndarray:
        return f(W) - f_con

    out["ball"]["radius"] = radius
    out["ball"]["multiplier"] = nu
    for sigma in sigmas:
        chains = cfg.weak_chains if sigma > 0 else 1
        runs = {
            "projected_gd": _run_weak(
                accelerated_projected_gradient(1.0 / L, 0.0, ball),
                "apg",
                grad,
                f_gap,
                x0,
                chains,
                steps,
                sigma,
                rng,
            ),
            "apg": _run_weak(
                accelerated_projected_gradient(1.0 / L, nesterov_beta, ball),
                "apg",
                grad,
                f_gap,
                x0,
                chains,
                steps,
                sigma,
                rng,
            ),
        }
        out["ball"][str(sigma)] = {
            m: {
                "slope": _slope(g, lo, hi) if sigma == 0 else None,
                "gap_final": float(g[-1]),
                "gap_min": float(g.min()),
                "gap_curve": g[:: max(1, steps // 150)].tolist(),
            }
            for m, g in runs.items()
        }
    out["curve_every"] = max(1, steps // 150)
    return out


# ------------------------------------------------------------------------------------ reporting


def _fmt(v: Any, spec: str = ".4f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def _print_tables(fig: dict[str, Any]) -> None:
    print(
        "(a)-(c) quadratics: rate = spectral radius vs fitted W2 decay; covariance rel. Frobenius"
    )
    hdr = (
        f"{'kappa':>6} {'sigma':>5} {'meth':>4} {'rho_theory':>10} {'rho_meas':>10} "
        f"{'err_rho':>8} {'err_logrho':>10} {'cov_err':>8} {'spread_th':>10} {'spread_ms':>10}"
    )
    print(hdr)
    for r in fig["quadratic"]:
        print(
            f"{r['kappa']:>6} {r['sigma']:>5} {r['method']:>4} {r['rate_theory']:>10.6f} "
            f"{_fmt(r['rate_measured'], '.6f'):>10} {_fmt(r['rate_rel_err'], '.2%'):>8} "
            f"{_fmt(r['log_rate_rel_err'], '.2%'):>10} {_fmt(r['cov_rel_frobenius'], '.2%'):>8} "
            f"{r['spread_theory']:>10.4g} {r['spread_measured']:>10.4g}"
        )
    lg = fig["logistic"]
    print(
        f"\n(d) logistic regression, {lg['dataset']}, l2={lg['l2']}, L~{lg['L_estimated']:.4f}, "
        f"kappa~{lg['kappa']:.1f}: AG spread E||x-w*||^2"
    )
    print(
        f"{'sigma':>5} {'alpha*L':>7} {'spread_ms':>10} {'spread_lin':>10} {'ratio':>6} "
        f"{'E f-f*':>10} {'bound':>10}"
    )
    for r in lg["rows"]:
        print(
            f"{r['sigma']:>5} {r['alpha_times_L']:>7} {r['spread_measured']:>10.4g} "
            f"{r['spread_theory_linearized']:>10.4g} {_fmt(r['spread_ratio'], '.3f'):>6} "
            f"{r['suboptimality_measured']:>10.4g} "
            f"{_fmt(r.get('suboptimality_lyapunov_bound'), '.4g'):>10}"
        )
    wk = fig["weakly_convex"]
    print(
        f"\n(e) weakly convex ({wk['design']}); log-log slope of E f - f* on k in "
        f"{wk['slope_window']} (sigma=0), final and minimal gap per sigma"
    )
    for part in ("unconstrained", "ball"):
        for sigma_key, runs in wk[part].items():
            if not isinstance(runs, dict) or sigma_key in ("radius", "multiplier"):
                continue
            for m, r in runs.items():
                print(
                    f"  {part:>13} sigma={sigma_key:<5} {m:>12}: slope {_fmt(r['slope'], '.3f'):>7}"
                    f"  final {r['gap_final']:.3e}  min {r['gap_min']:.3e}"
                )


# ------------------------------------------------------------------------------------------ entry


def run_reproduction(
    out_dir: str | os.PathLike[str] | None = None,
    quick: bool = False,
    seed: int = 0,
    plot: Callable[[dict[str, Any], str], list[str]] | None = None,
) -> dict[str, Any]:
    """Run (a)–(e), print a table, and write ``figures.json`` (and plots) into ``out_dir``.

    Parameters
    ----------
    out_dir : path, optional
        Where to write ``figures.json`` and the plots.
    plot : callable, optional
        ``plot(figures, out_dir)`` draws the figures and returns the files it wrote (listed
        under ``plots`` in ``figures.json``), e.g.
        :func:`async_spark.reporting.momentum.plot_reproduction` (what ``async-spark momentum``
        passes); default: no plots (this module draws nothing).
    quick : bool
        Smaller runs (seconds); the figures are noisier.
    seed : int
        Seed of every random draw (problems, noise).

    Returns
    -------
    dict
        ``{"config", "quadratic": [cell...], "logistic", "weakly_convex", "summary",
        "seconds"}``; every number is measured by the run.
    """
    cfg = ReproductionConfig.quick() if quick else ReproductionConfig()
    t0 = time.perf_counter()
    seq = np.random.SeedSequence(seed)
    streams = iter(seq.spawn(len(KAPPAS) * len(SIGMAS) * len(METHODS) + 2))
    quad = []
    for kappa in KAPPAS:
        for sigma in SIGMAS:
            for method in METHODS:
                rng = np.random.default_rng(next(streams))
                quad.append(_quadratic_cell(kappa, sigma, method, cfg, rng))
    logistic = _logistic_experiment(cfg, np.random.default_rng(next(streams)))
    weak = _weak_experiment(cfg, np.random.default_rng(next(streams)))
    rate_errs = [r["log_rate_rel_err"] for r in quad if r["log_rate_rel_err"] is not None]
    cov_errs = [r["cov_rel_frobenius"] for r in quad if r["cov_rel_frobenius"] is not None]
    fig: dict[str, Any] = {
        "paper": "Can, Gurbuzbalaban & Zhu, ICML 2019, arXiv:1901.07445",
        "config": {**asdict(cfg), "quick": quick, "seed": seed},
        "quadratic": quad,
        "logistic": logistic,
        "weakly_convex": weak,
        "summary": {
            "max_rate_rel_err": max(r["rate_rel_err"] for r in quad),
            "max_log_rate_rel_err": max(rate_errs) if rate_errs else None,
            "max_cov_rel_frobenius": max(cov_errs) if cov_errs else None,
            "cells_rate_within_5pct": sum(
                r["rate_rel_err"] <= 0.05 for r in quad if r["rate_measured"] is not None
            ),
            "cells_log_rate_within_5pct": sum(e <= 0.05 for e in rate_errs),
            "cells_cov_within_5pct": sum(e <= 0.05 for e in cov_errs),
            "cells": len(quad),
        },
    }
    fig["seconds"] = time.perf_counter() - t0
    _print_tables(fig)
    s = fig["summary"]
    print(
        f"\nsummary: max |rho_meas - rho|/rho = {s['max_rate_rel_err']:.2%}, "
        f"max |log rho_meas - log rho|/|log rho| = {_fmt(s['max_log_rate_rel_err'], '.2%')}, "
        f"max covariance error = {_fmt(s['max_cov_rel_frobenius'], '.2%')}, "
        f"{fig['seconds']:.1f} s"
    )
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        fig["plots"] = [] if plot is None else plot(fig, str(out_dir))
        with open(os.path.join(out_dir, "figures.json"), "w") as fh:
            json.dump(fig, fh, indent=1)
    return fig

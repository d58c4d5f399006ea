"""Wasserstein distances on known cases; the AG Lyapunov bounds against exact laws and simulation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from async_spark.optim import momentum_parameters
from async_spark.theory import (
    ag_invariant_radius,
    ag_iterations,
    ag_lyapunov_bound,
    ag_lyapunov_matrix,
    ag_lyapunov_value,
    ag_noise_bound,
    iteration_matrix,
    stationary_covariance,
    w1_empirical,
    w2_empirical,
    w2_gaussian,
    wasserstein_empirical,
)

rng = np.random.default_rng(0)


def test_w2_gaussian_known_cases():
    # 1-D: sqrt((m1 - m2)^2 + (s1 - s2)^2)
    assert w2_gaussian([1.0], [[4.0]], [-2.0], [[9.0]]) == pytest.approx(math.sqrt(9 + 1))
    # commuting covariances: ||m1 - m2||^2 + ||S1^1/2 - S2^1/2||_F^2
    S1, S2 = np.diag([1.0, 4.0]), np.diag([9.0, 0.25])
    assert w2_gaussian([0, 0], S1, [3, 4], S2) == pytest.approx(math.sqrt(25 + 4 + 2.25))
    # identical laws, symmetry, point masses
    A = rng.normal(size=(3, 3))
    S = A @ A.T
    B = rng.normal(size=(3, 3))
    T = B @ B.T
    assert w2_gaussian(np.ones(3), S, np.ones(3), S) == pytest.approx(0.0, abs=1e-6)
    assert w2_gaussian(np.zeros(3), S, np.ones(3), T) == pytest.approx(
        w2_gaussian(np.ones(3), T, np.zeros(3), S), rel=1e-9
    )
    assert w2_gaussian([0, 0], np.zeros((2, 2)), [3, 4], np.zeros((2, 2))) == pytest.approx(5.0)


def test_w2_gaussian_is_a_lower_bound_attained_by_the_optimal_map():
    """Samples pushed by the optimal linear map have that squared cost on average."""
    A = rng.normal(size=(2, 2))
    S1 = A @ A.T + 0.1 * np.eye(2)
    S2 = np.diag([2.0, 0.5])
    from async_spark.theory import sqrtm_psd

    r1 = sqrtm_psd(S1)
    r1i = np.linalg.inv(r1)
    T = r1i @ sqrtm_psd(r1 @ S2 @ r1) @ r1i  # optimal map N(0,S1) -> N(0,S2)
    z = rng.multivariate_normal(np.zeros(2), S1, size=200000)
    cost = np.mean(np.sum((z - z @ T.T) ** 2, axis=1))
    assert math.sqrt(cost) == pytest.approx(w2_gaussian([0, 0], S1, [0, 0], S2), rel=0.01)


def test_empirical_1d():
    x = rng.normal(size=500)
    y = rng.exponential(size=500)
    assert w1_empirical(x, y) == pytest.approx(wasserstein_distance(x, y), rel=1e-12)
    assert w2_empirical(x, x + 3.0) == pytest.approx(3.0)
    assert wasserstein_empirical(x, rng.permutation(x), p=3) == pytest.approx(0.0)


def test_empirical_dd_against_brute_force():
    for p in (1.0, 2.0):
        x = rng.normal(size=(6, 3))
        y = rng.normal(size=(6, 3))
        best = min(
            np.mean(np.linalg.norm(x - y[list(s)], axis=1) ** p)
            for s in itertools.permutations(range(6))
        )
        assert wasserstein_empirical(x, y, p) == pytest.approx(best ** (1 / p), rel=1e-12)
    x = rng.normal(size=(40, 2))
    c = np.array([0.5, -2.0])
    assert w2_empirical(x, rng.permutation(x) + c) == pytest.approx(np.linalg.norm(c))


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: wasserstein_empirical(np.ones(3), np.ones(4)), "same shape"),
        (lambda: wasserstein_empirical(np.ones(3), np.ones(3), p=0.5), "p must be >= 1"),
        (lambda: wasserstein_empirical(np.ones((5, 2)), np.ones((5, 2)), max_n=4), "max_n"),
        (lambda: w2_gaussian([0.0], [[-1.0]], [0.0], [[1.0]]), "cov1"),
        (lambda: w2_gaussian([0, 0], np.eye(2), [0, 0], np.eye(3)), "cov2"),
        (lambda: ag_noise_bound(0.0, 1.0, 0.1), "mu"),
        (lambda: ag_noise_bound(2.0, 1.0, 0.1), "L must be >= mu"),
        (lambda: ag_noise_bound(0.1, 1.0, 0.0), "epsilon"),
        (lambda: ag_lyapunov_bound(3, 0.1, 1.0, -1.0, 1.0), "sigma2"),
        (lambda: ag_invariant_radius(0.1, 1.0, float("nan")), "sigma2"),
    ],
)
def test_bad_parameters(call, name):
    with pytest.raises(ValueError, match=name):
        call()


@pytest.mark.parametrize("kappa", [10.0, 100.0, 1000.0])
def test_ag_lyapunov_contracts_and_bounds_the_exact_stationary_law(kappa):
    d, L = 4, 1.0
    mu = L / kappa
    lam = np.concatenate([[mu, L], np.geomspace(mu, L, d)[1:-1]])
    U, _ = np.linalg.qr(rng.standard_normal((d, d)))
    Q = (U * lam) @ U.T
    a, b = momentum_parameters("ag", mu, L)
    M = iteration_matrix("ag", Q, a, b)
    P = np.kron(ag_lyapunov_matrix(mu, L), np.eye(d))
    rho = 1 - 1 / math.sqrt(kappa)
    xis = rng.standard_normal((2000, 2 * d))
    v0 = ag_lyapunov_value(
        xis[:, :d], xis[:, d:], 0.0, 0.5 * np.sum((xis[:, :d] @ Q) * xis[:, :d], 1), mu, L
    )
    nxt = xis @ M.T
    v1 = ag_lyapunov_value(
        nxt[:, :d], nxt[:, d:], 0.0, 0.5 * np.sum((nxt[:, :d] @ Q) * nxt[:, :d], 1), mu, L
    )
    assert np.all(v1 <= rho * v0 * (1 + 1e-9))
    S = np.diag(rng.uniform(0.1, 1.0, d))
    X = stationary_covariance("ag", Q, a, b, S)
    ev = np.trace(P @ X) + 0.5 * np.trace(Q @ X[:d, :d])
    assert ev <= ag_lyapunov_bound(np.inf, mu, L, np.trace(S), 0.0)
    # the invariant law's x-marginal lies in the W2 ball of radius r(sigma) around x*
    w2 = w2_gaussian(np.zeros(d), X[:d, :d], np.zeros(d), np.zeros((d, d)))
    assert w2 <= ag_invariant_radius(mu, L, np.trace(S))


def test_ag_lyapunov_bound_on_a_non_quadratic_by_simulation():
    """f(x) = mu/2 |x|^2 + (L - mu) sum log cosh x_i: mu <= f'' <= L, x* = 0, f* = 0."""
    mu, L, d, sigma2 = 0.02, 1.0, 3, 0.5
    a, b = momentum_parameters("ag", mu, L)

    def f(x):
        return 0.5 * mu * np.sum(x * x, -1) + (L - mu) * np.sum(np.log(np.cosh(x)), -1)

    def grad(x):
        return mu * x + (L - mu) * np.tanh(x)

    n = 2000
    x = np.full((n, d), 3.0)
    x_prev = x.copy()
    v0 = float(ag_lyapunov_value(x[0], x_prev[0], 0.0, f(x[0]), mu, L))
    r = np.random.default_rng(1)
    for k in range(1, 151):
        y = (1 + b) * x - b * x_prev
        x_prev, x = x, y - a * (grad(y) + r.standard_normal((n, d)) * math.sqrt(sigma2 / d))
        if k % 25 == 0:
            ev = float(np.mean(ag_lyapunov_value(x, x_prev, 0.0, f(x), mu, L)))
            assert ev <= ag_lyapunov_bound(k, mu, L, sigma2, v0)


def test_noise_bound_and_iterations_are_consistent():
    mu, L, eps, v0 = 0.01, 1.0, 0.5, 3.0
    s2 = ag_noise_bound(mu, L, eps)
    assert 2 * ag_invariant_radius(mu, L, s2) == pytest.approx(eps / 2)
    k = ag_iterations(mu, L, v0, eps)
    rho = 1 - 1 / math.sqrt(L / mu)
    assert math.sqrt(2 * v0 / mu) * rho ** (k / 2) <= eps / 2
    assert math.sqrt(2 * v0 / mu) * rho ** ((k - 1) / 2) > eps / 2

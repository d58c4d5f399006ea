"""stationary_covariance: the Lyapunov equation, closed forms, and a long simulation."""

from __future__ import annotations

import numpy as np
import pytest

from async_spark.optim import momentum_parameters
from async_spark.theory import iterate_law, iteration_matrix, stationary_covariance


def _problem(d=3, kappa=10.0, seed=0):
    rng = np.random.default_rng(seed)
    lam = np.geomspace(1 / kappa, 1.0, d)
    U, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (U * lam) @ U.T, lam


@pytest.mark.parametrize("method", ["gd", "hb", "ag"])
def test_solves_the_lyapunov_equation(method):
    Q, _ = _problem()
    a, b = momentum_parameters(method, 0.1, 1.0)
    S = np.diag([0.3, 1.0, 2.0])
    X = stationary_covariance(method, Q, a, b, S)
    M = iteration_matrix(method, Q, a, b)
    W = np.zeros((6, 6))
    W[:3, :3] = a * a * S
    np.testing.assert_allclose(X, M @ X @ M.T + W, atol=1e-12)
    np.testing.assert_allclose(X, X.T)
    assert np.linalg.eigvalsh(X)[0] > -1e-12


def test_gd_scalar_closed_form():
    lam, a, s = 0.4, 0.5, 2.0
    X = stationary_covariance("gd", [[lam]], a, 0.0, s)
    var = a * a * s / (1 - (1 - a * lam) ** 2)
    np.testing.assert_allclose(X, [[var, (1 - a * lam) * var], [(1 - a * lam) * var, var]])


def test_iterate_law_converges_to_stationary():
    Q, _ = _problem()
    a, b = momentum_parameters("ag", 0.1, 1.0)
    means, covs = iterate_law("ag", Q, a, b, 0.5, mean0=np.ones(3), steps=400)
    np.testing.assert_allclose(covs[-1], stationary_covariance("ag", Q, a, b, 0.5), atol=1e-10)
    assert np.linalg.norm(means[-1]) < 1e-10


@pytest.mark.parametrize("method", ["hb", "ag"])
def test_against_long_simulation(method):
    """4000 independent chains x 600 steps after burn-in.

    Tolerance: 5% relative Frobenius. With ~4000 * 600 / tau samples (tau ~ 10-20 steps here) the
    sampling error of the covariance is ~1%, so 5% fails only for a wrong covariance.
    """
    d, kappa = 2, 10.0
    Q, _ = _problem(d, kappa, seed=1)
    a, b = momentum_parameters(method, 1 / kappa, 1.0)
    S = np.array([[1.0, 0.3], [0.3, 0.5]])
    X = stationary_covariance(method, Q, a, b, S)
    rng = np.random.default_rng(2)
    chol = np.linalg.cholesky(S)
    n = 4000
    x = np.zeros((n, d))
    x_prev = np.zeros((n, d))
    acc = np.zeros((2 * d, 2 * d))
    count = 0
    for k in range(800):
        w = rng.standard_normal((n, d)) @ chol.T
        if method == "hb":
            x_new = x - a * (x @ Q + w) + b * (x - x_prev)
        else:
            y = (1 + b) * x - b * x_prev
            x_new = y - a * (y @ Q + w)
        x_prev, x = x, x_new
        if k >= 200:
            xi = np.hstack([x, x_prev])
            acc += xi.T @ xi
            count += n
    emp = acc / count
    assert np.linalg.norm(emp - X) / np.linalg.norm(X) < 0.05


def test_refuses_divergent_and_bad_noise():
    Q, _ = _problem()
    with pytest.raises(ValueError, match="spectral radius"):
        stationary_covariance("gd", Q, 2.5, 0.0, 1.0)
    with pytest.raises(ValueError, match="noise_cov"):
        stationary_covariance("ag", Q, 0.5, 0.5, -1.0)
    with pytest.raises(ValueError, match="noise_cov"):
        stationary_covariance("ag", Q, 0.5, 0.5, np.ones(2))
    with pytest.raises(ValueError, match="noise_cov must be positive semidefinite"):
        stationary_covariance("ag", Q, 0.5, 0.5, -np.eye(3))
    with pytest.raises(ValueError, match="beta"):
        stationary_covariance("ag", Q, 0.5, 1.0, 1.0)
    with pytest.raises(ValueError, match="alpha"):
        stationary_covariance("ag", Q, 0.0, 0.5, 1.0)

"""momentum_parameters against the reference table; estimate_curvature against eigvalsh."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from async_spark.optim import estimate_curvature, momentum_parameters, robust_momentum_parameters


@pytest.mark.parametrize("kappa", [10.0, 100.0, 1000.0])
def test_reference_table(kappa):
    L = 2.0
    mu = L / kappa
    sk = math.sqrt(kappa)
    assert momentum_parameters("ag", mu, L) == pytest.approx((1 / L, (sk - 1) / (sk + 1)))
    s3 = math.sqrt(3 * kappa + 1)
    assert momentum_parameters("ag-lessard", mu, L) == pytest.approx(
        (4 / (3 * L + mu), (s3 - 2) / (s3 + 2))
    )
    assert momentum_parameters("hb", mu, L) == pytest.approx(
        (4 / (math.sqrt(L) + math.sqrt(mu)) ** 2, ((sk - 1) / (sk + 1)) ** 2)
    )
    assert momentum_parameters("gd", mu, L) == pytest.approx((2 / (L + mu), 0.0))


def test_kappa_one_gives_no_momentum():
    for m in ("ag", "hb", "gd"):
        assert momentum_parameters(m, 1.0, 1.0)[1] == pytest.approx(0.0)


def test_robust_momentum_endpoints():
    mu, L = 0.01, 1.0
    kappa = L / mu
    rho = 1 - 1 / math.sqrt(kappa)
    a, b, g = robust_momentum_parameters(mu, L, rho)
    # triple momentum method (Van Scoy, Freeman & Lynch 2018)
    assert a == pytest.approx((1 + rho) / L)
    assert b == pytest.approx(rho**2 / (2 - rho))
    assert g == pytest.approx(rho**2 / ((1 + rho) * (2 - rho)))
    a2, _, _ = robust_momentum_parameters(mu, L, 1 - 1 / kappa)
    assert a2 < a  # the robust end takes smaller steps


def test_estimate_curvature_dense_and_sparse():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 12)) * np.geomspace(0.1, 3.0, 12)
    eig = np.linalg.eigvalsh(X.T @ X / 300)
    for Xi in (X, sp.csr_matrix(X)):
        c = estimate_curvature(Xi, l2=0.5, tol=1e-9, max_iter=20000)
        assert c.converged
        assert c.L == pytest.approx(eig[-1] + 0.5, rel=1e-7)
        assert c.mu == pytest.approx(eig[0] + 0.5, rel=1e-5)
    c = estimate_curvature(X, l2=0.1, loss="logistic")
    assert c.L == pytest.approx(eig[-1] / 4 + 0.1, rel=1e-6)
    assert c.mu == 0.1


def test_estimate_curvature_wide_design_has_no_data_strong_convexity():
    rng = np.random.default_rng(1)
    X = sp.random(20, 50, density=0.3, random_state=2, format="csr")
    c = estimate_curvature(X, l2=0.0)
    assert c.mu == 0.0 and c.gram_min == 0.0
    assert c.L == pytest.approx(np.linalg.eigvalsh((X.T @ X).toarray() / 20)[-1], rel=1e-6)
    del rng


def test_estimate_curvature_warns_when_not_converged():
    X = np.random.default_rng(3).standard_normal((50, 10))
    with pytest.warns(RuntimeWarning, match="did not reach"):
        estimate_curvature(X, max_iter=1, tol=1e-12)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: momentum_parameters("ag", 0.0, 1.0), "mu"),
        (lambda: momentum_parameters("ag", -1.0, 1.0), "mu"),
        (lambda: momentum_parameters("ag", 1.0, 0.5), "L must be >= mu"),
        (lambda: momentum_parameters("ag", float("nan"), 1.0), "mu"),
        (lambda: momentum_parameters("ag", 0.1, float("inf")), "L"),
        (lambda: momentum_parameters("nesterov", 0.1, 1.0), "method"),
        (lambda: robust_momentum_parameters(0.1, 1.0, 0.99), "rho"),
        (lambda: robust_momentum_parameters(1.0, 1.0, 0.5), "L must be > mu"),
        (lambda: estimate_curvature(np.ones((3, 2)), l2=-1.0), "l2"),
        (lambda: estimate_curvature(np.ones(3)), "X"),
        (lambda: estimate_curvature(np.ones((3, 2)), loss="hinge"), "loss"),
        (lambda: estimate_curvature(np.full((3, 2), np.nan)), "X must be finite"),
        (lambda: estimate_curvature(np.ones((3, 2)), max_iter=0), "max_iter"),
    ],
)
def test_bad_parameters(call, name):
    with pytest.raises(ValueError, match=name):
        call()

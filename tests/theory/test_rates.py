"""momentum_rate against the closed forms of the reference table and brute-force eigenvalues."""

from __future__ import annotations

import math

import numpy as np
import pytest

from async_spark.optim import momentum_parameters
from async_spark.theory import iteration_matrix, momentum_rate


@pytest.mark.parametrize("kappa", [10.0, 100.0, 1000.0])
def test_closed_forms(kappa):
    L = 1.0
    mu = L / kappa
    sk = math.sqrt(kappa)
    spectrum = np.linspace(mu, L, 501)
    cases = {
        "ag": ("ag", 1 - 1 / sk),
        "ag-lessard": ("ag", 1 - 2 / math.sqrt(3 * kappa + 1)),
        "hb": ("hb", (sk - 1) / (sk + 1)),
        "gd": ("gd", (kappa - 1) / (kappa + 1)),
    }
    for tuning, (method, closed) in cases.items():
        a, b = momentum_parameters(tuning, mu, L)
        # double roots are computed to ~sqrt(machine eps)
        assert momentum_rate(method, a, b, spectrum) == pytest.approx(closed, abs=1e-7), tuning
        assert momentum_rate(method, a, b, [mu, L]) == pytest.approx(closed, abs=1e-7), tuning


@pytest.mark.parametrize("method", ["gd", "hb", "ag"])
def test_rate_is_spectral_radius_of_iteration_matrix(method):
    rng = np.random.default_rng(0)
    d = 6
    lam = rng.uniform(0.05, 1.0, d)
    U, _ = np.linalg.qr(rng.standard_normal((d, d)))
    Q = (U * lam) @ U.T
    for a, b in ((0.3, 0.4), (1.9, 0.1), (2.5, 0.7), (0.8, 0.95)):
        if method == "gd":
            b = 0.0
        M = iteration_matrix(method, Q, a, b)
        expected = np.max(np.abs(np.linalg.eigvals(M)))
        assert momentum_rate(method, a, b, lam) == pytest.approx(expected, rel=1e-6)


def test_unstable_step_has_rate_above_one():
    assert momentum_rate("gd", 2.5, 0.0, [1.0]) == pytest.approx(1.5)
    assert momentum_rate("hb", 4.0, 0.5, [1.0]) > 1.0


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (("sgd", 0.1, 0.5, [1.0]), "method"),
        (("ag", 0.0, 0.5, [1.0]), "alpha"),
        (("ag", -0.1, 0.5, [1.0]), "alpha"),
        (("ag", 0.1, 1.0, [1.0]), "beta"),
        (("hb", 0.1, -0.2, [1.0]), "beta"),
        (("gd", 0.1, 0.5, [1.0]), "beta must be 0"),
        (("ag", 0.1, 0.5, []), "eigenvalues"),
        (("ag", 0.1, 0.5, [-1.0, 1.0]), "eigenvalues"),
        (("ag", 0.1, 0.5, [np.nan]), "eigenvalues"),
    ],
)
def test_bad_parameters(args, name):
    with pytest.raises(ValueError, match=name):
        momentum_rate(*args)


def test_iteration_matrix_refuses_bad_Q():
    with pytest.raises(ValueError, match="Q must be symmetric"):
        iteration_matrix("ag", np.array([[1.0, 2.0], [0.0, 1.0]]), 0.1, 0.5)
    with pytest.raises(ValueError, match="positive semidefinite"):
        iteration_matrix("ag", -np.eye(2), 0.1, 0.5)
    with pytest.raises(ValueError, match="square"):
        iteration_matrix("ag", np.ones((2, 3)), 0.1, 0.5)

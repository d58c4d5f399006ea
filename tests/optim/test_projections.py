"""Projections and proximal maps against their definitions; bad sets are refused."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from async_spark.optim import (
    L1,
    Ball,
    Box,
    ElasticNet,
    Simplex,
    project_ball,
    project_simplex,
    prox_elastic_net,
)

rng = np.random.default_rng(0)


def _is_projection(P, x, feasible_points):
    """Variational inequality: <x - P(x), z - P(x)> <= 0 for every feasible z."""
    px = P(x)
    return all(float((x - px) @ (z - px)) <= 1e-10 for z in feasible_points)


def test_box():
    lo, hi = np.array([-1.0, 0.0, -np.inf]), np.array([1.0, 0.5, 2.0])
    box = Box(lo, hi)
    x = np.array([3.0, -2.0, 5.0])
    np.testing.assert_array_equal(box(x), [1.0, 0.0, 2.0])
    assert box.value(box(x)) == 0.0 and box.value(x) == np.inf
    feas = [np.clip(rng.normal(size=3) * 3, lo, hi) for _ in range(50)]
    assert _is_projection(box, rng.normal(size=3) * 3, feas)


def test_ball():
    c = np.array([1.0, -1.0, 0.0])
    ball = Ball(2.0, c)
    x = np.array([5.0, 3.0, 1.0])
    p = ball(x)
    assert np.linalg.norm(p - c) == pytest.approx(2.0)
    np.testing.assert_allclose(np.cross(p - c, x - c), 0.0, atol=1e-12)  # same ray
    inside = c + 0.5 * np.ones(3)
    np.testing.assert_array_equal(ball(inside), inside)
    feas = []
    for _ in range(50):
        v = rng.normal(size=3)
        feas.append(c + 2.0 * rng.uniform() * v / np.linalg.norm(v))
    assert _is_projection(ball, x, feas)
    # rows of a stack are projected independently; radius 0 is the point {center}
    X = rng.normal(size=(4, 3)) * 5
    np.testing.assert_allclose(project_ball(X, 1.0), np.array([project_ball(r, 1.0) for r in X]))
    np.testing.assert_allclose(Ball(0.0)(x), 0.0)


def _simplex_by_bisection(x, s):
    lo, hi = x.min() - s, x.max()
    for _ in range(200):
        t = 0.5 * (lo + hi)
        if np.maximum(x - t, 0).sum() > s:
            lo = t
        else:
            hi = t
    return np.maximum(x - 0.5 * (lo + hi), 0)


def test_simplex():
    for s in (1.0, 3.5):
        X = rng.normal(size=(20, 7)) * 2
        P = project_simplex(X, s)
        assert np.all(P >= 0)
        np.testing.assert_allclose(P.sum(axis=1), s)
        for x, p in zip(X, P, strict=True):
            np.testing.assert_allclose(p, _simplex_by_bisection(x, s), atol=1e-10)
    simplex = Simplex(1.0)
    x = rng.normal(size=5)
    feas = [rng.dirichlet(np.ones(5)) for _ in range(50)]
    assert _is_projection(simplex, x, feas)
    assert simplex.value(simplex(x)) == 0.0


def test_l1_and_elastic_net_minimize_their_prox_objective():
    x = np.array([2.0, -0.3, 0.05, -4.0])
    t, l1, l2 = 0.7, 0.5, 0.8
    np.testing.assert_allclose(L1(l1)(x, t), [1.65, 0.0, 0.0, -3.65])
    p = ElasticNet(l1, l2)(x, t)
    for xi, pi in zip(x, p, strict=True):
        res = minimize_scalar(
            lambda z, xi=xi: l1 * abs(z) + 0.5 * l2 * z * z + (z - xi) ** 2 / (2 * t),
            bounds=(-10, 10),
            method="bounded",
            options={"xatol": 1e-12},
        )
        assert pi == pytest.approx(res.x, abs=1e-7)
    np.testing.assert_allclose(prox_elastic_net(x, t, 0.0, 0.0), x)
    assert ElasticNet(l1, l2).value(x) == pytest.approx(l1 * 6.35 + 0.5 * l2 * np.sum(x * x))


def test_dtype_is_kept():
    x = rng.normal(size=(3, 4)).astype(np.float32)
    for op in (Box(-1, 1), Ball(1.0), Simplex(), L1(0.1), ElasticNet(0.1, 0.1)):
        assert op(x, 0.5).dtype == np.float32


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: Box(1.0, 0.0), "hi must be >= lo"),
        (lambda: Box([0.0, 2.0], [1.0, 1.0]), "hi must be >= lo"),
        (lambda: Box(np.nan, 1.0), "lo and hi"),
        (lambda: Box(np.zeros(2), np.ones(3)), "broadcast"),
        (lambda: Ball(-1.0), "radius"),
        (lambda: Ball(float("nan")), "radius"),
        (lambda: Simplex(0.0), "total"),
        (lambda: L1(-0.1), "lam"),
        (lambda: ElasticNet(0.1, -1.0), "l2"),
        (lambda: ElasticNet(-0.1, 1.0), "l1"),
    ],
)
def test_bad_sets_and_weights(make, name):
    with pytest.raises(ValueError, match=name):
        make()

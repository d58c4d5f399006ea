"""L-BFGS as a pure rule: the two-loop direction against the explicit inverse-Hessian recursion,
the line search's contract, and convergence to scipy's optimum on real data."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.optimize
from sklearn.datasets import load_breast_cancer, load_digits

from async_spark.data.blocks import Block
from async_spark.models.linear import (
    LinearModel,
    block_gradient_sum,
    block_loss_sum,
    full_gradient,
    init_params,
    objective,
)
from async_spark.optim.lbfgs import (
    ARMIJO,
    LBFGSMessage,
    combine_lbfgs_messages,
    lbfgs,
    pseudo_gradient,
    two_loop_direction,
)


def _explicit_direction(g, pairs):
    """-H g with H from the BFGS recursion H <- V^T H V + rho s s^T, V = I - rho y s^T, started
    at gamma I with gamma = s.y / y.y of the newest pair (Nocedal & Wright, eq. 7.19-7.20)."""
    d = g.size
    s_new, y_new = pairs[-1]
    H = (s_new @ y_new) / (y_new @ y_new) * np.eye(d)
    for s, y in pairs:
        rho = 1.0 / (y @ s)
        V = np.eye(d) - rho * np.outer(y, s)
        H = V.T @ H @ V + rho * np.outer(s, s)
    return -H @ g


def test_two_loop_equals_the_explicit_recursion_in_ring_order():
    rng = np.random.default_rng(0)
    d, memory = 7, 4
    A = rng.standard_normal((d, d))
    A = A @ A.T + np.eye(d)  # y = A s: positive curvature
    pairs = [(s, A @ s) for s in rng.standard_normal((6, d))]
    s_ring, y_ring = np.zeros((memory, d)), np.zeros((memory, d))
    head = 0
    for s, y in pairs:  # six pairs through a ring of four: the last four survive, wrapped
        s_ring[head], y_ring[head] = s, y
        head = (head + 1) % memory
    g = rng.standard_normal(d)
    got = two_loop_direction(g, s_ring, y_ring, memory, head)
    np.testing.assert_allclose(got, _explicit_direction(g, pairs[-memory:]), rtol=1e-10)
    np.testing.assert_allclose(two_loop_direction(g, s_ring, y_ring, 0, 0), -g)


def _problem(loss="logistic", penalty_scale=False, l1=0.0):
    if loss == "softmax":
        X, y = load_digits(return_X_y=True)
        K = 10
    else:
        X, y = load_breast_cancer(return_X_y=True)
        K = None
    X = np.asarray(X, dtype=np.float64)
    sd = X.std(axis=0)
    sd[sd == 0] = 1.0
    Xs = (X - X.mean(axis=0)) / sd
    model = LinearModel(
        loss,
        X.shape[1],
        num_classes=K,
        l2=1e-2,
        l1=l1,
        # a penalty on columns of mixed scales, as on the original columns of mildly scaled data
        penalty_scale=tuple(np.linspace(0.5, 2.0, X.shape[1])) if penalty_scale else None,
    )
    half = X.shape[0] // 2
    blocks = [Block(Xs[:half], y[:half].astype(float), 0), Block(Xs[half:], y[half:], half)]
    return model, blocks


def _round(model, blocks, theta, drop=None):
    msgs = [
        LBFGSMessage(block_gradient_sum(model, b, theta), block_loss_sum(model, b, theta), b.rows)
        for i, b in enumerate(blocks)
        if i != drop
    ]
    return combine_lbfgs_messages(msgs)


def _started():
    """Breast cancer's problem, its rule and the state after the first (start point) round."""
    model, blocks = _problem()
    rule = lbfgs(model, n=sum(b.rows for b in blocks))
    theta = init_params(model)
    theta, state = rule.update(_round(model, blocks, theta), rule.init(theta), theta)
    return model, blocks, rule, theta, state


def _run(rule, model, blocks, rounds):
    theta = init_params(model)
    state = rule.init(theta)
    for _ in range(rounds):
        theta, state = rule.update(_round(model, blocks, theta), state, theta)
        if state.converged:
            break
    return state


@pytest.mark.parametrize(
    "loss, penalty_scale", [("logistic", False), ("logistic", True), ("softmax", False)]
)
def test_reaches_scipys_optimum(loss, penalty_scale):
    model, blocks = _problem(loss, penalty_scale)
    n = sum(b.rows for b in blocks)
    rule = lbfgs(model, n=n)
    state = _run(rule, model, blocks, 400)
    ref = scipy.optimize.minimize(
        lambda t: objective(model, t, blocks),
        init_params(model),
        jac=lambda t: full_gradient(model, t, blocks),
        method="L-BFGS-B",
        options={"gtol": 1e-12, "ftol": 1e-16, "maxiter": 20_000},
    )
    f = objective(model, state.x, blocks)
    assert f - ref.fun <= 1e-9 * abs(ref.fun)
    assert state.f == pytest.approx(f, rel=1e-12)  # the state's F is the objective at its x
    # far fewer evaluations than accepted iterations would allow a line search that never
    # accepts t = 1: most steps are the first trial
    assert state.evaluations <= 1.5 * state.accepted + 10


def test_each_accepted_point_satisfies_armijo_and_trials_shrink():
    model, blocks, rule, theta, state = _started()
    backtracks = 0
    for _ in range(150):
        before = state
        trial_f = objective(model, theta, blocks)
        theta, state = rule.update(_round(model, blocks, theta), state, theta)
        if state.accepted > before.accepted:
            slope = float(before.g @ before.direction)
            assert slope < 0  # a descent direction
            assert trial_f <= before.f + ARMIJO * before.t * slope + 1e-15
            np.testing.assert_allclose(state.x, before.x + before.t * before.direction)
        elif state.pairs == before.pairs and not state.converged:
            backtracks += 1
            assert 0.1 * before.t <= state.t <= 0.5 * before.t
            assert trial_f > before.f + ARMIJO * before.t * float(before.g @ before.direction)
        if state.converged:
            break
    assert state.accepted >= 20


def test_a_partial_round_is_evaluated_again_and_changes_nothing():
    model, blocks, rule, theta, state = _started()
    again, same = rule.update(_round(model, blocks, theta, drop=1), state, theta)
    np.testing.assert_array_equal(again, theta)
    assert same is state


def test_a_non_finite_trial_backtracks():
    model, blocks, rule, theta, state = _started()
    bad = _round(model, blocks, theta)._replace(loss_sum=float("inf"))
    nxt, after = rule.update(bad, state, theta)
    assert after.t == pytest.approx(0.1 * state.t)
    assert after.accepted == 0
    np.testing.assert_allclose(nxt, state.x + after.t * state.direction)


def test_options_are_checked():
    model, _ = _problem()
    with pytest.raises(ValueError, match="memory must be an integer >= 1"):
        lbfgs(model, n=10, memory=0)
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        lbfgs(model, n=True)
    with pytest.raises(ValueError, match="params must have shape"):
        lbfgs(model, n=10).init(np.zeros(3))


def test_the_pseudo_gradient_is_the_subgradient_of_least_norm():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(400) * (rng.random(400) < 0.5)  # half the coordinates at zero
    g = rng.standard_normal(400)
    w = rng.uniform(0.0, 1.5, 400) * (rng.random(400) < 0.9)  # some unpenalized (intercepts)
    # the subdifferential of w_j |x_j| + g_j x_j: {g + w sign x} off zero, [g - w, g + w] at zero;
    # its element of least norm is 0 clipped into that interval
    low = np.where(x > 0, g + w, g - w)
    high = np.where(x < 0, g - w, g + w)
    np.testing.assert_array_equal(pseudo_gradient(x, g, w), np.clip(0.0, low, high))
    assert pseudo_gradient(x, g, None) is g


def _split_reference(model, blocks):
    """The l1 problem by scipy's L-BFGS-B on w = u - v, u, v >= 0 (an exact smooth rewrite)."""
    m = model.outputs * model.num_features
    weights = lbfgs(model, n=10).l1_weights
    smooth = dataclasses.replace(model, l1=0.0)

    def theta(z):
        return np.concatenate([z[:m] - z[m : 2 * m], z[2 * m :]])

    def fun(z):
        t = theta(z)
        f = objective(smooth, t, blocks) + float(weights[:m] @ (z[:m] + z[m : 2 * m]))
        g = full_gradient(smooth, t, blocks)
        return f, np.concatenate([g[:m] + weights[:m], -g[:m] + weights[:m], g[m:]])

    z0 = np.zeros(model.num_params + m)
    bounds = [(0, None)] * (2 * m) + [(None, None)] * (model.num_params - m)
    ref = scipy.optimize.minimize(
        fun,
        z0,
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"gtol": 1e-13, "ftol": 1e-16, "maxiter": 50_000, "maxfun": 100_000},
    )
    return theta(ref.x), ref.fun


@pytest.mark.parametrize("penalty_scale", [False, True])
def test_owlqn_reaches_the_l1_optimum_with_exact_zeros(penalty_scale):
    model, blocks = _problem("logistic", penalty_scale, l1=2e-2)
    rule = lbfgs(model, n=sum(b.rows for b in blocks))
    state = _run(rule, model, blocks, 600)
    assert state.converged
    f = objective(model, state.x, blocks)
    ref_theta, ref_f = _split_reference(model, blocks)
    assert f - ref_f <= 1e-9 * abs(ref_f)
    # optimality certificate: the least-norm subgradient of F vanishes at the point
    pg = pseudo_gradient(state.x, full_gradient(model, state.x, blocks), rule.l1_weights)
    assert float(np.max(np.abs(pg))) <= 1e-8
    m = model.num_features
    zeros = state.x[:m] == 0.0
    assert 5 <= zeros.sum() < m  # a sparse model, with exact zeros as OWL-QN makes them
    np.testing.assert_array_equal(zeros, np.abs(ref_theta[:m]) < 1e-6)
    assert state.evaluations <= 1.5 * state.accepted + 10


def test_each_owlqn_step_keeps_its_orthant_and_satisfies_armijo_at_the_projected_point():
    model, blocks = _problem("logistic", l1=2e-2)
    rule = lbfgs(model, n=sum(b.rows for b in blocks))
    weighted = rule.l1_weights > 0
    theta = init_params(model)
    state = rule.init(theta)
    theta, state = rule.update(_round(model, blocks, theta), state, theta)
    projected = 0
    for _ in range(300):
        before = state
        pg = rule.pseudo(before)
        p = before.direction
        # the direction descends and never moves a weight against its pseudo-gradient
        assert float(pg @ p) < 0
        assert np.all((p[weighted] * pg[weighted] < 0) | (p[weighted] == 0))
        orthant = np.where(before.x != 0, np.sign(before.x), -np.sign(pg))
        assert np.all((np.sign(theta[weighted]) == orthant[weighted]) | (theta[weighted] == 0))
        projected += int(np.any(theta != before.x + before.t * p))
        trial_f = objective(model, theta, blocks)
        armijo = before.f + ARMIJO * float(pg @ (theta - before.x))
        theta, state = rule.update(_round(model, blocks, theta), state, theta)
        if state.accepted > before.accepted:
            assert trial_f <= armijo + 1e-15
        elif not state.converged:  # rejected: only a trial that fails the condition
            assert trial_f > armijo
        if state.converged:
            break
    assert state.converged and state.accepted >= 20
    assert projected >= 3  # trials that would have crossed zero were stopped there

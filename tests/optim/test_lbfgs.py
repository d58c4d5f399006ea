"""L-BFGS as a pure rule: the two-loop direction against the explicit inverse-Hessian recursion,
the line search's contract, and convergence to scipy's optimum on real data."""

from __future__ import annotations

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


def _problem(loss="logistic", penalty_scale=False):
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
    with pytest.raises(ValueError, match="l1 must be 0"):
        lbfgs(LinearModel("logistic", 3, l1=1e-3), n=10)
    with pytest.raises(ValueError, match="memory must be an integer >= 1"):
        lbfgs(model, n=10, memory=0)
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        lbfgs(model, n=True)
    with pytest.raises(ValueError, match="params must have shape"):
        lbfgs(model, n=10).init(np.zeros(3))

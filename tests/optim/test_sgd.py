"""SGD, the task sample and the step rules against plain numpy references."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import scipy.sparse as sp

from async_spark.data.blocks import Block
from async_spark.models import LinearModel, init_params, sample_smoothness
from async_spark.optim.sgd import SGDMessage, combine_sgd_messages, sgd
from async_spark.optim.steps import (
    ConstantStep,
    InvSqrtStep,
    StalenessScaledStep,
    auto_step,
    make_step_rule,
)
from async_spark.solvers.worker import gradient_sum, sample_rows


def _reference_sample(seed, block, seq, rows, fraction):
    rng = np.random.default_rng([seed, block, seq])
    k = rng.binomial(rows, fraction)
    return np.sort(rng.choice(rows, size=k, replace=False))


def test_sample_rows_is_reproducible_and_bernoulli() -> None:
    a = sample_rows(7, 3, 11, 1000, 0.1)
    np.testing.assert_array_equal(a, sample_rows(7, 3, 11, 1000, 0.1))
    np.testing.assert_array_equal(a, _reference_sample(7, 3, 11, 1000, 0.1))
    assert a.dtype == np.int64 and np.all(np.diff(a) > 0) and a.min() >= 0 and a.max() < 1000
    assert not np.array_equal(a, sample_rows(7, 3, 12, 1000, 0.1))
    assert not np.array_equal(a, sample_rows(7, 4, 11, 1000, 0.1))
    np.testing.assert_array_equal(sample_rows(0, 0, 0, 5, 1.0), np.arange(5))
    # Each row is included with probability b, independently of the others (mean and variance).
    hits = np.zeros(50)
    sizes = []
    for seq in range(4000):
        s = sample_rows(1, 0, seq, 50, 0.2)
        hits[s] += 1
        sizes.append(s.size)
    assert np.allclose(hits / 4000, 0.2, atol=0.03)
    assert np.var(sizes) == pytest.approx(50 * 0.2 * 0.8, rel=0.15)


@pytest.mark.parametrize(
    "args, pattern",
    [
        ((0, 0, 0, 10, 0.0), r"batch_fraction must be in \(0, 1\], got 0.0"),
        ((0, 0, 0, 10, 1.5), r"batch_fraction must be in \(0, 1\], got 1.5"),
        ((-1, 0, 0, 10, 0.5), r"seed must be an integer >= 0, got -1"),
        ((0, 0, -2, 10, 0.5), r"task_seq must be an integer >= 0, got -2"),
    ],
)
def test_sample_rows_validation(args, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        sample_rows(*args)


def _soft(w, t):
    return np.sign(w) * np.maximum(np.abs(w) - t, 0.0)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("rule", ["constant", "sqrt", "staleness"])
def test_sgd_one_block_matches_numpy_loop(sparse, rule) -> None:
    rng = np.random.default_rng(0)
    n, d, b, l2, l1, gamma, seed = 60, 5, 0.3, 0.1, 0.01, 0.5, 9
    X = rng.standard_normal((n, d))
    y = rng.integers(0, 2, n).astype(float)
    model = LinearModel("logistic", d, l2=l2, l1=l1)
    block = Block(sp.csr_matrix(X) if sparse else X, y, 0)
    step = make_step_rule(rule, gamma, num_blocks=1)
    opt = sgd(model, n=n, num_blocks=1, batch_fraction=b, step=step)
    theta = init_params(model)
    state = opt.init(theta)
    # Reference: textbook loop over samples.
    w, c = np.zeros(d), 0.0
    for k in range(40):
        staleness = k % 3  # as if results arrived late
        idx = sample_rows(seed, 0, k, n, b)
        np.testing.assert_array_equal(idx, _reference_sample(seed, 0, k, n, b))
        g = gradient_sum(model, block, theta, idx, None)
        theta, state = opt.update(SGDMessage(g, staleness), state, theta)

        gw, gc = np.zeros(d), 0.0
        for i in idx:
            r = 1.0 / (1.0 + math.exp(-(X[i] @ w + c))) - y[i]
            gw += r * X[i]
            gc += r
        lr = {
            "constant": gamma,
            "sqrt": gamma / math.sqrt(k + 1),
            "staleness": gamma / (1 + staleness),
        }[rule]
        w = _soft(w - lr * (gw / (b * n) + l2 * w), lr * l1)
        c = c - lr * gc / (b * n)
    assert state.step == 40
    np.testing.assert_allclose(theta, np.append(w, c), rtol=1e-12, atol=1e-12)


def test_sync_round_divides_by_all_tasks() -> None:
    model = LinearModel("squares", 2)
    opt = sgd(model, n=100, num_blocks=4, batch_fraction=0.5, step=0.1)
    theta = np.zeros(3)
    msgs = [SGDMessage(np.array([1.0, 2.0, 3.0]), staleness=s) for s in (0, 2, 1, 0)]
    msg = combine_sgd_messages(msgs)
    assert msg.num_tasks == 4 and msg.staleness == 2
    new, _ = opt.update(msg, opt.init(theta), theta)
    np.testing.assert_allclose(new, -0.1 * np.array([4.0, 8.0, 12.0]) / (4 * 0.5 * 100 / 4))
    # The update does not modify its inputs.
    assert np.all(theta == 0.0)


def test_step_rules() -> None:
    assert ConstantStep(0.3)(100, 5) == 0.3
    assert InvSqrtStep(1.0, 4)(12) == pytest.approx(0.5)
    assert StalenessScaledStep(ConstantStep(1.0))(0, 3) == 0.25
    assert make_step_rule("sqrt", 2.0, 8)(8) == pytest.approx(2.0 / math.sqrt(2.0))
    rule = pickle.loads(pickle.dumps(make_step_rule("staleness", 0.5)))
    assert rule(0, 1) == 0.25
    with pytest.raises(ValueError, match="step rule must be one of constant, sqrt, staleness"):
        make_step_rule("adam", 1.0)
    with pytest.raises(ValueError, match="gamma must be a finite number > 0, got -1"):
        ConstantStep(-1)
    with pytest.raises(ValueError, match="num_blocks must be an integer >= 1"):
        InvSqrtStep(1.0, 0)


def test_auto_step_rules() -> None:
    model = LinearModel("logistic", 3, l2=0.5)
    # L_max = (max ||x||^2 + 1) / 4 with the intercept's constant feature.
    assert sample_smoothness(model, 7.0) == 2.0
    assert auto_step("saga", model, 7.0) == pytest.approx(1.0 / (3 * 2.5))
    assert auto_step("asgd", model, 7.0) == pytest.approx(1.0 / (2 * 2.5))
    sq = LinearModel("squares", 3, fit_intercept=False)
    assert auto_step("asaga", sq, 4.0) == pytest.approx(1.0 / 12.0)
    sm = LinearModel("softmax", 3, 4)
    assert auto_step("sgd", sm, 3.0) == pytest.approx(1.0 / 4.0)
    with pytest.raises(ValueError, match="method must be one of sgd, asgd, saga, asaga"):
        auto_step("lbfgs", model, 1.0)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"n": 0}, r"n must be an integer >= 1, got 0"),
        ({"num_blocks": 11}, r"num_blocks must be an integer in \[1, n=10\], got 11"),
        ({"batch_fraction": 0}, r"batch_fraction must be in \(0, 1\], got 0"),
        ({"step": 0.0}, r"gamma must be a finite number > 0, got 0.0"),
    ],
)
def test_sgd_validation(kwargs, pattern) -> None:
    args = {"n": 10, "num_blocks": 2, "batch_fraction": 0.5, "step": 0.1, **kwargs}
    with pytest.raises(ValueError, match=pattern):
        sgd(LinearModel("squares", 2), **args)


def test_minibatch_smoothness_interpolates_between_lmax_and_l():
    from async_spark.optim.steps import minibatch_smoothness

    assert minibatch_smoothness(10.0, 2.0, 1000, 1) == 10.0
    assert minibatch_smoothness(10.0, 2.0, 1000, 1000) == 2.0
    mid = minibatch_smoothness(10.0, 2.0, 1000, 50)
    assert 2.0 < mid < 10.0

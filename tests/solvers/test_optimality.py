"""How far a model is from optimal: the optimality norm (numpy references), computed by the
evaluation job on every path (in-process, a classic Spark job, a DataFrame's partitions) and
reported by a run at its start and end."""

from __future__ import annotations

import numpy as np
import pytest

from async_spark.data.blocks import get_block
from async_spark.data.dataset import open_dataset
from async_spark.models.linear import (
    LinearModel,
    full_gradient,
    init_params,
    objective,
    optimality_norm,
    penalty_gradient,
)
from async_spark.solvers import TrainConfig, train_linear
from async_spark.solvers import evaluate as evaluate_module
from async_spark.solvers.evaluate import Evaluator


def _blocks(source):
    return [get_block(source, b) for b in range(source.num_blocks)]


def _data_gradient(model, theta, blocks):
    """(1/n) sum_i grad f_i, from full_gradient (which adds the l2 penalty's gradient)."""
    return full_gradient(model, theta, blocks) - penalty_gradient(model, theta)


@pytest.fixture(scope="module")
def cancer():
    return open_dataset("builtin:breast_cancer", 3, standardize=True, loss="logistic")


def _fd_gradient(model, theta, blocks, h=1e-6):
    g = np.zeros_like(theta)
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        g[j] = (objective(model, theta + e, blocks) - objective(model, theta - e, blocks)) / (2 * h)
    return g


@pytest.mark.parametrize(
    "loss, centered", [("logistic", False), ("softmax", False), ("logistic", True)]
)
def test_without_l1_it_is_the_norm_of_the_objectives_gradient(loss, centered):
    X, y = _small(loss)
    source, desc = open_dataset((X, y), 2, loss=loss)
    classes = 3 if loss == "softmax" else None
    scale = np.linspace(0.5, 2.0, X.shape[1])
    center = tuple(np.linspace(-0.3, 0.4, X.shape[1])) if centered else None
    model = LinearModel(
        loss, X.shape[1], classes, l2=0.3, penalty_scale=tuple(scale), center=center
    )
    blocks = _blocks(source)
    theta = np.random.default_rng(1).standard_normal(model.num_params)
    got = optimality_norm(model, theta, _data_gradient(model, theta, blocks))
    assert got == pytest.approx(np.linalg.norm(_fd_gradient(model, theta, blocks)), rel=1e-6)


def _small(loss):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 5))
    if loss == "softmax":
        return X, rng.integers(0, 3, 60).astype(np.float64)
    return X, (X @ rng.standard_normal(5) + rng.standard_normal(60) > 0).astype(np.float64)


def _prox_gradient_optimum(model, blocks, steps=20_000):
    """The l1 problem's minimizer by proximal gradient descent in numpy (step 1/L, L from the
    rows), with the per-column thresholds l1 / s_j."""
    X = np.vstack([b.X for b in blocks])
    L = 0.25 * np.linalg.norm(np.hstack([X, np.ones((len(X), 1))]), 2) ** 2 / len(X)
    L += model.l2 * max(1.0 / np.asarray(model.penalty_scale) ** 2)
    t = model.l1 / np.asarray(model.penalty_scale)
    theta = np.zeros(model.num_params)
    d = model.num_features
    for _ in range(steps):
        theta = theta - full_gradient(model, theta, blocks) / L
        theta[:d] = np.sign(theta[:d]) * np.maximum(np.abs(theta[:d]) - t / L, 0.0)
    return theta


def test_with_l1_it_is_zero_at_the_minimizer_and_the_smallest_subgradient_elsewhere():
    X, y = _small("logistic")
    source, _ = open_dataset((X, y), 2, loss="logistic")
    scale = (1.0, 0.5, 2.0, 1.0, 0.8)
    model = LinearModel("logistic", 5, l2=0.01, l1=0.08, penalty_scale=scale)
    blocks = _blocks(source)
    star = _prox_gradient_optimum(model, blocks)
    d = model.num_features
    assert 0 < np.count_nonzero(star[:d]) < d  # some weights at zero: the l1 term matters there
    grad = _data_gradient(model, star, blocks)
    assert optimality_norm(model, star, grad) < 1e-9
    # the smooth part's gradient alone is not zero at an l1 minimizer
    assert np.linalg.norm(grad + penalty_gradient(model, star)) > 1e-2
    # elsewhere: coordinate by coordinate, the subgradient of smallest magnitude
    theta = star.copy()
    theta[0] += 0.3
    zero = int(np.flatnonzero(star[:d] == 0)[0])
    g = _data_gradient(model, theta, blocks) + penalty_gradient(model, theta)
    expect = []
    for j in range(model.num_params):
        if j >= d:
            expect.append(g[j])  # the intercept: no penalty
            continue
        t = model.l1 / scale[j]
        if theta[j] != 0:
            expect.append(g[j] + t * np.sign(theta[j]))
        else:
            expect.append(0.0 if abs(g[j]) <= t else g[j] - t * np.sign(g[j]))
    assert theta[zero] == 0.0
    got = optimality_norm(model, theta, _data_gradient(model, theta, blocks))
    assert got == pytest.approx(float(np.linalg.norm(expect)), rel=1e-12)


def test_softmax_with_l1_takes_each_class_weights_subgradient_with_its_columns_threshold():
    X, y = _small("softmax")
    source, _ = open_dataset((X, y), 2, loss="softmax")
    scale = np.array([1.0, 0.5, 2.0, 1.0, 0.8])
    model = LinearModel("softmax", 5, 3, l2=0.01, l1=0.05, penalty_scale=tuple(scale))
    blocks = _blocks(source)
    theta = np.random.default_rng(6).standard_normal(model.num_params)
    theta[[1, 7, 13]] = 0.0  # a zero weight in each class's row
    data = _data_gradient(model, theta, blocks)
    g = data + penalty_gradient(model, theta)
    W, G = theta[:15].reshape(3, 5), g[:15].reshape(3, 5)
    expect = list(g[15:])  # the three intercepts: no penalty
    for k in range(3):
        for j in range(5):
            t = model.l1 / scale[j]
            if W[k, j] != 0:
                expect.append(G[k, j] + t * np.sign(W[k, j]))
            else:
                expect.append(max(abs(G[k, j]) - t, 0.0))
    got = optimality_norm(model, theta, data)
    assert got == pytest.approx(float(np.linalg.norm(expect)), rel=1e-12)
    with pytest.raises(ValueError, match="data_gradient must have 18 entries, got 1"):
        optimality_norm(model, theta, np.zeros(1))


def test_the_evaluation_job_returns_the_norms_of_the_snapshots_asked(cancer, monkeypatch):
    source, desc = cancer
    model = LinearModel("logistic", desc.d, l2=1e-2)
    blocks = _blocks(source)
    rng = np.random.default_rng(2)
    thetas = rng.standard_normal((5, model.num_params)) * 0.1
    # chunks of two snapshots: the positions asked fall in different chunks
    monkeypatch.setattr(evaluate_module, "_MAX_BROADCAST_BYTES", 2 * thetas[0].nbytes)
    objs, norms = Evaluator(source, model, desc.n).evaluate(thetas, gradients=(0, 3, 4))
    expect = [optimality_norm(model, t, _data_gradient(model, t, blocks)) for t in thetas]
    np.testing.assert_allclose(norms, [expect[0], expect[3], expect[4]], rtol=1e-12)
    np.testing.assert_allclose(objs, [objective(model, t, blocks) for t in thetas], rtol=1e-12)
    with pytest.raises(IndexError, match="out of range"):
        Evaluator(source, model, desc.n).evaluate(thetas, gradients=(5,))
    # a position asked twice: one gradient, its norm twice
    _, twice = Evaluator(source, model, desc.n).evaluate(thetas, gradients=(3, 3))
    np.testing.assert_allclose(twice, [expect[3], expect[3]], rtol=1e-12)
    # gradient sums that would not fit the driver's budget: no norm, the objectives as ever
    monkeypatch.setattr(evaluate_module, "_MAX_GRADIENT_BYTES", 3 * model.num_params * 8 - 1)
    skipped = Evaluator(source, model, desc.n).evaluate(thetas, gradients=(0,))
    assert np.isnan(skipped[1]).all() and np.array_equal(skipped[0], objs)


@pytest.mark.spark
def test_a_spark_job_gives_the_norms_of_the_one_process_path(spark, cancer):
    source, desc = cancer
    model = LinearModel("logistic", desc.d, l2=1e-2, l1=1e-3)
    thetas = np.random.default_rng(3).standard_normal((3, model.num_params)) * 0.1
    thetas[:, :4] = 0.0  # weights at zero: the l1 branch
    local = Evaluator(source, model, desc.n).evaluate(thetas, gradients=(0, 2))
    remote = Evaluator(source, model, desc.n, sc=spark.sparkContext).evaluate(
        thetas, gradients=(0, 2)
    )
    np.testing.assert_array_equal(remote[0], local[0])  # blocks added in the same order
    np.testing.assert_array_equal(remote[1], local[1])


@pytest.mark.spark
def test_a_dataframes_partitions_give_the_norms_of_its_rows(spark):
    from pyspark.ml.linalg import Vectors
    from sklearn.datasets import load_breast_cancer

    from async_spark.data.frame import open_frame, release

    X, y = load_breast_cancer(return_X_y=True)
    df = spark.createDataFrame(
        [(Vectors.dense(x.tolist()), float(t)) for x, t in zip(X, y, strict=True)],
        ["features", "label"],
    )
    source, desc = open_frame(df, partitions=3, standardize=True, loss="logistic", dense=True)
    try:
        ref_source, ref = open_dataset((X, y), 3, standardize=True, loss="logistic")
        model = LinearModel("logistic", desc.d, l2=1e-2)
        thetas = np.random.default_rng(4).standard_normal((2, model.num_params)) * 0.1
        got = Evaluator(source, model, desc.n, sc=spark.sparkContext).evaluate(
            thetas, gradients=(1,)
        )
        blocks = _blocks(ref_source)
        expect = optimality_norm(model, thetas[1], _data_gradient(model, thetas[1], blocks))
        # the same rows in other partitions: equal up to the order of the sums
        assert got[1][0] == pytest.approx(expect, rel=1e-9)
        assert got[0][1] == pytest.approx(objective(model, thetas[1], blocks), rel=1e-12)
    finally:
        release(source)


@pytest.mark.spark
def test_a_run_reports_the_norm_at_its_start_and_at_the_model_it_returns(spark, cancer):
    source, desc = cancer
    config = TrainConfig(
        data="builtin:breast_cancer",
        method="asaga",
        partitions=3,
        l2=1e-2,
        l1=1e-3,
        seed=5,
        max_updates=60,
        quiet=True,
        eval_every=0.05,
    )
    result = train_linear(config, spark=spark, dataset=cancer)
    blocks = _blocks(source)
    model = result.model
    start = init_params(model)
    assert result.start_gradient_norm == pytest.approx(
        optimality_norm(model, start, _data_gradient(model, start, blocks)), rel=1e-9
    )
    end = optimality_norm(model, result.theta, _data_gradient(model, result.theta, blocks))
    assert result.gradient_norm == pytest.approx(end, rel=1e-9)
    assert 0 < result.gradient_norm < result.start_gradient_norm
    summary = result.summary()
    assert summary["gradient_norm"] == result.gradient_norm
    assert summary["gradient_norm_start"] == result.start_gradient_norm

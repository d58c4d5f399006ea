"""The convergence test (``tol``): pyspark.ml's L-BFGS gradient test, max |g| <= tol |F|, on the
snapshots while the run trains (resident transport: by the workers that hold the blocks; job
transport: an evaluation job), with numpy references for the norm and for the model returned."""

from __future__ import annotations

import math

import numpy as np
import pytest

from async_spark.data.blocks import get_block
from async_spark.data.dataset import open_dataset
from async_spark.models.linear import (
    LinearModel,
    full_gradient,
    init_params,
    objective,
    penalty_gradient,
)
from async_spark.solvers import TrainConfig, train_linear
from async_spark.solvers.config import ConfigError
from async_spark.solvers.evaluate import Evaluator
from async_spark.solvers.recording import tolerance_met


@pytest.fixture(scope="module")
def cancer():
    return open_dataset("builtin:breast_cancer", 4, standardize=True, loss="logistic")


def _blocks(source):
    return [get_block(source, b) for b in range(source.num_blocks)]


def test_the_test_is_pyspark_mls_relative_gradient_test():
    assert tolerance_met(2.0, 2e-6, 1e-6) and not tolerance_met(2.0, 2.01e-6, 1e-6)
    assert tolerance_met(-2.0, 2e-6, 1e-6)  # |F|: a squared loss's objective is >= 0, not all
    assert not tolerance_met(2.0, 0.0, 0.0)  # tol 0: no test, even at the optimum
    assert not tolerance_met(2.0, math.nan, 1e-6)  # a norm not collected never passes


@pytest.mark.parametrize("tol", [-1e-6, math.nan, math.inf, "tight"])
def test_a_bad_tol_is_refused_by_name(tol):
    with pytest.raises(ConfigError, match="tol must be a finite number >= 0"):
        TrainConfig(tol=tol).validate()


def test_the_evaluators_norm_is_the_largest_entry_of_the_gradient(cancer):
    """In process (no Spark): the objective and max |grad F| against numpy, l2 and l1 alike."""
    source, desc = cancer
    blocks = _blocks(source)
    rng = np.random.default_rng(0)
    for l1 in (0.0, 1e-3):
        model = LinearModel("logistic", desc.d, l2=1e-2, l1=l1)
        theta = init_params(model) + 0.1 * rng.standard_normal(model.num_params)
        theta[:3] = 0.0  # weights at 0: the l1 subgradient shrinks their gradient
        value, norm = Evaluator(source, model, desc.n).objective_and_norm(theta)
        assert value == pytest.approx(objective(model, theta, blocks), rel=1e-12)
        g = full_gradient(model, theta, blocks)
        if l1:
            data = g - penalty_gradient(model, theta)
            assert not np.allclose(data, g)  # (the l2 part is in g)
            w = theta[: desc.d]
            gw = g[: desc.d]
            gw = np.where(w != 0, gw + l1 * np.sign(w), np.sign(gw) * np.maximum(abs(gw) - l1, 0))
            g = np.concatenate([gw, g[desc.d :]])
        assert norm == pytest.approx(np.max(np.abs(g)), rel=1e-10)


def test_the_side_task_returns_the_blocks_loss_and_gradient_sums(cancer):
    """What a worker sends for the convergence test: the block's loss sum, then its data
    gradient sum, bit for bit those of the loss and gradient kernels (one pass for both)."""
    from async_spark.models.linear import block_gradient_sum, block_loss_sum
    from async_spark.solvers.worker import BlockLossArgs, LinearTask

    source, desc = cancer
    model = LinearModel("logistic", desc.d, l2=1e-2)
    theta = 0.1 * np.random.default_rng(1).standard_normal(model.num_params)
    task = LinearTask(source, model, 0)
    for b, block in enumerate(_blocks(source)):
        sums, rows = task(b, theta, BlockLossArgs(gradient=True))
        assert rows == block.rows and sums.shape == (1 + model.num_params,)
        assert sums[0] == block_loss_sum(model, block, theta)
        np.testing.assert_array_equal(sums[1:], block_gradient_sum(model, block, theta))
        assert task(b, theta, BlockLossArgs()) == (sums[0], rows)  # the loss alone: the same


def _cfg(**kw):
    base = dict(
        data="builtin:breast_cancer",
        method="asaga",
        partitions=4,
        l2=1e-2,
        seed=3,
        quiet=True,
        eval_every=0.25,
        time_budget=60.0,
    )
    return TrainConfig(**{**base, **kw})


@pytest.mark.spark
@pytest.mark.parametrize(
    ("transport", "method", "tol"),
    [
        ("resident", "asaga", 1e-6),  # snapshots evaluated by the workers holding the blocks
        # an evaluation job beside the run's jobs; L-BFGS, as ASAGA makes ~20 updates/s on one
        # job per update, and 1e-4 so that the rule's own test (gtol 1e-10) does not come first
        ("jobs", "lbfgs", 1e-4),
    ],
)
def test_a_run_stops_once_a_snapshot_passes_the_test(spark, cancer, transport, method, tol):
    cfg = _cfg(tol=tol, transport=transport, method=method)
    result = train_linear(cfg, spark=spark, dataset=cancer)
    summary = result.summary()
    assert summary["stopped_by"] == "tolerance", summary
    passed = summary["tolerance"]["passed"]
    assert summary["tolerance"]["tol"] == tol
    assert passed["gradient_max"] <= tol * passed["objective"]
    assert result.wall_seconds < 30  # long before its 60 s budget
    assert passed["seconds"] <= result.wall_seconds
    assert passed["version"] <= result.engine_snapshot["version"]
    # the model returned, checked here over every row: the run went on for the few updates
    # while the snapshot was evaluated, none of which undid it
    blocks = _blocks(cancer[0])
    value = objective(result.model, result.theta, blocks)
    g = full_gradient(result.model, result.theta, blocks)
    assert np.max(np.abs(g)) <= 10 * tol * value
    assert summary["gradient_norm"] == pytest.approx(np.linalg.norm(g), rel=1e-6)


@pytest.mark.spark
def test_a_tolerance_out_of_reach_leaves_the_run_to_its_budget(spark, cancer):
    """A test that passes too early is no test: SGD on sampled rows stays in the noise ball of
    its step, far above a gradient of 1e-8 |F|, so it runs to its budget and says that no
    snapshot passed."""
    cfg = _cfg(method="sgd", batch_fraction=0.2, tol=1e-8, time_budget=3.0)
    result = train_linear(cfg, spark=spark, dataset=cancer)
    summary = result.summary()
    assert summary["stopped_by"] == "time_budget"
    assert summary["tolerance"] == {"tol": 1e-8, "passed": None}
    assert summary["gradient_norm"] > 1e-8 * summary["final_objective"]  # out of reach indeed
    off = train_linear(_cfg(tol=0.0, time_budget=1.0), spark=spark, dataset=cancer)
    assert off.summary()["tolerance"] is None and off.stopped_by == "time_budget"

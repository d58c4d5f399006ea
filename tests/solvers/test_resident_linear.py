"""Linear runs on the resident transport (real Spark): the same seeded model as one job per task."""

from __future__ import annotations

import numpy as np
import pytest

from async_spark.data.dataset import open_dataset
from async_spark.solvers import TrainConfig, train_linear

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cancer():
    return open_dataset("builtin:breast_cancer", 4, standardize=True, loss="logistic")


def _cfg(**kw):
    base = dict(
        data="builtin:breast_cancer",
        partitions=4,
        l2=1e-2,
        seed=3,
        batch_fraction=0.2,
        quiet=True,
        eval_every=1e9,
    )
    return TrainConfig(**{**base, **kw})


@pytest.mark.parametrize("method", ["saga", "sgd"])
def test_a_seeded_synchronous_run_is_bit_identical_on_both_transports(spark, cancer, method):
    runs = {
        t: train_linear(
            _cfg(method=method, max_updates=25, transport=t), spark=spark, dataset=cancer
        )
        for t in ("resident", "jobs")
    }
    np.testing.assert_array_equal(runs["resident"].theta, runs["jobs"].theta)
    assert runs["resident"].final_objective == runs["jobs"].final_objective
    assert runs["resident"].updates == runs["jobs"].updates == 25
    counts = runs["resident"].engine_snapshot["transport"]
    if method == "saga":
        # each block's table travels once, then every round commits the last one's rows
        assert counts["table_full"] == 4 and counts["table_commit"] == 4 * 24, counts
        assert counts["table_held"] == 0, counts
    else:
        assert counts["table_full"] + counts["table_held"] + counts["table_commit"] == 0


def test_asaga_on_resident_tasks_reaches_the_optimum_quickly(spark, cancer):
    from sklearn.linear_model import LogisticRegression

    from async_spark.models.linear import LinearModel, objective, pack_params

    result = train_linear(
        _cfg(method="asaga", time_budget=15.0, transport="resident"), spark=spark, dataset=cancer
    )
    blocks = [cancer[0].load(p) for p in range(4)]
    X = np.vstack([b.X for b in blocks])
    y = np.concatenate([b.y for b in blocks])
    sk = LogisticRegression(C=1.0 / (len(y) * 1e-2), tol=1e-12, max_iter=10_000).fit(X, y)
    model = LinearModel("logistic", X.shape[1], l2=1e-2)
    f_star = objective(model, pack_params(model, sk.coef_[0], sk.intercept_[0]), blocks)
    gap = (result.final_objective - f_star) / f_star
    # Thousands of updates in seconds (one Spark job per run, not per update).
    assert result.updates > 2000, result.updates
    assert gap < 1e-4, gap
    assert result.engine_snapshot["counts"]["failed"] == 0


def test_default_partitions_are_the_sessions_task_slots(spark):
    """No more blocks than tasks can run at once unless asked: the session here is local[4, 2]."""
    assert TrainConfig().partitions is None
    cfg = TrainConfig(data="builtin:breast_cancer", max_updates=5, quiet=True, eval_every=1e9)
    result = train_linear(cfg, spark=spark)
    assert spark.sparkContext.defaultParallelism == 4
    assert result.summary()["partitions"] == 4 and result.config.partitions == 4
    # in-process runs (no Spark) keep 8 emulated workers; an explicit value always wins
    assert train_linear(cfg).descriptor.num_blocks == 8
    explicit = TrainConfig(**{**cfg.as_dict(), "partitions": 3})
    assert train_linear(explicit, spark=spark).descriptor.num_blocks == 3

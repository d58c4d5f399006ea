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


def _f_star(cancer, l2):
    from sklearn.linear_model import LogisticRegression

    from async_spark.models.linear import LinearModel, objective, pack_params

    blocks = [cancer[0].load(p) for p in range(cancer[1].num_blocks)]
    X = np.vstack([b.X for b in blocks])
    y = np.concatenate([b.y for b in blocks])
    sk = LogisticRegression(C=1.0 / (len(y) * l2), tol=1e-12, max_iter=10_000).fit(X, y)
    model = LinearModel("logistic", X.shape[1], l2=l2)
    return objective(model, pack_params(model, sk.coef_[0], sk.intercept_[0]), blocks)


def test_a_resident_run_stops_at_its_target_while_its_tasks_hold_every_slot(spark, cancer):
    """4 resident tasks fill local[4]'s 4 slots, so an evaluation job would start only once
    training ends (the run went on to its time budget, reporting a time to target it had not
    stopped at): the workers evaluate the snapshots themselves."""
    target = _f_star(cancer, 1e-2) * 1.01
    result = train_linear(
        _cfg(method="asaga", time_budget=60.0, target_objective=target, eval_every=0.1),
        spark=spark,
        dataset=cancer,
    )
    assert result.stopped_by == "target_objective", result.summary()
    assert result.wall_seconds < 30.0
    assert result.time_to_target is not None and result.time_to_target <= result.wall_seconds
    reached = [f for t, _, f in result.snapshots if t <= result.time_to_target]
    assert min(reached) <= target


def test_the_workers_evaluate_a_snapshot_exactly_as_the_evaluation_job_does(spark, cancer):
    from async_spark.engine.resident import ResidentTransport
    from async_spark.models.linear import LinearModel
    from async_spark.solvers.evaluate import EvaluationUnavailable, Evaluator, WorkerEvaluator
    from async_spark.solvers.worker import LinearTask

    source, desc = cancer
    model = LinearModel("logistic", desc.d, l2=1e-2)
    thetas = np.random.default_rng(0).standard_normal((3, model.num_params))
    transport = ResidentTransport(spark, task_fn=LinearTask(source, model, seed=0))
    transport.start(desc.num_blocks, desc.num_blocks, "side-calls")
    try:
        by_workers = WorkerEvaluator(transport, model, desc.n, desc.num_blocks).objectives(thetas)
        assert transport.stats["tickets"] == 3 * desc.num_blocks
    finally:
        transport.close()
    by_job = Evaluator(source, model, desc.n, sc=spark.sparkContext).objectives(thetas)
    np.testing.assert_array_equal(by_workers, by_job)  # the same sums, in the same order
    # the Arrow job that follows a resident run (in its Python workers) sums the same way
    by_arrow = Evaluator(source, model, desc.n, sc=spark.sparkContext, spark=spark)
    assert by_arrow._rdd is None
    np.testing.assert_array_equal(by_arrow.objectives(thetas), by_job)
    with pytest.raises(EvaluationUnavailable, match="closed"):
        WorkerEvaluator(transport, model, desc.n, desc.num_blocks).objectives(thetas[:1])


def test_after_a_resident_run_the_evaluation_job_is_an_arrow_one(spark, cancer):
    """Spark keeps the Arrow tasks' Python workers (the resident job's) apart from the RDD
    tasks'; the evaluation after a resident run is a mapInArrow job, so that it runs in the
    run's warm workers instead of starting new ones. After a run of one job per task it stays
    an RDD job, in that run's workers."""
    from types import SimpleNamespace

    from async_spark.engine.resident import ResidentTransport
    from async_spark.engine.spark import SparkTransport
    from async_spark.models.linear import LinearModel
    from async_spark.solvers.linear import _evaluator
    from async_spark.solvers.methods import Problem

    source, desc = cancer
    problem = Problem(LinearModel("logistic", desc.d, l2=1e-2), source, desc)
    resident = SimpleNamespace(transport=ResidentTransport(spark))
    jobs = SimpleNamespace(transport=SparkTransport(spark.sparkContext))
    after_resident = _evaluator(spark, problem, resident)
    after_jobs = _evaluator(spark, problem, jobs)
    assert after_resident.spark is spark and after_resident._rdd is None
    assert after_jobs.spark is None and after_jobs._rdd is not None

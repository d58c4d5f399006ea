"""A DataFrame's own partitions as blocks (async_spark.data.frame) on the shared session: the
scan describes them as the driver-side scan describes the same rows, bad rows are refused with
the partition and row, and a run on them matches the run on the same rows as arrays."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from async_spark.data.dataset import open_dataset
from async_spark.data.errors import DataError
from async_spark.data.frame import GRAM_COLUMNS, open_frame, release
from async_spark.solvers import TrainConfig, train_linear
from async_spark.solvers.curvature import gram_max_eigenvalue

pytestmark = pytest.mark.spark
pytest.importorskip("sklearn")


def _frame(spark, X, y):
    from pyspark.ml.linalg import Vectors

    rows = [(Vectors.dense(x.tolist()), float(t)) for x, t in zip(X, y, strict=True)]
    return spark.createDataFrame(rows, ["features", "label"])


@pytest.fixture(scope="module")
def cancer():
    from sklearn.datasets import load_breast_cancer

    return load_breast_cancer(return_X_y=True)


@pytest.fixture(scope="module")
def cancer_df(spark, cancer):
    return _frame(spark, *cancer)


@pytest.mark.parametrize("standardize", [False, True])
def test_the_scan_describes_the_rows_as_the_driver_does(cancer, cancer_df, standardize):
    X, y = cancer
    source, desc = open_frame(
        cancer_df, partitions=3, standardize=standardize, loss="logistic", dense=True
    )
    try:
        ref_source, ref = open_dataset((X, y), 3, standardize=standardize, loss="logistic")
        assert (desc.n, desc.d, desc.classes, desc.sparse) == (569, 30, (0.0, 1.0), False)
        assert sorted(desc.rows_per_block) == sorted(ref.rows_per_block)
        assert desc.nnz == ref.nnz
        assert desc.max_row_norm_sq == pytest.approx(ref.max_row_norm_sq, rel=1e-12)
        if standardize:  # the same column scales, from the partitions' merged moments
            np.testing.assert_allclose(source.scale, ref_source.scale, rtol=1e-12)
            np.testing.assert_allclose(source.mean, ref_source.mean, rtol=1e-10, atol=1e-12)
        # the curvature is measured where the rows live, exactly (d < GRAM_COLUMNS)
        assert desc.gram_max is not None
        for intercept in (False, True):
            expect = gram_max_eigenvalue(ref_source, ref, intercept=intercept, iters=500, tol=0)
            assert desc.gram_max[intercept] == pytest.approx(expect, rel=1e-6)
    finally:
        release(source)


def test_past_the_gram_limit_the_curvature_is_the_trace_bound(spark):
    from pyspark.ml.linalg import Vectors

    d = GRAM_COLUMNS + 10
    rng = np.random.default_rng(0)
    rows = []
    for i in range(40):
        idx = np.sort(rng.choice(d, 3, replace=False))
        rows.append(
            (Vectors.sparse(d, idx.tolist(), rng.standard_normal(3).tolist()), float(i % 2))
        )
    df = spark.createDataFrame(rows, ["features", "label"])
    source, desc = open_frame(df, partitions=2, loss="logistic")
    try:
        norms = [float(np.sum(np.square(r[0].values))) for r in rows]
        assert desc.sparse and desc.d == d
        assert desc.gram_max == pytest.approx((np.mean(norms), np.mean(norms) + 1.0), rel=1e-12)
    finally:
        release(source)


def _bad(spark, case):
    from pyspark.ml.linalg import Vectors

    good = [(Vectors.dense([1.0, 2.0]), 0.0), (Vectors.dense([0.5, -1.0]), 1.0)] * 3
    if case == "nan feature":
        good[4] = (Vectors.dense([float("nan"), 1.0]), 1.0)
        return spark.createDataFrame(good, ["features", "label"])
    if case == "null label":
        from pyspark.ml.linalg import VectorUDT
        from pyspark.sql.types import DoubleType, StructField, StructType

        good[3] = (Vectors.dense([1.0, 1.0]), None)
        schema = StructType(
            [StructField("features", VectorUDT()), StructField("label", DoubleType(), True)]
        )
        return spark.createDataFrame(good, schema)
    if case == "sizes":
        good[2] = (Vectors.dense([1.0, 2.0, 3.0]), 0.0)
        return spark.createDataFrame(good, ["features", "label"])
    if case == "type":
        return spark.createDataFrame([("a", 0.0), ("b", 1.0)], ["features", "label"])
    raise AssertionError(case)


@pytest.mark.parametrize(
    ("case", "match"),
    [
        ("nan feature", r"DataFrame partition \d: column 'features' row \d: NaN or infinite"),
        ("null label", r"DataFrame partition \d: column 'label' row \d: null label"),
        ("sizes", r"feature-count mismatch"),
        ("type", r"column 'features' has type string; expected a Spark ML vector"),
    ],
)
def test_bad_rows_are_refused_naming_the_partition_and_row(spark, case, match):
    with pytest.raises(DataError, match=match) as err:
        open_frame(_bad(spark, case), partitions=1, loss="logistic")
    assert len(str(err.value).splitlines()) == 1


def test_fewer_rows_than_partitions_is_refused(spark):
    from pyspark.ml.linalg import Vectors

    df = spark.createDataFrame([(Vectors.dense([1.0]), 0.0), (Vectors.dense([2.0]), 1.0)])
    df = df.toDF("features", "label")
    with pytest.raises(DataError, match="2 rows cannot fill num_blocks=3 blocks"):
        open_frame(df, partitions=3, loss="logistic")


@pytest.mark.parametrize("partitions", [4, 8])  # 8 > the session's 4 slots: tasks hold two each
def test_a_full_gradient_run_on_the_partitions_equals_the_run_on_arrays(
    spark, cancer, cancer_df, partitions
):
    X, y = cancer
    cfg = TrainConfig(
        method="sgd",
        partitions=partitions,
        step=0.5,
        batch_fraction=1.0,
        l2=1e-2,
        max_updates=20,
        step_safeguard=False,  # its windows are per block: other blocks, other decisions
        quiet=True,
        standardize=True,
        eval_every=1e-3,
    )
    frame = open_frame(
        cancer_df, partitions=partitions, standardize=True, loss="logistic", dense=True
    )
    try:
        run = train_linear(cfg, dataset=frame, spark=spark)
    finally:
        release(frame[0])
    ref = train_linear(
        cfg, dataset=open_dataset((X, y), partitions, standardize=True, loss="logistic")
    )
    assert run.updates == ref.updates == 20
    np.testing.assert_allclose(run.theta, ref.theta, rtol=1e-10, atol=1e-13)
    # the off-clock evaluation ran over the partitions too
    assert run.summary()["final_objective"] == pytest.approx(
        ref.summary()["final_objective"], rel=1e-12
    )


def test_the_job_transport_is_refused_on_a_dataframes_partitions(spark, cancer_df):
    frame = open_frame(cancer_df, partitions=2, standardize=True, loss="logistic")
    try:
        cfg = TrainConfig(method="sgd", partitions=2, max_updates=2, quiet=True, transport="jobs")
        with pytest.raises(ValueError, match="needs the resident transport"):
            train_linear(cfg, dataset=frame, spark=spark)
    finally:
        release(frame[0])


def test_empty_partitions_are_no_blocks(spark, cancer):
    """A round-robin repartition of few rows can leave partitions empty although n >= P (each
    input partition starts at a seeded position): the blocks are the partitions that hold rows,
    and a run on them still sees every row once."""
    from pyspark.ml.linalg import Vectors

    X, y = cancer
    pick = np.r_[np.flatnonzero(y == 0)[:8], np.flatnonzero(y == 1)[:8]]
    X, y = X[pick], y[pick]
    rows = [(Vectors.dense(x.tolist()), float(t)) for x, t in zip(X, y, strict=True)]
    df = spark.createDataFrame(rows, ["features", "label"]).repartition(16)  # 1 row each
    source, desc = open_frame(df, partitions=16, loss="logistic", dense=True)
    try:
        assert desc.n == 16 and sum(desc.rows_per_block) == 16 and min(desc.rows_per_block) > 0
        assert len(source.partitions) == desc.num_blocks < 16  # some of the 16 are empty
        assert list(source.partitions) == sorted(set(source.partitions))
        cfg = TrainConfig(
            method="sgd",
            step=0.5,
            batch_fraction=1.0,
            l2=1e-2,
            max_updates=5,
            step_safeguard=False,
            quiet=True,
            standardize=False,
            eval_every=1e-3,
        )
        run = train_linear(cfg, dataset=(source, desc), spark=spark)
    finally:
        release(source)
    ref = train_linear(
        dataclasses.replace(cfg, partitions=desc.num_blocks),
        dataset=open_dataset((X, y), desc.num_blocks, loss="logistic"),
    )
    np.testing.assert_allclose(run.theta, ref.theta, rtol=1e-10, atol=1e-13)


def test_a_run_on_a_frame_refuses_resume_and_other_transports(spark, cancer_df):
    from async_spark.engine.transport import LocalTransport
    from async_spark.solvers.validation import ConfigError

    cfg = TrainConfig(method="sgd", partitions=2, max_updates=2, quiet=True)
    with pytest.raises(ConfigError, match="cannot be resumed"):
        train_linear(cfg, spark=spark, dataset=cancer_df, resume=object())
    with pytest.raises(ConfigError, match="needs the resident transport"):
        train_linear(cfg, spark=spark, dataset=cancer_df, transport=LocalTransport())
    with pytest.raises(ConfigError, match="on its own session"):
        train_linear(cfg, dataset=cancer_df)


def test_without_measuring_its_rows_a_frame_trains_lbfgs_and_refuses_the_automatic_steps(
    spark, cancer_df
):
    """open_frame(measure_rows=False) skips the job that measures the rows as trained (what a
    default fit does: L-BFGS reads no curvature). Its descriptor says so (None, not a number a
    step could be computed from); L-BFGS on it ends at the model it reaches on the measured
    frame, bit for bit; a method whose automatic step needs the rows' norms is refused with the
    reason instead of getting a step from a missing norm."""
    kwargs = dict(partitions=2, standardize=True, loss="logistic", dense=True)
    bare = open_frame(cancer_df, measure_rows=False, **kwargs)
    measured = open_frame(cancer_df, **kwargs)
    try:
        desc, full = bare[1], measured[1]
        assert desc.max_row_norm_sq is None and desc.gram_max is None
        assert full.max_row_norm_sq > 0 and full.gram_max is not None
        assert (desc.n, desc.d, desc.rows_per_block, desc.classes) == (
            full.n,
            full.d,
            full.rows_per_block,
            full.classes,
        )
        cfg = TrainConfig(method="lbfgs", partitions=2, l2=1e-2, max_updates=30, quiet=True)
        a = train_linear(cfg, dataset=bare, spark=spark)
        b = train_linear(cfg, dataset=measured, spark=spark)
        assert a.updates == b.updates > 5
        np.testing.assert_array_equal(a.theta, b.theta)
        for method in ("asaga", "ag"):
            cfg = TrainConfig(method=method, partitions=2, max_updates=5, quiet=True)
            with pytest.raises(RuntimeError, match="did not measure|was not measured"):
                train_linear(cfg, dataset=bare, spark=spark)
    finally:
        release(bare[0])
        release(measured[0])

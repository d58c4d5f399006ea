"""The Estimators on Spark Connect DataFrames: a Pipeline with pyspark's own stages, save/load."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.connect, pytest.mark.spark]

pytest.importorskip("sklearn")

COLS = [f"f{i}" for i in range(30)]
FAST = dict(method="asaga", stepSize=0.2, batchFraction=0.25, numPartitions=4, evalEvery=0.2)


@pytest.fixture(scope="module")
def cancer_rows():
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    return [(*map(float, x), float(t)) for x, t in zip(X, y, strict=True)]


def test_a_pipeline_fits_predicts_saves_and_loads_on_connect(connect, cancer_rows, tmp_path):
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import StandardScaler, VectorAssembler

    from async_spark.ml import AsyncLogisticRegression, AsyncLogisticRegressionModel

    schema = ", ".join(f"{c} double" for c in COLS) + ", label double"
    df = connect.createDataFrame(cancer_rows, schema)
    pipe = Pipeline(
        stages=[
            VectorAssembler(inputCols=COLS, outputCol="raw"),
            StandardScaler(inputCol="raw", outputCol="features", withMean=True),
            AsyncLogisticRegression(
                regParam=0.01, maxUpdates=1000, stagingDir=str(tmp_path / "staging"), **FAST
            ),
        ]
    )
    model = pipe.fit(df)
    ours = model.stages[-1]
    assert isinstance(ours, AsyncLogisticRegressionModel)
    assert ours.summary.totalUpdates == 1000
    out = model.transform(df).select("label", "prediction", "probability").collect()
    y = np.array([r.label for r in out])
    pred = np.array([r.prediction for r in out])
    prob = np.array([r.probability.toArray() for r in out])
    assert (pred == y).mean() >= 0.97
    np.testing.assert_allclose(prob.sum(axis=1), 1.0)

    path = str(tmp_path / "pipeline")
    model.write().overwrite().save(path)
    loaded = PipelineModel.load(path)
    again = loaded.transform(df).select("prediction", "probability").collect()
    np.testing.assert_array_equal([r.prediction for r in again], pred)
    np.testing.assert_array_equal([r.probability.toArray() for r in again], prob)
    np.testing.assert_array_equal(
        loaded.stages[-1].coefficients.toArray(), ours.coefficients.toArray()
    )


def test_linear_regression_fits_and_transforms_a_connect_dataframe(connect, tmp_path):
    from pyspark.ml.feature import VectorAssembler

    from async_spark.ml import AsyncLinearRegression, AsyncLinearRegressionModel

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    w = np.array([1.5, -2.0, 0.5])
    y = X @ w + 3.0 + 0.01 * rng.normal(size=400)
    df = connect.createDataFrame(
        [(*map(float, x), float(t)) for x, t in zip(X, y, strict=True)],
        "a double, b double, c double, label double",
    )
    df = VectorAssembler(inputCols=["a", "b", "c"], outputCol="features").transform(df)
    est = AsyncLinearRegression(
        regParam=0.0, maxUpdates=800, stagingDir=str(tmp_path / "staging"), **FAST
    )
    model = est.fit(df)
    np.testing.assert_allclose(model.coefficients.toArray(), w, atol=0.02)
    assert abs(model.intercept - 3.0) < 0.02
    out = model.transform(df).select("label", "prediction").collect()
    residual = np.array([r.label - r.prediction for r in out])
    assert np.sqrt(np.mean(residual**2)) < 0.05
    path = str(tmp_path / "linreg")
    model.write().overwrite().save(path)
    loaded = AsyncLinearRegressionModel.load(path)
    np.testing.assert_array_equal(loaded.coefficients.toArray(), model.coefficients.toArray())


def test_cross_validator_tunes_and_saves_on_connect(connect, cancer_rows, tmp_path):
    """pyspark's own CrossValidator over our Estimator on a Connect DataFrame: each fold fits,
    pyspark's evaluator scores it, the best model is refit, saved and loaded bit-identical."""
    from pyspark.ml.evaluation import BinaryClassificationEvaluator
    from pyspark.ml.feature import VectorAssembler
    from pyspark.ml.tuning import CrossValidator, CrossValidatorModel, ParamGridBuilder

    from async_spark.ml import AsyncLogisticRegression, AsyncLogisticRegressionModel

    schema = ", ".join(f"{c} double" for c in COLS) + ", label double"
    df = VectorAssembler(inputCols=COLS, outputCol="features").transform(
        connect.createDataFrame(cancer_rows, schema)
    )
    lr = AsyncLogisticRegression(maxUpdates=30, stagingDir=str(tmp_path / "staging"), **FAST)
    grid = ParamGridBuilder().addGrid(lr.regParam, [0.01, 10.0]).build()
    cv = CrossValidator(
        estimator=lr,
        estimatorParamMaps=grid,
        evaluator=BinaryClassificationEvaluator(),
        numFolds=2,
        seed=1,
    )
    cvm = cv.fit(df)
    assert len(cvm.avgMetrics) == 2 and all(0.0 <= m <= 1.0 for m in cvm.avgMetrics)
    assert cvm.avgMetrics[0] > 0.9  # regParam 0.01 learns; 10 may rank worse than chance
    best = cvm.bestModel
    assert isinstance(best, AsyncLogisticRegressionModel)
    # regParam 10 shrinks the weights to almost nothing: the weaker penalty must win
    assert best.getRegParam() == 0.01
    assert cvm.avgMetrics[0] > cvm.avgMetrics[1], cvm.avgMetrics
    assert lr.getRegParam() == 0.0  # the estimator itself is untouched
    path = str(tmp_path / "cv")
    cvm.write().save(path)
    again = CrossValidatorModel.load(path).bestModel
    np.testing.assert_array_equal(again.coefficients.toArray(), best.coefficients.toArray())

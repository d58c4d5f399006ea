"""pyspark.ml Estimators on the shared session: fit/transform, parity with pyspark.ml's
LogisticRegression, Pipeline save/load, CrossValidator/TrainValidationSplit, bad Params.

Kept small (breast cancer, a few hundred updates at most) so the module runs in about a minute on
two busy cores."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.spark

pytest.importorskip("sklearn")

from pyspark.ml import Pipeline, PipelineModel  # noqa: E402
from pyspark.ml.classification import LogisticRegression  # noqa: E402
from pyspark.ml.evaluation import (  # noqa: E402
    BinaryClassificationEvaluator,
    MulticlassClassificationEvaluator,
)
from pyspark.ml.feature import VectorAssembler  # noqa: E402
from pyspark.ml.linalg import Vectors  # noqa: E402
from pyspark.ml.tuning import (  # noqa: E402
    CrossValidator,
    ParamGridBuilder,
    TrainValidationSplit,
)

from async_spark.ml import (  # noqa: E402
    AsyncLinearRegression,
    AsyncLinearRegressionModel,
    AsyncLogisticRegression,
    AsyncLogisticRegressionModel,
    ParamValueError,
)

COLS = [f"f{i}" for i in range(30)]
# SAGA with an explicit step converges in ~100 updates on standardized breast cancer.
FAST = dict(method="asaga", stepSize=0.2, batchFraction=0.25, numPartitions=4, evalEvery=0.2)


@pytest.fixture(scope="module")
def cancer(spark):
    """(train, test) DataFrames of raw columns f0..f29 and label, a fixed 80/20 split."""
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(0)
    test = np.zeros(len(y), dtype=bool)
    test[rng.permutation(len(y))[: len(y) // 5]] = True
    rows = [(*map(float, x), float(t)) for x, t in zip(X, y, strict=True)]
    schema = ", ".join(f"{c} double" for c in COLS) + ", label double"
    train = spark.createDataFrame([r for r, t in zip(rows, test, strict=True) if not t], schema)
    held = spark.createDataFrame([r for r, t in zip(rows, test, strict=True) if t], schema)
    return train.cache(), held.cache()


@pytest.fixture(scope="module")
def assembled(cancer):
    va = VectorAssembler(inputCols=COLS, outputCol="features")
    train, test = cancer
    return va.transform(train).cache(), va.transform(test).cache()


@pytest.fixture(scope="module")
def pipeline_model(cancer):
    """The one well-converged fit of the module: VectorAssembler + AsyncLogisticRegression."""
    train, _ = cancer
    pipe = Pipeline(
        stages=[
            VectorAssembler(inputCols=COLS, outputCol="features"),
            # 2000 updates: a fraction of a second on resident tasks, converged whatever the
            # order results arrive in (120 gave 0.947-0.96 accuracy depending on the schedule)
            AsyncLogisticRegression(regParam=0.01, maxUpdates=2000, **FAST),
        ]
    )
    return pipe, pipe.fit(train)


@pytest.fixture(scope="module")
def fitted(pipeline_model):
    return pipeline_model[1].stages[1]


def test_fit_transform_columns_and_summary(fitted, assembled):
    _, test = assembled
    out = fitted.transform(test)
    assert {"rawPrediction", "probability", "prediction"} <= set(out.columns)
    rows = out.select("rawPrediction", "probability", "prediction", "label").collect()
    P = np.array([r.probability.toArray() for r in rows])
    R = np.array([r.rawPrediction.toArray() for r in rows])
    pred = np.array([r.prediction for r in rows])
    y = np.array([r.label for r in rows])
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    np.testing.assert_allclose(R[:, 0], -R[:, 1])
    np.testing.assert_array_equal(pred, (P[:, 1] > 0.5).astype(float))
    assert (pred == y).mean() >= 0.95
    # the single-row API agrees with transform
    r0 = out.select("features", "probability").first()
    np.testing.assert_allclose(fitted.predictProbability(r0.features), r0.probability)
    assert fitted.numFeatures == 30 and fitted.numClasses == 2 and not fitted.isMultinomial
    assert fitted.coefficientMatrix.toArray().shape == (1, 30)
    np.testing.assert_allclose(fitted.coefficients.toArray(), fitted.coefficientMatrix.toArray()[0])
    s = fitted.summary
    # its 2000 updates, or fewer where a snapshot passed the convergence test (tol, 1e-6)
    assert (s.totalUpdates, s.stoppedBy) == (2000, "max_updates") or (
        s.totalUpdates < 2000 and s.stoppedBy == "tolerance"
    ), (s.totalUpdates, s.stoppedBy)
    assert len(s.objectiveHistory) >= 2 and s.objectiveHistory[-1] < s.objectiveHistory[0]
    assert [r["seconds"] for r in s.trajectory] == sorted(r["seconds"] for r in s.trajectory)
    assert list(s.toPandas().columns) == ["seconds", "updates", "objective"]
    assert BinaryClassificationEvaluator().evaluate(out) > 0.98
    fitted.setThreshold(0.99)  # a Model Param changes predictions only
    strict = np.array([r.prediction for r in fitted.transform(test).select("prediction").collect()])
    fitted.setThreshold(0.5)
    assert strict.sum() < pred.sum()


def test_evaluate_and_the_training_summary_have_pyspark_mls_metrics(fitted, assembled):
    """model.evaluate(df) and model.summary answer pyspark.ml's summary metrics, equal to
    scikit-learn's on the model's own margins (computed here from its coefficients)."""
    from sklearn.metrics import (
        accuracy_score,
        fbeta_score,
        log_loss,
        precision_score,
        roc_auc_score,
    )

    def rows(df):
        got = df.select("features", "label").collect()
        X = np.array([r.features.toArray() for r in got])
        return X, np.array([r.label for r in got])

    w, b = fitted.coefficients.toArray(), fitted.intercept
    train, test = assembled
    X, y = rows(test)
    z = X @ w + b
    p = 1.0 / (1.0 + np.exp(-z))
    metrics = fitted.evaluate(test)
    assert metrics.accuracy == pytest.approx(accuracy_score(y, z > 0), abs=1e-12)
    assert metrics.areaUnderROC == pytest.approx(roc_auc_score(y, z), abs=1e-9)
    assert metrics.logLoss == pytest.approx(log_loss(y, p), rel=1e-6)
    assert metrics.weightedPrecision == pytest.approx(
        precision_score(y, z > 0, average="weighted"), abs=1e-12
    )
    assert metrics.weightedFMeasure(2.0) == pytest.approx(
        fbeta_score(y, z > 0, beta=2.0, average="weighted"), abs=1e-12
    )
    assert metrics.labels == [0.0, 1.0] and metrics.predictions.count() == len(y)
    Xt, yt = rows(train)
    assert fitted.summary.accuracy == pytest.approx(accuracy_score(yt, Xt @ w + b > 0), abs=1e-12)
    with pytest.raises(AttributeError, match="has no attribute 'precisionAtRecall'"):
        fitted.summary.precisionAtRecall  # noqa: B018
    # the record pickles without the training DataFrame (its metrics stay behind)
    import pickle

    back = pickle.loads(pickle.dumps(fitted.summary))
    assert back.totalUpdates == fitted.summary.totalUpdates
    with pytest.raises(AttributeError, match="has no attribute 'accuracy'"):
        back.accuracy  # noqa: B018
    # output columns turned off: evaluate names its own
    quiet = fitted.copy({fitted.predictionCol: "", fitted.probabilityCol: ""})
    assert quiet.evaluate(test).accuracy == metrics.accuracy


def test_the_summary_draws_the_figure(fitted, tmp_path):
    pytest.importorskip("matplotlib")
    png = fitted.summary.plot(tmp_path / "objective.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    (tmp_path / "sub.png").mkdir()
    with pytest.raises(ValueError, match=r"is a folder; give a file name ending in \.png"):
        fitted.summary.plot(tmp_path / "sub.png")


def test_parity_with_pyspark_logistic_regression(fitted, assembled):
    train, test = assembled
    ref = LogisticRegression(regParam=0.01, elasticNetParam=0.0, tol=1e-10, maxIter=200).fit(train)
    ours = fitted.transform(test).select("prediction", "probability").collect()
    theirs = ref.transform(test).select("prediction", "probability").collect()
    agree = np.mean([a.prediction == b.prediction for a, b in zip(ours, theirs, strict=True)])
    assert agree >= 0.97
    p_ours = np.array([r.probability[1] for r in ours])
    p_theirs = np.array([r.probability[1] for r in theirs])
    # asynchronous updates: the order of results (so the last digits of the fit) varies with
    # the machine's load
    d = np.abs(p_ours - p_theirs)
    assert d.mean() < 0.03 and np.quantile(d, 0.95) < 0.1 and d.max() < 0.3
    # coefficients on the standardized scale (where the penalty acts) are close
    import pyspark.sql.functions as F
    from pyspark.ml.stat import Summarizer

    std = train.select(Summarizer.std(F.col("features")).alias("s")).first()["s"].toArray()
    a = fitted.coefficients.toArray() * std
    b = ref.coefficients.toArray() * std
    assert np.linalg.norm(a - b) / np.linalg.norm(b) < 0.3
    # the objective the solver reports is pyspark.ml's (up to the n vs n-1 in the std)
    assert abs(fitted.summary.objectiveHistory[-1] - ref.summary.objectiveHistory[-1]) < 0.01


def test_lbfgs_ends_at_pyspark_mls_model_and_stops_by_itself(assembled):
    """The same algorithm on the same objective (up to the n vs n-1 in the std): with defaults
    but the penalty, our L-BFGS stops converged at pyspark.ml's model, to 4 digits where the
    asynchronous fit above agrees to 1."""
    train, _ = assembled
    ref = LogisticRegression(regParam=0.01, tol=1e-12, maxIter=500).fit(train)
    # (tol=0.0: its own test, not the snapshots' at 1e-6, which could come first)
    ours = AsyncLogisticRegression(method="lbfgs", regParam=0.01, tol=0.0).fit(train)
    assert ours.summary.stoppedBy == "converged"
    assert ours.summary.totalUpdates < 100
    # converged: the gradient, computed over the DataFrame's partitions, is gone
    assert ours.summary.gradientNorm < 1e-5 * ours.summary.startGradientNorm
    a, b = ours.coefficients.toArray(), ref.coefficients.toArray()
    assert np.linalg.norm(a - b) / np.linalg.norm(b) < 1e-2
    assert ours.intercept == pytest.approx(ref.intercept, rel=1e-2)
    with pytest.raises(ValueError, match="lbfgs"):
        AsyncLogisticRegression(method="lbfgs", regParam=0.01, stepSize=0.1).fit(train)


def test_lbfgs_with_elastic_net_is_owlqn_and_zeroes_pyspark_mls_coefficients(assembled):
    """With elasticNetParam > 0 both sides run OWL-QN on the same objective: the same weights
    are exactly zero and the rest agree."""
    train, _ = assembled
    options = dict(regParam=0.02, elasticNetParam=0.5)
    ref = LogisticRegression(tol=1e-12, maxIter=500, **options).fit(train)
    ours = AsyncLogisticRegression(method="lbfgs", tol=0.0, **options).fit(train)
    assert ours.summary.stoppedBy == "converged"
    # at an l1 minimizer the smallest subgradient is 0 (the smooth part's gradient is not)
    assert ours.summary.gradientNorm < 1e-5 * ours.summary.startGradientNorm
    a, b = ours.coefficients.toArray(), ref.coefficients.toArray()
    assert 5 <= int(np.sum(b == 0.0)) < b.size
    np.testing.assert_array_equal(a == 0.0, np.abs(b) < 1e-6)
    assert np.linalg.norm(a - b) / np.linalg.norm(b) < 1e-2


def test_pipeline_save_load_roundtrip(pipeline_model, cancer, tmp_path):
    _, test = cancer
    pipe, model = pipeline_model
    acc = MulticlassClassificationEvaluator(metricName="accuracy").evaluate(model.transform(test))
    assert acc >= 0.95
    pipe.write().save(str(tmp_path / "pipe"))
    assert Pipeline.load(str(tmp_path / "pipe")).getStages()[1].getMaxUpdates() == 2000
    model.write().overwrite().save(str(tmp_path / "model"))
    loaded = PipelineModel.load(str(tmp_path / "model"))
    stage = loaded.stages[1]
    assert isinstance(stage, AsyncLogisticRegressionModel)
    assert stage.getRegParam() == 0.01 and stage.uid == model.stages[1].uid
    assert not stage.hasSummary
    np.testing.assert_array_equal(
        stage.coefficients.toArray(), model.stages[1].coefficients.toArray()
    )
    a = model.transform(test).select("prediction", "probability").collect()
    b = loaded.transform(test).select("prediction", "probability").collect()
    assert [r.prediction for r in a] == [r.prediction for r in b]
    np.testing.assert_array_equal(
        [r.probability.toArray() for r in a], [r.probability.toArray() for r in b]
    )


def test_cross_validator_and_train_validation_split(assembled, tmp_path):
    train, _ = assembled
    lr = AsyncLogisticRegression(maxIter=10, **FAST)  # pyspark.ml's name, as users write it
    grid = ParamGridBuilder().addGrid(lr.regParam, [0.01, 0.1]).build()
    cv = CrossValidator(
        estimator=lr,
        estimatorParamMaps=grid,
        evaluator=BinaryClassificationEvaluator(),
        numFolds=2,
        seed=1,
    )
    cvm = cv.fit(train)
    assert len(cvm.avgMetrics) == 2 and all(m > 0.8 for m in cvm.avgMetrics)
    best = cvm.bestModel
    assert isinstance(best, AsyncLogisticRegressionModel)
    assert best.getRegParam() in (0.01, 0.1)
    assert best.getMaxUpdates() == 10 and 0 < best.summary.totalUpdates <= 10
    assert lr.getRegParam() == 0.0  # copy semantics: the estimator is untouched
    cvm.write().save(str(tmp_path / "cv"))
    from pyspark.ml.tuning import CrossValidatorModel

    again = CrossValidatorModel.load(str(tmp_path / "cv")).bestModel
    np.testing.assert_array_equal(again.coefficients.toArray(), best.coefficients.toArray())

    tvs = TrainValidationSplit(
        estimator=lr,
        estimatorParamMaps=ParamGridBuilder().addGrid(lr.maxUpdates, [10]).build(),
        evaluator=BinaryClassificationEvaluator(),
        trainRatio=0.7,
        seed=1,
    )
    assert tvs.fit(train).validationMetrics[0] > 0.8


def test_multinomial_and_linear_regression(spark, tmp_path):
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    df = spark.createDataFrame(
        [(Vectors.dense(x), float(t)) for x, t in zip(X, y, strict=True)], ["features", "label"]
    )
    # Synchronous SAGA: the same model whatever order the results arrive in (asynchronous runs
    # ended at 0.89-0.95 accuracy on a loaded machine)
    m = AsyncLogisticRegression(
        regParam=0.01, maxUpdates=300, **{**FAST, "method": "saga", "batchFraction": 1.0}
    ).fit(df)
    assert m.isMultinomial and m.numClasses == 3
    assert m.coefficientMatrix.toArray().shape == (3, 4) and len(m.interceptVector) == 3
    with pytest.raises(RuntimeError, match="coefficientMatrix"):
        m.coefficients  # noqa: B018
    out = m.transform(df)
    acc = MulticlassClassificationEvaluator(metricName="accuracy").evaluate(out)
    assert acc >= 0.95  # 0.953; scikit-learn's LogisticRegression gets 0.973
    # evaluate() and the training summary answer pyspark.ml's summary metrics
    assert m.evaluate(df).accuracy == acc and m.summary.accuracy == acc
    with pytest.raises(AttributeError, match="areaUnderROC is a binary classifier's metric"):
        m.evaluate(df).areaUnderROC  # noqa: B018
    first = out.select("features", "probability", "prediction").first()
    assert len(first.probability) == 3
    np.testing.assert_allclose(m.predictProbability(first.features), first.probability)
    m.save(str(tmp_path / "multi"))
    back = AsyncLogisticRegressionModel.load(str(tmp_path / "multi"))
    np.testing.assert_array_equal(back.coefficientMatrix.toArray(), m.coefficientMatrix.toArray())
    assert back.isMultinomial

    # least squares: petal width from the other three columns; compare with numpy lstsq
    reg_df = spark.createDataFrame(
        [(Vectors.dense(x[:3]), float(x[3])) for x in X], ["features", "label"]
    )
    reg = AsyncLinearRegression(
        maxUpdates=300, **{**FAST, "stepSize": 0.1, "batchFraction": 1.0}
    ).fit(reg_df)
    A = np.hstack([X[:, :3], np.ones((len(X), 1))])
    coef, *_ = np.linalg.lstsq(A, X[:, 3], rcond=None)
    pred = np.array([r.prediction for r in reg.transform(reg_df).select("prediction").collect()])
    best = np.sqrt(np.mean((A @ coef - X[:, 3]) ** 2))
    assert np.sqrt(np.mean((pred - X[:, 3]) ** 2)) < 1.5 * best
    from sklearn.metrics import r2_score

    metrics = reg.evaluate(reg_df)
    assert metrics.rootMeanSquaredError == pytest.approx(np.sqrt(np.mean((pred - X[:, 3]) ** 2)))
    assert metrics.r2 == pytest.approx(r2_score(X[:, 3], pred), rel=1e-9)
    assert reg.summary.meanAbsoluteError == pytest.approx(np.mean(np.abs(pred - X[:, 3])))
    # without an intercept R² is the uncentered one, as pyspark.ml's summary (throughOrigin)
    origin = AsyncLinearRegression(
        fitIntercept=False, method="lbfgs", numPartitions=4, maxUpdates=50
    ).fit(reg_df)
    pred0 = np.array(
        [r.prediction for r in origin.transform(reg_df).select("prediction").collect()]
    )
    uncentered = 1.0 - np.sum((pred0 - X[:, 3]) ** 2) / np.sum(X[:, 3] ** 2)
    assert origin.summary.r2 == pytest.approx(uncentered, rel=1e-9)
    reg.save(str(tmp_path / "reg"))
    back_reg = AsyncLinearRegressionModel.load(str(tmp_path / "reg"))
    assert back_reg.intercept == reg.intercept


BAD_PARAMS = [
    ({"regParam": -0.1}, ParamValueError, "regParam must be a finite number >= 0, got -0.1"),
    ({"elasticNetParam": 1.5}, ParamValueError, r"elasticNetParam must be in \[0, 1\]"),
    ({"method": "adam"}, ParamValueError, "method must be one of auto, sgd, asgd"),
    (
        {"stepSize": -1.0},
        ParamValueError,
        r"stepSize must be a finite number > 0.*\(or 0.0 for auto",
    ),
    ({"stepSize": "fast"}, TypeError, "stepSize must be a number or 'auto'"),
    ({"momentum": 1.0}, ParamValueError, r"momentum must be in \[0, 1\)"),
    ({"maxUpdates": 0}, ParamValueError, "maxUpdates must be an integer >= 1"),
    (
        {"batchFraction": -0.5},
        ParamValueError,
        r"batchFraction must be a finite number > 0.*\(or 0.0 for the method's default",
    ),
    ({"batchFraction": 1.5}, ParamValueError, r"batchFraction must be in \(0, 1\]"),
    ({"beta": 2.0}, ParamValueError, r"beta is not valid: beta \(partial barrier\) must be in \("),
    (
        {"tau": -2},
        ParamValueError,
        r"tau .*must be an integer >= 0, got -2 \(or -1 for no staleness",
    ),
    ({"stragglers": "sometimes"}, ParamValueError, "stragglers is not valid: unknown straggler"),
    ({"seed": -1}, ParamValueError, "seed must be an integer >= 0"),
    ({"family": "poisson"}, ParamValueError, "family must be one of auto, binomial"),
    ({"threshold": 1.2}, ParamValueError, r"threshold must be in \[0, 1\]"),
    ({"timeBudget": float("nan")}, ParamValueError, "timeBudget must be a finite number"),
    ({"stagingDir": "hdfs://nn/tmp"}, ParamValueError, "stagingDir must be a local"),
]


@pytest.mark.parametrize(("kwargs", "exc", "match"), BAD_PARAMS)
def test_bad_params_are_refused(kwargs, exc, match, assembled):
    if "stagingDir" in kwargs:  # only checked when fit starts
        with pytest.raises(exc, match=match):
            AsyncLogisticRegression(**kwargs).fit(assembled[0])
        return
    with pytest.raises(exc, match=match):
        AsyncLogisticRegression(**kwargs)
    lr = AsyncLogisticRegression()
    param, value = next(iter(kwargs.items()))
    with pytest.raises(exc, match=match):  # also through copy(extra), as ParamGridBuilder does
        lr.copy({lr.getParam(param): value})


def test_bad_combinations_and_data_are_refused(assembled, spark):
    train, _ = assembled
    with pytest.raises(ParamValueError, match="beta applies to the asynchronous methods"):
        AsyncLogisticRegression(method="saga", beta=0.5).fit(train)
    with pytest.raises(ParamValueError, match="momentum applies to hb"):
        AsyncLogisticRegression(method="asaga", momentum=0.5).fit(train)
    with pytest.raises(ValueError, match="featuresCol: no column 'feats'"):
        AsyncLogisticRegression(featuresCol="feats").fit(train)
    with pytest.raises(ValueError, match="must be a Spark ML vector"):
        AsyncLogisticRegression(featuresCol="f0").fit(train)
    df = spark.createDataFrame(
        [(Vectors.dense([1.0, 0.0]), 0.5), (Vectors.dense([0.0, 1.0]), 1.0)], ["features", "label"]
    )
    with pytest.raises(ValueError, match="class indices 0, 1, ..., K-1"):
        AsyncLogisticRegression().fit(df)
    three = spark.createDataFrame(
        [(Vectors.dense([1.0, 0.0]), float(k)) for k in range(3)], ["features", "label"]
    )
    with pytest.raises(ParamValueError, match="family='binomial' needs labels 0 and 1"):
        AsyncLogisticRegression(family="binomial").fit(three)


def test_a_resident_fit_checks_its_labels_with_the_first_pass_over_the_partitions(assembled, spark):
    """On the resident transport the fit runs no aggregation of its own: the label checks and
    the blocks' layout use the statistics of the frame's first pass (open_frame's on_scan). They
    must be the statistics the job transport's aggregation (label_stats) finds; a partition that
    dropped its label range, its fractional labels or its nonzeros from the merge would differ.
    Then what only this path does: fewer rows than numPartitions (empty partitions are no blocks),
    and the refusals, named as before."""
    from pyspark.sql import functions as F

    from async_spark.data.frame import open_frame, release
    from async_spark.ml._fit import LabelStats, label_stats

    train, _ = assembled
    odd = train.withColumn(
        "label", F.col("label") * 3 - 1 + F.when(F.col("f0") > 17, 0.5).otherwise(0.0)
    )
    seen = []
    source, _ = open_frame(odd, partitions=3, on_scan=lambda scan: seen.append(scan))
    release(source)
    from_scan = LabelStats.from_scan(seen[0], None)
    assert from_scan == label_stats(odd, "features", "label")
    assert from_scan.min == -1.0 and from_scan.max == 2.0 and from_scan.non_integer > 0

    three = spark.createDataFrame(
        [
            (Vectors.dense([1.0, 2.0]), 3.0),
            (Vectors.dense([2.0, 0.5]), 1.0),
            (Vectors.dense([0.0, 1.0]), 2.0),
        ],
        ["features", "label"],
    )
    fit = AsyncLinearRegression(numPartitions=8, tol=1e-10).fit(three)
    X = np.array([[1.0, 2.0, 1.0], [2.0, 0.5, 1.0], [0.0, 1.0, 1.0]])
    exact = np.linalg.solve(X, [3.0, 1.0, 2.0])  # 3 rows, 2 features and an intercept
    np.testing.assert_allclose(fit.coefficients.toArray(), exact[:2], atol=1e-5)
    assert fit.intercept == pytest.approx(exact[2], abs=1e-5)
    with pytest.raises(ValueError, match="fit: the DataFrame has no rows"):
        AsyncLinearRegression().fit(three.limit(0))
    with pytest.raises(ValueError, match=r"has negative \(-1\) values"):
        AsyncLogisticRegression().fit(train.withColumn("label", F.col("label") - 1))


def test_a_full_gradient_fit_is_the_same_on_both_transports(assembled):
    """transport is a Param. Resident tasks (the default) train on the DataFrame's own
    partitions (repartitioned round-robin), one job per task on a staged Parquet copy cut into
    row ranges: other blocks, the same rows. So a synchronous full-gradient method (the sum over
    every row at each update) ends at the same model up to rounding; a lost, repeated or
    differently scaled partition would not."""
    train, _ = assembled
    est = AsyncLogisticRegression(
        method="sgd",
        regParam=0.01,
        maxUpdates=15,
        stepSize=0.5,
        batchFraction=1.0,
        numPartitions=4,
        seed=3,
    )
    assert est.getTransport() == "resident"
    resident = est.fit(train)
    jobs = est.copy({est.transport: "jobs"}).fit(train)
    assert resident.summary.totalUpdates == jobs.summary.totalUpdates == 15
    np.testing.assert_allclose(
        resident.coefficients.toArray(), jobs.coefficients.toArray(), rtol=1e-9, atol=1e-12
    )
    assert resident.intercept == pytest.approx(jobs.intercept, rel=1e-9, abs=1e-12)
    assert np.abs(resident.coefficients.toArray()).max() > 0.1  # it trained
    with pytest.raises(ValueError, match="transport must be one of resident, jobs"):
        est.setTransport("carrier-pigeon")


def test_the_step_safeguard_and_the_momentum_restart_are_params(assembled):
    """stepSafeguard and momentumRestart reach the run (the CLI's --step-safeguard and
    --momentum-restart): AG with an automatic step restarts and is watched by the safeguard by
    default, and with both off it neither restarts nor records a safeguard, and so ends at
    another model; the summary says which."""
    train, _ = assembled
    est = AsyncLogisticRegression(method="ag", regParam=0.01, maxUpdates=30, numPartitions=2)
    default = est.fit(train)
    assert default.summary.momentum["restart"] is True
    guard = default.summary.stepSafeguard
    assert guard is not None and guard["final_step"] > 0
    assert guard["raised"] + guard["lowered"] == len(guard["changes"])
    plain = est.copy({est.stepSafeguard: False, est.momentumRestart: False}).fit(train)
    assert plain.summary.momentum["restart"] is False
    assert plain.summary.stepSafeguard is None
    assert plain.summary.momentum["final_beta"] == plain.summary.momentum["beta"]
    assert plain.summary.totalUpdates == default.summary.totalUpdates == 30
    assert not np.allclose(plain.coefficients.toArray(), default.coefficients.toArray())


def test_the_summary_reports_the_block_weights_of_an_asynchronous_sgd_fit(assembled):
    """Asynchronous SGD weighs results by their blocks' shares (the blockWeights Param, on by
    default): the summary gives each block's share of the recent results, which sum to one over
    the fit's partitions, and the range of the weights applied; with the Param off, or for
    SAGA, which needs no weights, there is no record."""
    train, _ = assembled
    est = AsyncLogisticRegression(method="asgd", regParam=0.01, maxUpdates=40, numPartitions=2)
    weights = est.fit(train).summary.blockWeights
    assert weights is not None and len(weights["shares"]) == 2
    assert sum(weights["shares"]) == pytest.approx(1.0, abs=1e-3)
    low, high = weights["weight_range"]
    assert 0 < low <= high
    assert est.copy({est.blockWeights: False}).fit(train).summary.blockWeights is None
    saga = est.copy({est.method: "saga", est.stepSize: 0.2}).fit(train)
    assert saga.summary.blockWeights is None


@pytest.mark.parametrize(
    ("params", "method", "stopped_by"),
    [
        # method auto: L-BFGS, stopped by its own test (1e-10) or by a snapshot's, whichever
        # comes first (CI saw both)
        ({}, "lbfgs", ("converged", "tolerance")),
        ({"batchFraction": 0.1}, "asaga", ("tolerance",)),  # a stochastic Param: ASAGA
    ],
)
def test_a_default_fit_stops_once_converged(assembled, params, method, stopped_by):
    """tol (pyspark.ml's default 1e-6): a fit with room for 10^6 updates returns once a
    snapshot's largest gradient entry is at most 1e-6 of its objective (L-BFGS: once its own
    tighter test passes), checked here over the frame's rows in numpy at the model it returned
    (on the original scale: the gradient is the standardized problem's, so the check runs
    there)."""
    from async_spark.data.blocks import Block
    from async_spark.models.linear import LinearModel, full_gradient, objective, pack_params

    train, _ = assembled
    est = AsyncLogisticRegression(
        regParam=0.01, maxUpdates=10**6, numPartitions=4, evalEvery=0.25, **params
    )
    assert est.getMethod() == "auto"
    model = est.fit(train)
    s = model.summary
    choice = s.asDict()["method_choice"]
    assert choice["asked"] == "auto" and choice["chose"] == method, choice
    assert s.stoppedBy in stopped_by and s.totalUpdates < 10**6
    rows = train.select("features", "label").collect()
    X = np.array([r.features.toArray() for r in rows])
    y = np.array([r.label for r in rows])
    mean, std = X.mean(axis=0), X.std(axis=0)
    Z = (X - mean) / std
    w = model.coefficients.toArray() * std  # the standardized problem's weights
    b = model.intercept + model.coefficients.toArray() @ mean
    lin = LinearModel("logistic", X.shape[1], l2=0.01)
    theta = pack_params(lin, w, b)
    blocks = [Block(Z, y, 0)]
    value = objective(lin, theta, blocks)
    assert np.max(np.abs(full_gradient(lin, theta, blocks))) <= 1e-5 * value


def test_a_fit_checks_the_executors_once_per_session(assembled, monkeypatch):
    """Every fit runs the executors' environment check first; a session that passed is not
    probed again (a CrossValidator fits many times); a failed check stops the fit with its fix."""
    from async_spark.engine import session

    train, _ = assembled
    probes = []
    monkeypatch.setattr(session, "_CHECKED", {})
    monkeypatch.setattr(session, "_check_executors", lambda *a: probes.append(a) or None)
    est = AsyncLogisticRegression(method="saga", maxUpdates=2, stepSize=0.2, numPartitions=2)
    est.fit(train)
    est.copy({est.regParam: 0.1}).fit(train)
    assert len(probes) == 1
    fix = "the executors' Python (/x/python) cannot import async_spark (...); give the executors"

    def refuse(*a):
        raise session.ExecutorEnvironmentError(fix)

    monkeypatch.setattr(session, "_CHECKED", {})
    monkeypatch.setattr(session, "_check_executors", refuse)
    with pytest.raises(session.ExecutorEnvironmentError, match=r"cannot import async_spark"):
        est.fit(train)


def test_the_default_staging_folder_must_be_this_users_alone(assembled, tmp_path, monkeypatch):
    """A fit that would stage under a shared /tmp folder another user could write is refused
    before anything is written there."""
    import os
    import tempfile

    monkeypatch.delenv("ASYNC_SPARK_STAGING_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = tmp_path / f"async_spark_staging-{os.getuid()}"
    root.mkdir()
    os.chmod(root, 0o777)
    train, _ = assembled
    with pytest.raises(PermissionError, match="staging directory is writable by group"):
        AsyncLogisticRegression(transport="jobs", **FAST).fit(train)  # the transport that stages
    assert list(root.iterdir()) == []

"""``standardization`` on the Estimators, as pyspark.ml: features are always scaled for training;
the Param says whether the penalty acts on the standardized coefficients (True) or on the original
ones (False). Each fit must end at its own problem's minimizer (scikit-learn at tight tolerance)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.spark

pytest.importorskip("sklearn")

from pyspark.ml.linalg import Vectors  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402

from async_spark.ml import AsyncLogisticRegression  # noqa: E402

REG = 0.05
SCALES = np.array([0.05, 0.2, 1.0, 3.0, 10.0, 100.0])


@pytest.fixture(scope="module")
def mixed_scales(spark):
    rng = np.random.default_rng(4)
    Z = rng.standard_normal((500, SCALES.size))
    y = (rng.random(500) < 1 / (1 + np.exp(-(Z @ np.linspace(-1, 1, SCALES.size))))).astype(float)
    X = Z * SCALES + 1.0
    df = spark.createDataFrame(
        [(Vectors.dense(x), float(t)) for x, t in zip(X, y, strict=True)], ["features", "label"]
    )
    return X, y, df


def _sklearn(X, y):
    fit = LogisticRegression(C=1 / (len(y) * REG), tol=1e-12, max_iter=100_000).fit(X, y)
    return fit.coef_[0]


@pytest.mark.parametrize("standardization", [True, False])
def test_standardization_chooses_which_coefficients_are_penalized(mixed_scales, standardization):
    X, y, df = mixed_scales
    std = X.std(axis=0)
    raw = _sklearn(X, y)
    scaled = _sklearn((X - X.mean(axis=0)) / std, y) / std  # on the original columns
    assert np.abs(raw - scaled).max() > 0.1 * np.abs(scaled).max()  # two different problems
    model = AsyncLogisticRegression(
        regParam=REG,
        standardization=standardization,
        method="saga",
        batchFraction=1.0,
        numPartitions=2,
        maxUpdates=1500,
        evalEvery=1e9,
    ).fit(df)
    expected = scaled if standardization else raw
    np.testing.assert_allclose(
        model.coefficients.toArray(), expected, rtol=1e-3, atol=1e-4 * np.abs(expected).max()
    )


@pytest.mark.parametrize("standardization", [True, False])
def test_without_an_intercept_the_columns_are_scaled_only(mixed_scales, standardization):
    """``fitIntercept=False``, as pyspark.ml: no intercept, and the columns scaled without
    centering (centered columns would change a model that has no intercept to absorb the
    shift). The columns here have mean 1, so a run that centered them would end elsewhere."""
    X, y, df = mixed_scales
    std = X.std(axis=0)

    def no_intercept(A):
        fit = LogisticRegression(
            C=1 / (len(y) * REG), fit_intercept=False, tol=1e-12, max_iter=100_000
        ).fit(A, y)
        return fit.coef_[0]

    expected = no_intercept(X / std) / std if standardization else no_intercept(X)
    with_intercept = _sklearn(X / std, y) / std if standardization else _sklearn(X, y)
    assert np.abs(expected - with_intercept).max() > 0.1 * np.abs(expected).max()
    est = AsyncLogisticRegression(
        regParam=REG,
        standardization=standardization,
        fitIntercept=False,
        numPartitions=2,
        tol=1e-10,
        maxIter=500,
    )
    assert est.getFitIntercept() is False
    model = est.fit(df)
    assert model.intercept == 0.0
    assert model.summary.stoppedBy in ("tolerance", "converged")  # not its update budget
    np.testing.assert_allclose(
        model.coefficients.toArray(), expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max()
    )

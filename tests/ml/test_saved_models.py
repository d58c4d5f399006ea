"""Models and an Estimator saved by earlier code (``fixtures/saved_models``, written by
``fixtures/make_saved_models.py`` before the Params moved onto pyspark's shared mixins) load, keep
their Params and predict exactly what they predicted when saved; what today's code writes has the
same Params and defaults."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest

pytestmark = pytest.mark.spark

from async_spark.ml import (  # noqa: E402
    AsyncLinearRegressionModel,
    AsyncLogisticRegression,
    AsyncLogisticRegressionModel,
)

# Params added since the fixtures were written, with their defaults: an old model or Estimator gets
# them at their default; every older Param keeps its value and its default.
ADDED = {
    "transport": "resident",
    "stepSafeguard": True,
    "momentumRestart": True,
    "momentumDamping": None,
    "blockWeights": True,
    "tol": 1e-6,
    "fitIntercept": True,
}
# Defaults changed since: a loaded Estimator keeps the default it was saved with (pyspark restores
# the saved defaultParamMap: test_an_old_estimator_loads_with_its_params), a new one writes today's.
# batchFraction 0.1 -> 0.0, "the method's default" (0.1 for SAGA, the whole block for the others);
# method "asaga" -> "auto" (lbfgs unless a stochastic Param is set: solvers/choice.py).
CHANGED = {"batchFraction": 0.0, "method": "auto"}

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "saved_models")
CLASSES = {
    "AsyncLogisticRegressionModel": AsyncLogisticRegressionModel,
    "AsyncLinearRegressionModel": AsyncLinearRegressionModel,
}


@pytest.fixture(scope="module")
def expected():
    with open(os.path.join(HERE, "expected.json")) as fh:
        return json.load(fh)


def _metadata(path):
    (part,) = glob.glob(os.path.join(path, "metadata", "part-*"))
    with open(part) as fh:
        return json.loads(fh.readline())


def _vector(spec):
    from pyspark.ml.linalg import Vectors

    if "dense" in spec:
        return Vectors.dense(spec["dense"])
    size, idx, vals = spec["sparse"]
    return Vectors.sparse(size, idx, vals)


def _plain(v):
    return v.toArray().tolist() if hasattr(v, "toArray") else v


@pytest.mark.parametrize("name", ["binomial", "multinomial", "linear"])
def test_an_old_model_loads_and_predicts_the_same(name, expected, spark):
    want = expected["models"][name]
    cls = CLASSES[want["class"]]
    model = cls.load(os.path.join(HERE, name))
    assert type(model) is cls
    params = {p.name: v for p, v in model.extractParamMap().items()}
    assert params == {**want["params"], **{k: v for k, v in ADDED.items() if k in params}}
    np.testing.assert_array_equal(model._W, want["coefficients"])
    np.testing.assert_array_equal(model._b, want["intercepts"])
    vectors = [_vector(s) for s in expected["score"]]
    df = spark.createDataFrame([(v,) for v in vectors], ["features"])
    rows = model.transform(df).select(*want["columns"]).collect()
    for col, values in want["columns"].items():  # the same rule: to the last bits of exp/BLAS,
        got = [_plain(r[col]) for r in rows]  # which vary with the CPU's SIMD (AVX-512 or not)
        if col == "prediction":
            assert got == values, col
        else:
            np.testing.assert_allclose(got, values, rtol=1e-12, atol=1e-15, err_msg=col)
    assert [model.predict(v) for v in vectors] == want["columns"]["prediction"]


def test_an_old_estimator_loads_with_its_params(expected, tmp_path):
    est = AsyncLogisticRegression.load(os.path.join(HERE, "estimator"))
    assert {p.name: v for p, v in est.extractParamMap().items()} == {
        **expected["estimator"],
        **ADDED,
    }
    with pytest.raises(ValueError, match="regParam"):  # still checked Params
        est.setRegParam(-1.0)
    old = _metadata(os.path.join(HERE, "estimator"))
    AsyncLogisticRegression(**old["paramMap"]).save(str(tmp_path / "estimator"))
    new = _metadata(str(tmp_path / "estimator"))
    assert new["paramMap"] == old["paramMap"]
    assert new["defaultParamMap"] == {**old["defaultParamMap"], **ADDED, **CHANGED}


@pytest.mark.parametrize("name", ["binomial", "linear"])
def test_the_saved_params_and_defaults_are_unchanged(name, expected, tmp_path):
    """Today's Params write the same paramMap and defaultParamMap as the code of the fixtures."""
    old = _metadata(os.path.join(HERE, name))
    model = CLASSES[expected["models"][name]["class"]].load(os.path.join(HERE, name))
    fresh = type(model)._from_arrays(
        model._W, model._b, num_classes=model._num_classes, multinomial=model._multinomial
    )
    fresh._set(**old["paramMap"])  # a model whose defaults are today's
    fresh.save(str(tmp_path / "again"))
    new = _metadata(str(tmp_path / "again"))
    assert new["paramMap"] == old["paramMap"]
    added = {k: v for k, v in {**ADDED, **CHANGED}.items() if k in new["defaultParamMap"]}
    assert new["defaultParamMap"] == {**old["defaultParamMap"], **added}
    assert {k: new[k] for k in ("numFeatures", "numClasses", "isMultinomial", "formatVersion")} == {
        k: old[k] for k in ("numFeatures", "numClasses", "isMultinomial", "formatVersion")
    }

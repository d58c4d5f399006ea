"""Standardized training, raw-scale models: model.npz applies to the data as the user has it."""

from __future__ import annotations

import numpy as np
import pytest

from async_spark.data.dataset import open_dataset
from async_spark.models.linear import margins
from async_spark.solvers import TrainConfig, load_linear_model, train_linear, write_run


@pytest.mark.parametrize(
    "spec, loss",
    [
        ("builtin:breast_cancer", "logistic"),  # dense: centered and scaled
        ("builtin:synthetic?n=800&d=60&nnz=8&seed=2", "logistic"),  # sparse: scaled only
        ("builtin:digits", "softmax"),
    ],
)
def test_model_npz_on_raw_features_gives_the_trained_margins(tmp_path, spec, loss):
    assert TrainConfig().standardize is True  # the default, as pyspark.ml
    cfg = TrainConfig(
        data=spec, loss=loss, method="saga", partitions=2, max_updates=20, quiet=True, seed=1
    )
    scaled = open_dataset(spec, 2, loss=loss, standardize=True)
    raw = open_dataset(spec, 2, loss=loss, standardize=False)
    result = train_linear(cfg, dataset=scaled)
    write_run(result, tmp_path)
    saved = load_linear_model(tmp_path / "model.npz")
    W = np.atleast_2d(saved["weights"])
    b = np.atleast_1d(saved["intercept"])
    for p in range(2):
        xs, xr = scaled[0].load(p).X, raw[0].load(p).X
        trained = margins(result.model, xs, result.theta).reshape(xs.shape[0], -1)
        np.testing.assert_allclose(xr @ W.T + b, trained, rtol=1e-9, atol=1e-9)
    # Not the scaled weights: a column's scale matters.
    assert not np.allclose(W.ravel(), result.theta[: W.size])
    assert result.summary()["standardize"] is True

"""Which weights the penalty acts on when the columns are standardized.

``penalty_on="standardized"`` (the default, as pyspark.ml and scikit-learn after a StandardScaler)
and ``"original"`` (scaling as a preconditioner only) are different problems with different
minimizers; each run must end at its own problem's minimizer, computed here by scikit-learn at a
tight tolerance on the features as that problem states them.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from async_spark.solvers import TrainConfig, train_linear

L2 = 0.05
SCALES = np.array([0.05, 0.2, 1.0, 1.0, 3.0, 10.0, 30.0, 100.0])


@pytest.fixture(scope="module")
def columns_of_many_scales():
    rng = np.random.default_rng(3)
    Z = rng.standard_normal((600, SCALES.size))
    y = (rng.random(600) < 1 / (1 + np.exp(-(Z @ np.linspace(-1, 1, SCALES.size))))).astype(float)
    return Z * SCALES + 2.0, y  # offset: dense standardization also centers


def _objective(X, y, w, b, weights=None):
    z = X @ w + b
    pen = w if weights is None else w * weights
    return float(np.mean(np.logaddexp(0, z) - y * z) + 0.5 * L2 * pen @ pen)


def _sklearn(X, y):
    fit = LogisticRegression(C=1 / (len(y) * L2), tol=1e-12, max_iter=100_000).fit(X, y)
    return fit.coef_[0], float(fit.intercept_[0])


def _train(data, penalty_on, method, updates, **options):
    given = dict(batch_fraction=1.0, eval_every=1e9)
    cfg = TrainConfig(
        data=data,
        method=method,
        l2=L2,
        penalty_on=penalty_on,
        partitions=2,
        max_updates=updates,
        quiet=True,
        **{**given, **options},
    )
    result = train_linear(cfg)
    w, b = result.coefficients()
    return result, np.ravel(w), float(np.ravel(b)[0])


@pytest.mark.parametrize("method, updates", [("saga", 1500), ("apg", 800), ("ag", 3000)])
def test_original_penalty_ends_at_the_raw_problems_minimizer(
    columns_of_many_scales, method, updates
):
    X, y = columns_of_many_scales
    w_star, b_star = _sklearn(X, y)
    f_star = _objective(X, y, w_star, b_star)
    result, w, b = _train((X, y), "original", method, updates)
    f = _objective(X, y, w, b)
    assert (f - f_star) / f_star < 1e-6, (method, f, f_star)
    np.testing.assert_allclose(w, w_star, rtol=1e-3, atol=1e-4 * np.abs(w_star).max())
    # the run's reported objective is the raw problem's, not the scaled one's
    assert result.final_objective == pytest.approx(f, rel=1e-9)


def test_standardized_penalty_ends_at_the_scaled_problems_minimizer(columns_of_many_scales):
    X, y = columns_of_many_scales
    mean, std = X.mean(axis=0), X.std(axis=0)
    v_star, c_star = _sklearn((X - mean) / std, y)
    w_star = v_star / std  # the same model on the original columns
    f_star = _objective(X, y, w_star, c_star - w_star @ mean, weights=std)
    result, w, b = _train((X, y), "standardized", "saga", 600)
    assert (_objective(X, y, w, b, weights=std) - f_star) / f_star < 1e-6
    np.testing.assert_allclose(w, w_star, rtol=1e-3, atol=1e-4 * np.abs(w_star).max())
    # and it is another problem: the raw problem's minimizer is far from this one
    w_raw, _ = _sklearn(X, y)
    assert np.abs(w_raw - w_star).max() > 0.1 * np.abs(w_star).max()


def test_momentum_without_a_prox_refuses_l1():
    from async_spark.solvers.config import ConfigError

    with pytest.raises(ConfigError, match="prox"):
        TrainConfig(method="ag", l1=0.01).validate()
    TrainConfig(method="apg", l1=0.01).validate()


@pytest.mark.parametrize("layout", ["dense", "sparse"])
@pytest.mark.parametrize("method", ["lbfgs", "ag"])
def test_without_an_intercept_the_scaled_columns_are_not_centered(
    columns_of_many_scales, layout, method
):
    """``fit_intercept=False``: the intercept stays 0 and the columns are scaled only (dense
    ones not centered on load, sparse ones not centered implicitly by the model), so the run
    ends at the minimizer of the problem without an intercept on the scaled columns."""
    import scipy.sparse as sp

    X, y = columns_of_many_scales
    if layout == "sparse":  # a third of the entries zero; the columns' means stay far from 0
        keep = np.random.default_rng(5).random(X.shape) > 1 / 3
        X = X * keep
    std = X.std(axis=0)
    fit = LogisticRegression(
        C=1 / (len(y) * L2), fit_intercept=False, tol=1e-12, max_iter=100_000
    ).fit(X / std, y)
    w_star = fit.coef_[0] / std
    f_star = _objective(X, y, w_star, 0.0, weights=std)
    data = (sp.csr_matrix(X), y) if layout == "sparse" else (X, y)
    result, w, b = _train(
        data, "standardized", method, 3000, fit_intercept=False, tol=1e-10, eval_every=0.05
    )
    assert result.model.fit_intercept is False and result.summary()["fit_intercept"] is False
    assert b == 0.0
    assert (_objective(X, y, w, 0.0, weights=std) - f_star) / f_star < 1e-6
    np.testing.assert_allclose(w, w_star, rtol=1e-3, atol=1e-4 * np.abs(w_star).max())
    assert result.final_objective == pytest.approx(f_star, rel=1e-6)


def test_the_command_line_and_the_config_take_fit_intercept():
    import argparse

    from async_spark.cli.train import add_train_arguments, objective_line, train_configs
    from async_spark.solvers.config import ConfigError

    p = argparse.ArgumentParser()
    add_train_arguments(p)
    for argv, want in (([], True), (["--no-fit-intercept"], False), (["--fit-intercept"], True)):
        args = p.parse_args(["--data", "builtin:breast_cancer", *argv])
        assert [c.fit_intercept for c in train_configs(args)] == [want]
    with pytest.raises(ConfigError, match="--fit-intercept must be true or false"):
        TrainConfig(fit_intercept="no").validate()
    row = dict(loss="logistic", l2=0.01, l1=0.0, standardize=True, penalty_on="standardized")
    assert "no intercept" in objective_line({**row, "fit_intercept": False})
    assert "intercept" not in objective_line(row)

"""Held-out metrics of a saved model against scikit-learn's, and the refusals of bad models and
labels (no Spark: ``async-spark score`` reads the data in its own process)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file, load_breast_cancer, load_diabetes, load_digits
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import (
    accuracy_score,
    log_loss,
    mean_absolute_error,
    mean_squared_error,
    r2_score,
    roc_auc_score,
)

from async_spark.cli import main
from async_spark.models.scoring import HeldOutScores, read_saved_model


def _save(path, weights, intercept, classes) -> None:
    np.savez(path, weights=weights, intercept=intercept, classes=np.asarray(classes, float))


def _scores(path, X, y, blocks: int = 3) -> dict:
    """The metrics with the rows split into ``blocks`` blocks: sums must not depend on it."""
    scores = HeldOutScores(read_saved_model(path))
    for rows in np.array_split(np.arange(len(y)), blocks):
        scores.add(X[rows], y[rows], "test rows", int(rows[0]))
    return scores.metrics()


def test_binary_metrics_match_scikit_learn(tmp_path) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    y = np.where(y == 1, 7.0, -3.0)  # labels other than 0/1: the classes map them
    fit = LogisticRegression(max_iter=5000).fit(X[:400], y[:400])
    path = tmp_path / "model.npz"
    _save(path, fit.coef_[0], fit.intercept_[0], fit.classes_)
    Xt, yt = X[400:], y[400:]
    got = _scores(path, Xt, yt)
    assert got["loss"] == "logistic" and got["rows"] == len(yt)
    assert got["accuracy"] == pytest.approx(accuracy_score(yt, fit.predict(Xt)), abs=1e-15)
    assert got["log_loss"] == pytest.approx(log_loss(yt, fit.predict_proba(Xt)), rel=1e-9)
    assert got["auc"] == pytest.approx(roc_auc_score(yt, fit.decision_function(Xt)), rel=1e-12)
    # the same on CSR rows, and ties in the scores count one half (all margins equal: 0.5)
    assert _scores(path, sp.csr_matrix(Xt), yt)["auc"] == pytest.approx(got["auc"], rel=1e-12)
    _save(path, np.zeros(X.shape[1]), 0.0, fit.classes_)
    assert _scores(path, Xt, yt)["auc"] == 0.5


def test_multinomial_and_least_squares_metrics_match_scikit_learn(tmp_path) -> None:
    X, y = load_digits(return_X_y=True)
    fit = LogisticRegression(max_iter=5000).fit(X[:1200], y[:1200])
    path = tmp_path / "softmax.npz"
    _save(path, fit.coef_, fit.intercept_, fit.classes_)
    Xt, yt = X[1200:], y[1200:].astype(float)
    got = _scores(path, Xt, yt)
    assert got["loss"] == "softmax" and "auc" not in got
    assert got["accuracy"] == pytest.approx(accuracy_score(yt, fit.predict(Xt)), abs=1e-15)
    assert got["log_loss"] == pytest.approx(log_loss(yt, fit.predict_proba(Xt)), rel=1e-9)

    X, y = load_diabetes(return_X_y=True)
    ridge = Ridge(alpha=0.1).fit(X[:300], y[:300])
    path = tmp_path / "squares.npz"
    _save(path, ridge.coef_, ridge.intercept_, [])
    Xt, yt = X[300:], y[300:]
    got = _scores(path, Xt, yt, blocks=4)
    predicted = ridge.predict(Xt)
    assert got["loss"] == "squares"
    assert got["rmse"] == pytest.approx(mean_squared_error(yt, predicted) ** 0.5, rel=1e-12)
    assert got["mae"] == pytest.approx(mean_absolute_error(yt, predicted), rel=1e-12)
    assert got["r2"] == pytest.approx(r2_score(yt, predicted), rel=1e-10)
    # a target far from 0: R² from sums about a shift, not from sum y^2 - (sum y)^2 / n
    offset = 1e8
    _save(path, ridge.coef_, ridge.intercept_ + offset, [])
    got = _scores(path, Xt, yt + offset, blocks=4)
    assert got["r2"] == pytest.approx(r2_score(yt, predicted), rel=1e-6)


def test_one_class_has_no_roc_area_and_unknown_labels_are_named(tmp_path) -> None:
    path = tmp_path / "model.npz"
    _save(path, np.array([1.0, -1.0]), 0.5, [0, 1])
    X = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    got = _scores(path, X, np.ones(3), blocks=1)
    assert got["auc"] is None and got["accuracy"] == pytest.approx(2 / 3)
    scores = HeldOutScores(read_saved_model(path))
    with pytest.raises(ValueError, match=r"test\.svm: row 12 has label 2, not one of the model's"):
        scores.add(X, np.array([0.0, 2.0, 1.0]), "test.svm", first_row=10)
    _save(path, np.ones((3, 2)), np.zeros(3), [1, 4, 9])
    scores = HeldOutScores(read_saved_model(path))
    for label in (0.0, 2.0, 12.0):  # below, between and above the classes
        with pytest.raises(ValueError, match=f"row 2 has label {label:g}, not one of"):
            scores.add(X, np.array([4.0, label, 9.0]), "rows")


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"weights": np.ones(3), "intercept": 0.0}, "missing array.*classes"),
        ({"weights": np.ones((2, 3)), "intercept": np.zeros(3), "classes": [0, 1]}, "shape"),
        ({"weights": np.ones(3), "intercept": 0.0, "classes": [0, 1, 2]}, "3 classes do not"),
        ({"weights": np.array([1.0, np.nan]), "intercept": 0.0, "classes": [0, 1]}, "finite"),
        ({"weights": np.array(["a"]), "intercept": 0.0, "classes": [0, 1]}, "numeric"),
        ({"weights": np.ones((2, 3)), "intercept": np.zeros(2), "classes": []}, "0 classes do"),
        ({"weights": np.ones((3, 3)), "intercept": np.zeros(3), "classes": [2, 0, 1]}, "increas"),
    ],
)
def test_a_model_file_that_is_not_a_linear_model_is_refused(tmp_path, arrays, message) -> None:
    path = tmp_path / "model.npz"
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=message):
        read_saved_model(path)


def test_pickled_or_missing_model_files_are_refused(tmp_path) -> None:
    path = tmp_path / "model.npz"
    np.savez(path, weights=np.array([{"x": 1}], dtype=object), intercept=0.0, classes=[0, 1])
    with pytest.raises(ValueError, match="not a model.npz of plain arrays"):
        read_saved_model(path)  # never unpickled
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="not a model.npz of plain arrays"):
        read_saved_model(tmp_path / "junk.npz")
    with pytest.raises(ValueError, match="no such model file"):
        read_saved_model(tmp_path / "elsewhere")
    for method in ("saga", "asaga"):  # train --method saga,asaga --out DIR: one folder each
        (tmp_path / "runs" / method).mkdir(parents=True)
        _save(tmp_path / "runs" / method / "model.npz", np.ones(2), 0.0, [0, 1])
    with pytest.raises(ValueError, match=r"runs: holds the runs asaga, saga; name one, e\.g\."):
        read_saved_model(tmp_path / "runs")
    assert read_saved_model(tmp_path / "runs" / "saga").model.loss == "logistic"


def test_the_score_command_reads_libsvm_and_writes_its_json(tmp_path, capsys) -> None:
    """The rows of a LIBSVM file stop short of the model's last feature (padded, not refused);
    an index past it is refused naming the file and line; the JSON is the RESULT line's."""
    X, y = load_breast_cancer(return_X_y=True)
    fit = LogisticRegression(max_iter=5000).fit(X, y)
    run = tmp_path / "run"
    run.mkdir()
    W = np.append(fit.coef_[0], 0.0)  # one feature more than the file's rows use
    _save(run / "model.npz", W, fit.intercept_[0], fit.classes_)
    data = tmp_path / "test.svm"
    dump_svmlight_file(X[:150], y[:150], str(data), zero_based=False)
    out = tmp_path / "metrics.json"
    assert main(["score", "--model", str(run), "--data", str(data), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    result = json.loads(printed[-1].removeprefix("RESULT "))
    assert json.loads(out.read_text()) == result and result["rows"] == 150
    assert result["accuracy"] == pytest.approx(accuracy_score(y[:150], fit.predict(X[:150])))
    assert printed[0].startswith(f"150 rows of {data}, model {run / 'model.npz'} (logistic, 2")
    _save(run / "model.npz", fit.coef_[0][:20], fit.intercept_[0], fit.classes_)
    assert main(["score", "--model", str(run), "--data", str(data)]) == 2
    assert f"{data}:1: feature index 21 out of range [1, 20]" in capsys.readouterr().err
    assert main(["score", "--model", str(run), "--data", "builtin:breast_cancer"]) == 2
    err = capsys.readouterr().err
    assert "builtin:breast_cancer: rows of 30 features, the model" in err and "says 20" in err
    import pandas as pd

    table = tmp_path / "test.parquet"
    pd.DataFrame({"features": list(X[:40]), "label": y[:40]}).to_parquet(table)
    assert main(["score", "--model", str(run), "--data", str(table)]) == 2
    err = capsys.readouterr().err
    assert f"{table}: column 'features': feature-count mismatch, arrays have 30 features" in err
    assert f"the model {run / 'model.npz'} says 20" in err

"""Sizes refused before allocation: a feature index or dimension whose dense model would not fit
the memory limit ends in one DataError naming the file, the line and the limit."""

from __future__ import annotations

import numpy as np
import pytest

from async_spark.data import DataError, open_dataset
from async_spark.data.limits import LIMIT_ENV, feature_limit, max_model_bytes


@pytest.fixture
def small_limit(monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "800")  # 100 float64: d + 1 <= 100 for one output
    return 800


def test_the_limit_comes_from_memory_or_the_environment(monkeypatch):
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    nbytes, why = max_model_bytes()
    assert nbytes >= 2**27 and "1/8 of this machine's" in why and LIMIT_ENV in why
    assert feature_limit().max_features == nbytes // 8 - 1
    for raw, expected in (("4g", 4 * 2**30), ("1.5M", 3 * 2**19), ("512kb", 2**19), ("77", 77)):
        monkeypatch.setenv(LIMIT_ENV, raw)
        assert max_model_bytes()[0] == expected
    assert feature_limit(3).max_features == 77 // 24 - 1
    for bad in ("lots", "-5", "0", "4x", "nan"):
        monkeypatch.setenv(LIMIT_ENV, bad)
        with pytest.raises(ValueError, match=f"{LIMIT_ENV} must be a size"):
            max_model_bytes()


def test_an_index_above_the_limit_names_its_file_and_line(tmp_path, small_limit):
    path = tmp_path / "wide.svm"
    path.write_text("1 1:0.5\n0 99:1.0\n# a comment\n1 2:1 100:2.5\n0 1:1\n")
    with pytest.raises(DataError) as err:
        open_dataset(str(path), 2, loss="logistic")
    message = str(err.value)
    assert message.startswith(f"{path}:4: feature index 100 is above the limit of 99 features")
    assert "(d + 1 float64) must fit in" in message and LIMIT_ENV in message
    assert len(message.splitlines()) == 1
    path.write_text("1 1:0.5\n0 99:1.0\n")  # d = 99: the model of 100 entries fits
    assert open_dataset(str(path), 1, loss="logistic")[1].d == 99


def test_the_default_limit_refuses_the_huge_index_before_any_allocation(tmp_path, monkeypatch):
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    path = tmp_path / "huge.svm"
    path.write_text("1 1:0.5\n0 99999999999:1.0\n1 2:1\n0 1:1\n")
    with pytest.raises(DataError, match=rf"^{path}:2: feature index 99999999999 is above"):
        open_dataset(str(path), 1, loss="logistic")


def test_softmax_outputs_tighten_the_limit_and_the_line_is_found_again(tmp_path, small_limit):
    # three classes: 3 (d + 1) <= 100 -> d <= 32; index 40 passes the one-output parse (99)
    path = tmp_path / "classes.svm"
    path.write_text("0 1:1\n1 5:1\n2 40:1\n0 2:1\n")
    with pytest.raises(DataError, match=rf"^{path}:3: feature index 40 is above the limit of 32 "):
        open_dataset(str(path), 1, loss="softmax")
    assert open_dataset(str(path), 1)[1].d == 40  # without softmax: one output


def test_an_explicit_dimension_above_the_limit_is_refused_up_front(tmp_path, small_limit):
    path = tmp_path / "d.svm"
    path.write_text("1 1:0.5\n0 2:1\n")
    with pytest.raises(ValueError, match="num_features=1000 is above the limit of 99 features"):
        open_dataset(str(path), 1, num_features=1000)
    X = np.zeros((4, 200))
    with pytest.raises(DataError, match=r"^arrays \(X, y\): d=200 with 1 outputs is above"):
        open_dataset((X, np.array([0.0, 1.0, 0.0, 1.0])), 1)

"""Table of bad inputs: each raises DataError naming the file and line, or the column."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from async_spark.data import DataError, open_dataset

GOOD = "1 1:0.5 3:2\n-1 2:1\n"

# (id, file text, open_dataset kwargs, regex the message must match; {f} = the file name)
LIBSVM_CASES = [
    ("missing-colon", GOOD + "1 1:2 5\n", {}, r"{f}:3: expected 'index:value' \(token '5'\)"),
    ("double-colon", GOOD + "1 1:2:3\n", {}, r"{f}:3: expected 'index:value'"),
    ("empty-value", "1 1:\n", {}, r"{f}:1: index and value must be non-empty"),
    ("label-is-feature", "1:2 3:4\n", {}, r"{f}:1: line must start with a label"),
    ("bad-label", GOOD + "abc 1:1\n", {}, r"{f}:3: label is not a number \(token 'abc'\)"),
    ("bad-value", GOOD + "1 1:1e\n", {}, r"{f}:3: value is not a number \(token '1:1e'\)"),
    ("bad-index", "1 x:1\n", {}, r"{f}:1: index must be a positive integer \(token 'x:1'\)"),
    ("fraction-index", "1 1.5:1\n", {}, r"{f}:1: index must be a positive integer"),
    ("zero-index", GOOD + "1 0:1\n", {}, r"{f}:3: feature index must be >= 1"),
    ("negative-index", "1 -2:1\n", {}, r"{f}:1: feature index must be >= 1"),
    (
        "index-above-d",
        GOOD + "1 7:1\n",
        {"num_features": 5},
        r"{f}:3: feature index 7 out of range \[1, 5\]",
    ),
    ("not-increasing", "1 3:1 2:1\n", {}, r"{f}:1: feature indices must be strictly increasing"),
    ("duplicate-index", "1 2:1 2:1\n", {}, r"{f}:1: feature indices must be strictly increasing"),
    ("nan-value", GOOD + "1 1:nan\n", {}, r"{f}:3: value is NaN or infinite \(token '1:nan'\)"),
    ("inf-value", "1 1:-inf\n", {}, r"{f}:1: value is NaN or infinite"),
    ("overflow-value", "1 1:1e999\n", {}, r"{f}:1: value is NaN or infinite"),
    ("inf-label", GOOD + "inf 1:1\n", {}, r"{f}:3: label is NaN or infinite"),
    ("qid", "1 qid:3 1:1\n", {}, r"{f}:1: qid tokens \(ranking data\) are not supported"),
    ("control-byte", "1 1:1\x00\n", {}, r"{f}:1: control byte 0"),
    ("empty-file", "", {}, r"{f}: empty input"),
    ("only-comments", "# nothing\n\n   \n", {}, r"{f}: empty input"),
    (
        "three-labels-logistic",
        GOOD + "2 1:1\n",
        {"loss": "logistic"},
        r"{f}: loss 'logistic' needs exactly 2 label values, found 3 \(-1, 1, 2\); use loss='softmax'",
    ),
    ("one-label-logistic", "1 1:1\n1 2:1\n", {"loss": "logistic"}, r"{f}: .*found 1 \(1\)"),
    (
        "fractional-softmax",
        GOOD + "0.5 1:1\n",
        {"loss": "softmax"},
        r"{f}: .*integer class labels, found 0.5",
    ),
    (
        "real-labels-auto",
        GOOD + "0.25 1:1\n",
        {"loss": "auto"},
        r"{f}: loss 'auto' chooses .*found the non-integer label 0.25; for real-valued labels "
        r"use loss='squares'",
    ),
    (
        "one-label-auto",
        "1 1:1\n1 2:1\n",
        {"loss": "auto"},
        r"{f}: loss 'auto' needs at least 2 label values, found 1 \(1\)",
    ),
    ("compressed", None, {}, r"{f}: compressed files are not supported"),
]


@pytest.mark.parametrize("case", LIBSVM_CASES, ids=[c[0] for c in LIBSVM_CASES])
def test_libsvm_errors(tmp_path, case) -> None:
    name, text, kwargs, pattern = case
    path = tmp_path / ("data.svm.gz" if text is None else "data.svm")
    path.write_bytes(b"\x1f\x8b" if text is None else text.encode())
    with pytest.raises(DataError, match=pattern.format(f=str(path).replace(".", r"\."))):
        open_dataset(str(path), 1, **kwargs)


def test_missing_path(tmp_path) -> None:
    with pytest.raises(DataError, match="no such file"):
        open_dataset(str(tmp_path / "nope.svm"), 1)
    with pytest.raises(DataError, match="only local paths"):
        open_dataset("hdfs://host/x.svm", 1)


def _vector_type() -> pa.DataType:
    return pa.struct(
        [
            ("type", pa.int8()),
            ("size", pa.int32()),
            ("indices", pa.list_(pa.int32())),
            ("values", pa.list_(pa.float64())),
        ]
    )


def _vec(size: int, idx: list[int], vals: list[float]) -> dict:
    return {"type": 0, "size": size, "indices": idx, "values": vals}


def _write(path, features, labels, ftype=None, ltype=None) -> None:
    ltype = pa.float64() if ltype is None else ltype
    table = pa.table(
        {"features": pa.array(features, type=ftype), "label": pa.array(labels, type=ltype)}
    )
    pq.write_table(table, path)


PARQUET_CASES = [
    (
        "string-features",
        lambda p: _write(p, ["a", "b"], [0.0, 1.0]),
        {},
        r"{f}: column 'features' has type string; expected a Spark ML vector",
    ),
    (
        "string-labels",
        lambda p: _write(p, [[1.0], [2.0]], ["a", "b"], ltype=pa.string()),
        {},
        r"{f}: label column 'label' has type string",
    ),
    (
        "missing-column",
        lambda p: pq.write_table(pa.table({"x": [1.0]}), p),
        {},
        r"{f}: no column 'features' \(columns: x\)",
    ),
    (
        "array-length-mismatch",
        lambda p: _write(p, [[1.0, 2.0], [1.0]], [0.0, 1.0]),
        {},
        r"{f}: column 'features' row 1: feature-count mismatch",
    ),
    (
        "vector-size-mismatch",
        lambda p: _write(p, [_vec(4, [0], [1.0]), _vec(5, [1], [1.0])], [0.0, 1.0], _vector_type()),
        {},
        r"{f}: column 'features' row 1: feature-count mismatch, vector size 5 vs 4",
    ),
    (
        "vector-index-out-of-range",
        lambda p: _write(p, [_vec(4, [0, 4], [1.0, 2.0])], [0.0], _vector_type()),
        {},
        r"{f}: column 'features' row 0: feature index 4 out of range \[0, 4\)",
    ),
    (
        "nan-in-array",
        lambda p: _write(p, [[1.0, 2.0], [np.nan, 1.0]], [0.0, 1.0]),
        {},
        r"{f}: column 'features' row 1: NaN or infinite value",
    ),
    (
        "null-label",
        lambda p: _write(p, [[1.0], [2.0]], [0.0, None]),
        {},
        r"{f}: column 'label' row 1: null label",
    ),
    (
        "three-labels-logistic",
        lambda p: _write(p, [[1.0], [2.0], [3.0]], [0.0, 1.0, 2.0]),
        {"loss": "logistic"},
        r"{f} column 'label': loss 'logistic' needs exactly 2 label values",
    ),
    (
        "not-parquet",
        lambda p: p.write_bytes(b"hello"),
        {"format": "parquet"},
        r"{f}: not a readable Parquet file",
    ),
]


@pytest.mark.parametrize("case", PARQUET_CASES, ids=[c[0] for c in PARQUET_CASES])
def test_parquet_errors(tmp_path, case) -> None:
    name, write, kwargs, pattern = case
    path = tmp_path / "data.parquet"
    write(path)
    with pytest.raises(DataError, match=pattern.format(f=str(path).replace(".", r"\."))):
        open_dataset(str(path), 1, **kwargs)


def test_parquet_feature_count_mismatch_between_parts(tmp_path) -> None:
    d = tmp_path / "pq"
    d.mkdir()
    _write(d / "part-0.parquet", [_vec(4, [0], [1.0])] * 3, [0.0, 1.0, 0.0], _vector_type())
    _write(d / "part-1.parquet", [_vec(6, [5], [1.0])] * 3, [0.0, 1.0, 0.0], _vector_type())
    with pytest.raises(
        DataError, match=r"feature-count mismatch between parts.*'features'.*\[4, 6\]"
    ):
        open_dataset(str(d), 2)
    # Inside one block the message names the column too.
    with pytest.raises(DataError, match=r"feature-count mismatch.*'features'"):
        open_dataset(str(d), 1)
    # With num_features given, the second part's vectors are refused where they are read.
    with pytest.raises(
        DataError, match=r"part-1\.parquet: column 'features' row 0: .*size 6, nu"
    ) as e:
        open_dataset(str(d), 2, num_features=4)
    assert e.value.option == "num_features"  # the front ends name it (--num-features, the model)
    assert e.value.render(lambda _: "--num-features").endswith("size 6, --num-features says 4")


def test_parquet_column_types_differ_between_parts(tmp_path) -> None:
    d = tmp_path / "pq"
    d.mkdir()
    _write(d / "part-0.parquet", [[1.0, 2.0]], [0.0])
    _write(d / "part-1.parquet", [_vec(2, [0], [1.0])], [1.0], _vector_type())
    with pytest.raises(DataError, match=r"column 'features' has different types across parts"):
        open_dataset(str(d), 1)


ARRAY_CASES = [
    (
        "nan-X",
        lambda: (np.array([[1.0, np.nan]]), np.array([1.0])),
        r"X: NaN or infinite value at row 0, column 1",
    ),
    (
        "inf-y",
        lambda: (np.ones((2, 2)), np.array([1.0, np.inf])),
        r"y: NaN or infinite label at row 1",
    ),
    ("shape-y", lambda: (np.ones((2, 2)), np.ones(3)), r"y: expected shape \(2,\)"),
    ("1d-X", lambda: (np.ones(3), np.ones(3)), r"X: expected a 2-D array"),
    ("string-X", lambda: (np.array([["a"]]), np.ones(1)), r"X: expected a numeric array"),
    ("empty-X", lambda: (np.ones((0, 3)), np.ones(0)), r"X: empty input"),
]


@pytest.mark.parametrize("case", ARRAY_CASES, ids=[c[0] for c in ARRAY_CASES])
def test_array_errors(tmp_path, case) -> None:
    _, make, pattern = case
    with pytest.raises(DataError, match=pattern):
        open_dataset(make(), 1, staging_dir=str(tmp_path))


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"num_blocks": 0}, r"num_blocks must be an integer >= 1, got 0"),
        ({"format": "csv"}, r"format must be one of auto, libsvm, parquet, got 'csv'"),
        (
            {"loss": "hinge"},
            r"loss must be one of logistic, squares, softmax, auto or None, got 'hinge'",
        ),
        ({"num_features": 0}, r"num_features must be an integer >= 1, got 0"),
        ({"dense": "yes"}, r"dense must be True, False or None"),
    ],
)
def test_bad_parameters(kwargs, pattern) -> None:
    args = {"num_blocks": 1, **kwargs}
    with pytest.raises(ValueError, match=pattern):
        open_dataset("builtin:breast_cancer", **args)


@pytest.mark.parametrize(
    "spec, pattern",
    [
        ("builtin:nope", r"unknown built-in dataset 'nope'"),
        ("builtin:synthetic?m=3", r"unknown parameter 'm'; allowed: n, d, density, nnz, seed"),
        ("builtin:synthetic?n=abc", r"parameter n must be int, got 'abc'"),
        ("builtin:synthetic?density=2", r"density must be in \(0, 1\], got 2.0"),
        ("builtin:synthetic?n=10&d=1", r"d must be an integer >= 2, got 1"),
        ("builtin:digits?seed=1", r"builtin:digits: unknown parameter 'seed'; allowed: none"),
    ],
)
def test_bad_builtin_specs(spec, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        open_dataset(spec, 2)

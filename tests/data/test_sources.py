"""Parquet, staged arrays, built-ins, standardization and label conventions."""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from async_spark.data import DataError, open_dataset
from async_spark.data import builtin as B
from async_spark.data.arrays import ArraySource


def _concat(source, P):
    blocks = [source.load(p) for p in range(P)]
    X = [b.X.toarray() if sp.issparse(b.X) else np.asarray(b.X) for b in blocks]
    return np.vstack(X), np.concatenate([b.y for b in blocks]), blocks


def _vector_column(X: np.ndarray, dense_rows: np.ndarray) -> pa.Array:
    vtype = pa.struct(
        [
            ("type", pa.int8()),
            ("size", pa.int32()),
            ("indices", pa.list_(pa.int32())),
            ("values", pa.list_(pa.float64())),
        ]
    )
    rows = []
    for x, dense in zip(X, dense_rows, strict=True):
        if dense:
            rows.append({"type": 1, "size": None, "indices": None, "values": x.tolist()})
        else:
            nz = np.flatnonzero(x)
            rows.append(
                {"type": 0, "size": x.size, "indices": nz.tolist(), "values": x[nz].tolist()}
            )
    return pa.array(rows, type=vtype)


@pytest.mark.parametrize("P", [1, 4])
def test_parquet_vector_column_round_trip(tmp_path, P) -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 7)) * (rng.random((60, 7)) < 0.4)
    y = rng.integers(0, 2, 60).astype(float)
    d = tmp_path / "pq"
    d.mkdir()
    dense_rows = rng.random(60) < 0.3
    for part, sl in enumerate([slice(0, 25), slice(25, 60)]):
        table = pa.table({"features": _vector_column(X[sl], dense_rows[sl]), "label": y[sl]})
        pq.write_table(table, d / f"part-{part}.parquet", row_group_size=8)
    source, desc = open_dataset(str(d), P, loss="logistic")
    Xb, yb, blocks = _concat(source, P)
    assert desc.sparse and sp.issparse(blocks[0].X)
    np.testing.assert_array_equal(Xb, X)
    np.testing.assert_array_equal(yb, y)
    assert desc.d == 7 and desc.n == 60 and desc.nnz == np.count_nonzero(X)
    assert desc.row_offsets == tuple(b.row_offset for b in blocks)
    assert len(pickle.dumps(source)) < 3000
    dsource, _ = open_dataset(str(d), P, dense=True)
    np.testing.assert_array_equal(_concat(dsource, P)[0], X)


def test_parquet_array_column(tmp_path) -> None:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 5))
    y = rng.standard_normal(30)
    path = tmp_path / "a.parquet"
    pq.write_table(
        pa.table({"x": pa.array(list(X), type=pa.list_(pa.float32())), "target": y}),
        path,
        row_group_size=7,
    )
    source, desc = open_dataset(
        str(path), 3, features_column="x", label_column="target", loss="squares"
    )
    Xb, yb, blocks = _concat(source, 3)
    assert not desc.sparse and isinstance(blocks[0].X, np.ndarray)
    np.testing.assert_array_equal(Xb, X.astype(np.float32).astype(np.float64))
    np.testing.assert_array_equal(yb, y)


@pytest.mark.parametrize("sparse_input", [False, True])
def test_staged_arrays_round_trip(tmp_path, sparse_input) -> None:
    rng = np.random.default_rng(2)
    X = rng.standard_normal((41, 6)) * (rng.random((41, 6)) < 0.5)
    y = rng.integers(0, 3, 41)
    Xin = sp.coo_matrix(X) if sparse_input else X
    source, desc = open_dataset((Xin, y), 4, staging_dir=str(tmp_path), loss="softmax")
    assert isinstance(source, ArraySource) and desc.sparse == sparse_input
    assert desc.num_classes == 3
    Xb, yb, _ = _concat(source, 4)
    np.testing.assert_array_equal(Xb, X)
    np.testing.assert_array_equal(yb, y)
    assert len(pickle.dumps(source)) < 1000
    # Same content -> same staging directory and dataset id; other content -> another.
    again, _ = open_dataset((Xin, y), 4, staging_dir=str(tmp_path), loss="softmax")
    assert again.directory == source.directory and again.dataset_id == source.dataset_id
    other, _ = open_dataset((X + 1.0, y), 4, staging_dir=str(tmp_path), loss="softmax")
    assert other.dataset_id != source.dataset_id
    if not sparse_input:
        assert isinstance(source.load(0).X, np.memmap) or isinstance(
            source.load(0).X.base, np.memmap
        )


def test_staged_directory_missing_on_worker(tmp_path) -> None:
    import shutil

    source, _ = open_dataset((np.ones((4, 2)), np.arange(4.0)), 2, staging_dir=str(tmp_path))
    shutil.rmtree(source.directory)
    with pytest.raises(DataError, match="visible to every executor"):
        source.load(0)


def test_synthetic_is_deterministic_and_independent_of_blocks() -> None:
    spec = "builtin:synthetic?n=9000&d=500&nnz=20&seed=3"
    s3, d3 = open_dataset(spec, 3)
    s5, d5 = open_dataset(spec, 5)
    X3, y3, _ = _concat(s3, 3)
    X5, y5, _ = _concat(s5, 5)
    np.testing.assert_array_equal(X3, X5)
    np.testing.assert_array_equal(y3, y5)
    assert d3.n == 9000 and d3.d == 500 and d3.sparse and d3.nnz == d5.nnz
    assert 15 < d3.nnz / d3.n < 25  # ~ 20 nonzeros per row (duplicates drawn twice merge)
    assert set(np.unique(y3)) == {0.0, 1.0} and 0.3 < y3.mean() < 0.7
    np.testing.assert_allclose(np.linalg.norm(X3, axis=1), 1.0)  # unit rows
    assert d3.max_row_norm_sq == pytest.approx(1.0)
    other, _ = open_dataset("builtin:synthetic?n=9000&d=500&nnz=20&seed=4", 3)
    assert not np.array_equal(_concat(other, 3)[0], X3)
    assert len(pickle.dumps(s3)) < 500


def test_synthetic_default_size() -> None:
    source = B.synthetic_source(2)
    assert (source.n, source.d) == (100_000, 10_000)
    blk = source.load(1)
    assert blk.row_offset == 50_000 and blk.X.shape == (50_000, 10_000)
    assert 40 < blk.X.nnz / blk.rows < 60


def test_small_builtins() -> None:
    s, d = open_dataset("builtin:breast_cancer", 3, loss="logistic")
    assert (d.n, d.d, d.num_classes, d.classes) == (569, 30, 2, (0.0, 1.0))
    s, d = open_dataset("builtin:digits", 2, loss="softmax", dense=False)
    assert (d.n, d.d, d.num_classes, d.sparse) == (1797, 64, 10, True)
    with pytest.raises(DataError, match=r"builtin:digits: loss 'logistic' needs exactly 2"):
        open_dataset("builtin:digits", 2, loss="logistic")


def test_mnist1d() -> None:
    pytest.importorskip("mnist1d.data")
    s, d = open_dataset("builtin:mnist1d?num_samples=1000&seed=1", 2, loss="softmax")
    assert (d.n, d.d, d.num_classes) == (1000, 40, 10)


def test_mnist1d_missing_package_is_named(monkeypatch) -> None:
    B._small_arrays.cache_clear()
    monkeypatch.setitem(sys.modules, "mnist1d", None)
    monkeypatch.setitem(sys.modules, "mnist1d.data", None)
    try:
        with pytest.raises(DataError, match=r"builtin:mnist1d needs the 'mnist1d' package"):
            open_dataset("builtin:mnist1d", 2)
    finally:
        B._small_arrays.cache_clear()


def test_standardize_dense_and_sparse(tmp_path) -> None:
    rng = np.random.default_rng(4)
    X = rng.standard_normal((50, 4)) * [1.0, 10.0, 0.1, 0.0] + [5.0, -3.0, 0.0, 2.0]
    y = rng.integers(0, 2, 50) * 2 - 1
    src, desc = open_dataset(
        (X, y), 3, staging_dir=str(tmp_path), standardize=True, loss="logistic"
    )
    Xs, ys, _ = _concat(src, 3)
    np.testing.assert_allclose(Xs.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(Xs[:, :3].std(axis=0), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(Xs[:, 3], 0.0)  # constant column: centered, not scaled
    np.testing.assert_array_equal(ys, (y + 1) / 2)  # {-1, 1} -> {0, 1}
    assert desc.classes == (-1.0, 1.0)
    assert desc.max_row_norm_sq == pytest.approx((Xs**2).sum(axis=1).max())
    # Sparse: scaled by the std, not centered (zeros stay zeros).
    Xsp = X * (rng.random(X.shape) < 0.5)
    src, desc = open_dataset(
        (sp.csr_matrix(Xsp), y), 2, staging_dir=str(tmp_path), standardize=True
    )
    Xs2, _, blocks = _concat(src, 2)
    assert sp.issparse(blocks[0].X)
    std = Xsp.std(axis=0)
    expect = Xsp / np.where(std > 0, std, 1.0)
    np.testing.assert_allclose(Xs2, expect, rtol=1e-12)


def test_standardized_sparse_columns_are_centered_implicitly(tmp_path) -> None:
    """The blocks stay sparse and scaled; the source's ``center`` (mean / std) is what the model
    subtracts, and the step's constants are those of the centered rows: the largest squared row
    norm and the Gram's largest eigenvalue of ``(X - 1 m^T) / s`` with the intercept's column."""
    from async_spark.models.linear import LinearModel, split_params
    from async_spark.solvers.curvature import gram_max_eigenvalue
    from async_spark.solvers.outputs import original_scale

    rng = np.random.default_rng(9)
    X = (rng.random((60, 5)) < 0.3) * rng.uniform(0.5, 3.0, (60, 5))
    X[:, 4] = 0.0  # an empty column: std 0, left unscaled, center 0
    y = rng.integers(0, 2, 60)
    src, desc = open_dataset((sp.csr_matrix(X), y), 3, staging_dir=str(tmp_path), standardize=True)
    Xs, _, blocks = _concat(src, 3)
    assert sp.issparse(blocks[0].X)
    std = X.std(axis=0)
    scale = np.where(std > 0, std, 1.0)
    np.testing.assert_allclose(Xs, X / scale, rtol=1e-12)  # scaled, zeros kept
    np.testing.assert_allclose(src.center, X.mean(axis=0) / scale, rtol=1e-12)
    Z = X / scale - src.center  # the rows as the model reads them: standardized
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=1e-12)
    assert desc.max_row_norm_sq == pytest.approx((Z**2).sum(axis=1).max(), rel=1e-12)
    Zt = np.hstack([Z, np.ones((60, 1))])
    lam = np.linalg.eigvalsh(Zt.T @ Zt / 60)[-1]
    assert gram_max_eigenvalue(src, desc, tol=1e-12, iters=500) == pytest.approx(lam, rel=1e-8)
    # raw-scale coefficients: the same margins on the raw rows as the model's on its own
    model = LinearModel("logistic", 5, center=src.center)
    theta = np.random.default_rng(1).standard_normal(6)
    W, B = original_scale(model, theta, src)
    w, b = split_params(model, theta)
    np.testing.assert_allclose(X @ W[0] + B[0], Z @ w + b, atol=1e-12)


def test_softmax_label_mapping(tmp_path) -> None:
    X = np.eye(6)
    y = np.array([3, 1, 2, 3, 1, 2])
    src, desc = open_dataset((X, y), 2, staging_dir=str(tmp_path), loss="softmax")
    assert desc.classes == (1.0, 2.0, 3.0) and desc.num_classes == 3
    np.testing.assert_array_equal(_concat(src, 2)[1], y - 1)
    # Squares: labels untouched, no classes.
    src, desc = open_dataset((X, y * 0.5), 2, staging_dir=str(tmp_path), loss="squares")
    assert desc.classes is None
    np.testing.assert_array_equal(_concat(src, 2)[1], y * 0.5)


@pytest.mark.parametrize(
    ("y", "loss", "classes"),
    [
        ([3, 1, 2, 3, 1, 2], "softmax", (1.0, 2.0, 3.0)),
        ([-1, 1, 1, -1, 1, -1], "logistic", (-1.0, 1.0)),
        ([5, 5, 7, 7, 5, 7], "logistic", (5.0, 7.0)),
    ],
)
def test_loss_auto_follows_the_labels(tmp_path, y, loss, classes) -> None:
    """loss="auto" (the command line's and TrainConfig's default) maps the labels as the loss it
    picks would, and says which; the config takes that loss for the run."""
    from async_spark.solvers import TrainConfig
    from async_spark.solvers.linear import build_model

    X, y = np.eye(6), np.array(y, dtype=float)
    src, desc = open_dataset((X, y), 2, staging_dir=str(tmp_path), loss="auto")
    _, named = open_dataset((X, y), 2, staging_dir=str(tmp_path), loss=loss)
    assert desc.loss == loss and named.loss == loss
    assert desc.classes == named.classes == classes
    np.testing.assert_array_equal(_concat(src, 2)[1], np.searchsorted(classes, y))
    config = TrainConfig(data=(X, y))
    assert config.loss == "auto" and config.for_data(desc).loss == loss
    assert build_model(config, desc).loss == loss
    assert config.for_data(desc).loss_chosen
    with pytest.raises(ValueError, match="loss is auto, but the dataset was opened with loss=None"):
        config.for_data(open_dataset((X, y), 2, staging_dir=str(tmp_path))[1])
    # a loss named explicitly must be the one the labels were mapped for
    other = "softmax" if loss == "logistic" else "logistic"
    with pytest.raises(ValueError, match=f"is {other}, but the dataset's labels were mapped for"):
        TrainConfig(data=(X, y), loss=other).for_data(desc)
    assert TrainConfig(data=(X, y), loss=loss).for_data(desc).loss_chosen is False


def test_transformed_source_pickles_and_caches_by_content() -> None:
    from async_spark.data import clear_cache, get_block

    src, desc = open_dataset("builtin:breast_cancer", 2, standardize=True, loss="logistic")
    clone = pickle.loads(pickle.dumps(src))
    assert clone.dataset_id == src.dataset_id == desc.dataset_id
    assert len(pickle.dumps(src)) < 2000  # two 30-vectors and a few names
    clear_cache()
    a = get_block(src, 1)
    assert get_block(clone, 1) is a  # same content id -> the worker's cached block
    raw, _ = open_dataset("builtin:breast_cancer", 2)
    assert raw.dataset_id != src.dataset_id
    clear_cache()


@pytest.mark.parametrize("intercept", [True, False])
@pytest.mark.parametrize("centered", [True, False])
def test_the_exact_gram_of_dense_blocks_matches_power_iteration(monkeypatch, intercept, centered):
    """Dense blocks up to EXACT_GRAM_MAX_D columns: the eigenvalue of the Gram matrix built in
    one pass, with the source's implicit center and the intercept's column, is the one power
    iteration finds over the same rows, and numpy's on the rows as the model reads them."""
    from async_spark.solvers import curvature

    rng = np.random.default_rng(4)
    X = rng.standard_normal((90, 6)) * np.array([1.0, 3.0, 0.1, 1.0, 2.0, 5.0]) + 2.0
    src, desc = open_dataset((X, rng.integers(0, 2, 90)), 3, standardize=False)
    if centered:  # as a sparse standardized source would carry it
        monkeypatch.setattr(
            type(src), "center", np.array([0.5, -1.0, 2.0, 0.0, 1.5, 3.0]), raising=False
        )
    Z = X - (src.center if centered else 0.0)
    Zt = np.hstack([Z, np.ones((90, 1))]) if intercept else Z
    expect = np.linalg.eigvalsh(Zt.T @ Zt / 90)[-1]
    exact = curvature.gram_max_eigenvalue(src, desc, intercept=intercept)
    monkeypatch.setattr(curvature, "EXACT_GRAM_MAX_D", 0)  # force the power iteration
    power = curvature.gram_max_eigenvalue(src, desc, intercept=intercept, tol=1e-14, iters=5000)
    assert exact == pytest.approx(expect, rel=1e-12)
    assert power == pytest.approx(expect, rel=1e-8)

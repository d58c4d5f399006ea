"""LIBSVM parsing, indexing and block sources."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.sparse as sp

from async_spark.data import DataError, clear_cache, get_block, open_dataset
from async_spark.data import libsvm as L


def _random_libsvm(rng: np.random.Generator, rows: int, d: int, *, extras: bool = True) -> str:
    lines = []
    for i in range(rows):
        k = int(rng.integers(0, 8))
        idx = np.sort(rng.choice(d, size=min(k, d), replace=False)) + 1
        vals = rng.standard_normal(idx.size) * 10.0 ** rng.integers(-3, 4, idx.size)
        label = int(rng.choice([-1, 1]))
        body = " ".join(f"{j}:{float(v)!r}" for j, v in zip(idx, vals, strict=True))
        line = f"{label} {body}".rstrip()
        if extras and i % 7 == 3:
            line += "  # a comment 1:2"
        if extras and i % 11 == 5:
            lines.append("")  # blank line
            lines.append("# comment only")
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_vectorized_parser_matches_naive_loop() -> None:
    rng = np.random.default_rng(0)
    text = _random_libsvm(rng, 300, 50).encode()
    fast = L.parse_libsvm_bytes(text)
    slow = L.parse_libsvm_naive(text)
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a, b)  # bit-identical numbers (both use C strtod)


def test_parser_edge_forms() -> None:
    text = b"+1 1:.5 3:5.  7:-1e-3\r\n0\n  -1 2:1E2 # c\n\t\n1.5 4:+2\n"
    r = L.parse_libsvm_bytes(text)
    np.testing.assert_array_equal(r.labels, [1.0, 0.0, -1.0, 1.5])
    np.testing.assert_array_equal(r.indptr, [0, 3, 3, 4, 5])
    np.testing.assert_array_equal(r.indices, [0, 2, 6, 1, 3])
    np.testing.assert_array_equal(r.values, [0.5, 5.0, -1e-3, 100.0, 2.0])
    # The last line may lack its newline.
    assert L.parse_libsvm_bytes(b"1 1:1\n0 2:2").labels.tolist() == [1.0, 0.0]


@pytest.mark.parametrize("num_blocks", [1, 3, 7])
def test_blocks_concatenate_to_full_data(tmp_path, num_blocks) -> None:
    rng = np.random.default_rng(1)
    text = _random_libsvm(rng, 200, 30)
    path = tmp_path / "data.svm"
    path.write_text(text)
    full = L.parse_libsvm_naive(text.encode())
    X_full = sp.csr_matrix((full.values, full.indices, full.indptr), shape=(200, 30)).toarray()
    source, desc = open_dataset(str(path), num_blocks, num_features=30)
    blocks = [source.load(p) for p in range(num_blocks)]
    assert desc.n == 200 and desc.d == 30 and desc.sparse
    assert desc.rows_per_block == tuple(b.rows for b in blocks)
    assert desc.row_offsets == tuple(b.row_offset for b in blocks)
    assert max(desc.rows_per_block) - min(desc.rows_per_block) <= 1
    np.testing.assert_array_equal(np.vstack([b.X.toarray() for b in blocks]), X_full)
    np.testing.assert_array_equal(np.concatenate([b.y for b in blocks]), full.labels)
    assert desc.nnz == full.values.size
    # Dense output agrees.
    dsource, ddesc = open_dataset(str(path), num_blocks, num_features=30, dense=True)
    assert not ddesc.sparse
    np.testing.assert_array_equal(np.vstack([dsource.load(p).X for p in range(num_blocks)]), X_full)
    # Small pickle: the source holds offsets, not rows.
    assert len(pickle.dumps(source)) < 2000


def test_directory_of_parts_and_inferred_num_features(tmp_path) -> None:
    rng = np.random.default_rng(2)
    texts = [_random_libsvm(rng, r, 40) for r in (17, 0, 23, 9)]
    d = tmp_path / "parts"
    d.mkdir()
    for i, t in enumerate(texts):
        (d / f"part-{i:05d}").write_text(t)
    (d / "_SUCCESS").write_text("")
    (d / ".part-00000.crc").write_text("garbage")
    full = L.parse_libsvm_naive("".join(texts).encode())
    source, desc = open_dataset(str(d), 4)
    assert desc.n == 49 and desc.d == int(full.indices.max()) + 1
    X = sp.vstack([source.load(p).X for p in range(4)]).toarray()
    X_full = sp.csr_matrix((full.values, full.indices, full.indptr), shape=(49, desc.d)).toarray()
    np.testing.assert_array_equal(X, X_full)
    # Worker path: through the per-process cache.
    clear_cache()
    b = get_block(source, 2)
    assert get_block(source, 2) is b


def test_chunked_parse_and_index_agree(tmp_path, monkeypatch) -> None:
    rng = np.random.default_rng(3)
    text = _random_libsvm(rng, 400, 25)
    path = tmp_path / "x.svm"
    path.write_text(text)
    src_big, _ = open_dataset(str(path), 3, num_features=25)
    monkeypatch.setattr(L, "_CHUNK_BYTES", 97)  # many chunks, cut mid-line
    src_small, _ = open_dataset(str(path), 3, num_features=25)
    for p in range(3):
        a, b = src_big.load(p), src_small.load(p)
        assert (a.X != b.X).nnz == 0
        np.testing.assert_array_equal(a.y, b.y)


def test_error_line_numbers_in_later_blocks_and_chunks(tmp_path, monkeypatch) -> None:
    lines = [f"1 {i % 5 + 1}:1" for i in range(50)]
    lines[41] = "1 3:1 2:1"  # line 42 (1-based): not increasing
    path = tmp_path / "bad.svm"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(L, "_CHUNK_BYTES", 64)
    with pytest.raises(DataError, match=r"bad\.svm:42: .*strictly increasing.*'2:1'"):
        open_dataset(str(path), 4)


def test_file_changed_after_indexing(tmp_path) -> None:
    path = tmp_path / "a.svm"
    path.write_text("1 1:1\n0 2:1\n")
    source, _ = open_dataset(str(path), 1)
    path.write_text("1 1:1\n0 2:1\n1 1:3\n")
    with pytest.raises(DataError, match="changed"):
        source.load(0)


def test_fewer_rows_than_blocks(tmp_path) -> None:
    path = tmp_path / "a.svm"
    path.write_text("1 1:1\n0 2:1\n")
    with pytest.raises(DataError, match="cannot fill num_blocks=3"):
        open_dataset(str(path), 3)

"""Parquet files as blocks (read with pyarrow; no Spark needed).

The feature column is either

- a Spark ML vector (``VectorUDT``), stored as ``struct<type: int8, size: int32,
  indices: list<int32>, values: list<double>>`` with ``type`` 0 = sparse, 1 = dense
  (for dense rows ``size`` and ``indices`` are null and ``values`` holds the row); or
- a numeric list column (``array<double>``, ``list<float>``, fixed-size lists) of equal lengths.

The label column is numeric. Blocks are global row ranges (``numpy.array_split`` boundaries);
a worker reads only the row groups that overlap its range and decodes them from the Arrow
buffers (list offsets give CSR ``indptr`` directly, no Python object per row).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from async_spark.data.blocks import Block, BlockSource
from async_spark.data.builtin import _block_bounds
from async_spark.data.errors import OPTION, DataError, rows_cannot_fill
from async_spark.data.libsvm import list_part_files

__all__ = ["ParquetSource", "parquet_source", "decode_features", "decode_labels"]

_VECTOR_FIELDS = {"type", "size", "indices", "values"}


def _feature_kind(path: str, column: str, typ: pa.DataType) -> str:
    """'vector' or 'array', or a DataError naming the file, column and type."""
    if (
        pa.types.is_struct(typ)
        and {typ.field(i).name for i in range(typ.num_fields)} == _VECTOR_FIELDS
    ):
        return "vector"
    if (
        pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ)
    ) and (pa.types.is_floating(typ.value_type) or pa.types.is_integer(typ.value_type)):
        return "array"
    raise DataError(
        f"{path}: column {column!r} has type {typ}; expected a Spark ML vector"
        " struct<type,size,indices,values> or a numeric array column"
    )


def _check_schema(path: str, schema: pa.Schema, features: str, label: str) -> str:
    names = schema.names
    for col in (features, label):
        if col not in names:
            raise DataError(f"{path}: no column {col!r} (columns: {', '.join(names)})")
    lt = schema.field(label).type
    if not (pa.types.is_integer(lt) or pa.types.is_floating(lt) or pa.types.is_boolean(lt)):
        raise DataError(f"{path}: label column {label!r} has type {lt}; expected a numeric type")
    return _feature_kind(path, features, schema.field(features).type)


def _flat_list(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, flat values) of a list array (any list kind), offsets rebased to 0."""
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        offsets = np.arange(len(arr) + 1, dtype=np.int64) * size
        flat = arr.flatten()
    else:
        offsets = np.asarray(arr.offsets, dtype=np.int64)
        flat = arr.flatten()
        offsets = offsets - offsets[0]
    values = flat.to_numpy(zero_copy_only=False) if len(flat) else np.zeros(0)
    return offsets, np.asarray(values)


def _width_error(found: str, num_features: int) -> DataError:
    """Rows of another width than ``num_features``: the error names the option (the command
    line's ``--num-features``, or the model that ``score`` reads)."""
    return DataError(
        f"{found}, num_features={num_features}",
        option="num_features",
        problem=f"{found}, {OPTION} says {num_features}",
    )


def decode_features(
    arr: pa.Array, kind: str, *, path: str, column: str, row0: int, num_features: int | None
) -> tuple[sp.csr_matrix | np.ndarray, int]:
    """Decode one Arrow feature column chunk into a CSR matrix (vector) or a dense array.

    Returns ``(X, width)``; raises :class:`DataError` naming the file, column and (0-based,
    file-global) row for nulls, NaN/Inf, out-of-range indices and inconsistent sizes.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr)
    if arr.null_count:
        r0 = int(np.flatnonzero(np.asarray(arr.is_null()))[0])
        raise DataError(f"{path}: column {column!r} row {row0 + r0}: null feature vector")
    if kind == "array":
        offsets, values = _flat_list(arr)
        lengths = np.diff(offsets)
        width = int(lengths[0]) if n else (num_features or 0)
        bad = np.flatnonzero(lengths != width)
        if bad.size:
            raise DataError(
                f"{path}: column {column!r} row {row0 + int(bad[0])}: feature-count mismatch,"
                f" array length {int(lengths[bad[0]])} vs {width}"
            )
        if num_features is not None and width != num_features:
            raise _width_error(
                f"{path}: column {column!r}: feature-count mismatch, arrays have {width} features",
                num_features,
            )
        X = values.astype(np.float64).reshape(n, width)
        if not np.isfinite(X).all():
            r = int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])
            raise DataError(f"{path}: column {column!r} row {row0 + r}: NaN or infinite value")
        return X, width
    # Spark ML vector struct.
    fields = dict(
        zip(
            [arr.type.field(i).name for i in range(arr.type.num_fields)], arr.flatten(), strict=True
        )
    )
    vtype = np.asarray(fields["type"].fill_null(-1).to_numpy(zero_copy_only=False))
    size_arr = fields["size"]
    v_off, values = _flat_list(fields["values"])
    i_off, idx = _flat_list(fields["indices"])
    values = values.astype(np.float64)
    lengths = np.diff(v_off)
    dense_rows = vtype == 1
    if np.any((vtype != 0) & (vtype != 1)):
        r = int(np.flatnonzero((vtype != 0) & (vtype != 1))[0])
        raise DataError(f"{path}: column {column!r} row {row0 + r}: vector type must be 0 or 1")
    sizes = np.where(
        dense_rows, lengths, np.asarray(size_arr.fill_null(-1).to_numpy(zero_copy_only=False))
    ).astype(np.int64)
    width = int(sizes[0]) if n else (num_features or 0)
    expect = width if num_features is None else num_features
    bad = np.flatnonzero(sizes != expect)
    if bad.size:
        r = int(bad[0])
        found = (
            f"{path}: column {column!r} row {row0 + r}: feature-count mismatch, vector size"
            f" {int(sizes[r])}"
        )
        if num_features is None:
            raise DataError(f"{found} vs {expect}")
        raise _width_error(found, num_features)
    sparse_lengths = np.diff(i_off)
    bad = np.flatnonzero(~dense_rows & (sparse_lengths != lengths))
    if bad.size:
        r = int(bad[0])
        raise DataError(
            f"{path}: column {column!r} row {row0 + r}: indices and values lengths differ"
        )
    indices = np.empty(values.size, dtype=np.int64)
    row_of = np.repeat(np.arange(n), lengths)
    pos_in_row = np.arange(values.size) - np.repeat(v_off[:-1], lengths)
    dense_entry = dense_rows[row_of]
    indices[dense_entry] = pos_in_row[dense_entry]
    indices[~dense_entry] = idx.astype(np.int64)
    if indices.size:
        bad = np.flatnonzero((indices < 0) | (indices >= expect))
        if bad.size:
            raise DataError(
                f"{path}: column {column!r} row {row0 + int(row_of[bad[0]])}: feature index"
                f" {int(indices[bad[0]])} out of range [0, {expect})"
            )
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            raise DataError(
                f"{path}: column {column!r} row {row0 + int(row_of[bad[0]])}: NaN or infinite value"
            )
    X = sp.csr_matrix(
        (values, indices.astype(np.int32 if expect < 2**31 else np.int64), v_off), shape=(n, expect)
    )
    X.sum_duplicates()  # also sorts indices
    X.eliminate_zeros()  # dense vector rows store their zeros
    return X, expect


def decode_labels(arr: Any, *, where: str, column: str, row0: int) -> np.ndarray:
    """A numeric label column as float64; a null, NaN or infinite label is a DataError naming
    ``where``, the column and the row (``row0`` + its position)."""
    if arr.null_count:
        r = int(np.flatnonzero(np.asarray(arr.is_null()))[0])
        raise DataError(f"{where}: column {column!r} row {row0 + r}: null label")
    y = np.asarray(arr.to_numpy(), dtype=np.float64)
    if not np.isfinite(y).all():
        r = int(np.flatnonzero(~np.isfinite(y))[0])
        raise DataError(f"{where}: column {column!r} row {row0 + r}: NaN or infinite label")
    return y


@dataclass(frozen=True)
class ParquetSource(BlockSource):
    """Blocks of Parquet file(s): each worker reads the row groups overlapping its row range.

    ``files`` holds ``(path, size, mtime_ns, rows per row group)``; ``segments`` per block
    ``(file index, first row, end row)`` in file-local rows.
    """

    files: tuple[tuple[str, int, int, tuple[int, ...]], ...]
    segments: tuple[tuple[tuple[int, int, int], ...], ...]
    features: str
    label: str
    kind: str
    num_features: int | None = None
    dense: bool | None = None  # None: CSR for vectors, dense for arrays

    @functools.cached_property
    def dataset_id(self) -> str:  # hashed once per instance (asked on every task)
        key = repr(
            (
                "parquet",
                self.files,
                self.segments,
                self.features,
                self.label,
                self.num_features,
                self.dense,
            )
        )
        return "parquet-" + hashlib.blake2b(key.encode(), digest_size=12).hexdigest()

    @property
    def num_blocks(self) -> int:
        return len(self.segments)

    def row_offset(self, index: int) -> int:
        return sum(e - s for blk in self.segments[:index] for _, s, e in blk)

    def load(self, index: int) -> Block:
        Xs: list[Any] = []
        ys: list[np.ndarray] = []
        for fi, lo, hi in self.segments[index]:
            path, size, _, groups = self.files[fi]
            if os.stat(path).st_size != size:
                raise DataError(f"{path}: file changed since it was indexed")
            starts = np.concatenate([[0], np.cumsum(groups)])
            g0 = int(np.searchsorted(starts, lo, side="right") - 1)
            g1 = int(np.searchsorted(starts, hi, side="left"))
            table = pq.ParquetFile(path).read_row_groups(
                list(range(g0, g1)), columns=[self.features, self.label]
            )
            table = table.slice(lo - int(starts[g0]), hi - lo)
            X, _ = decode_features(
                table.column(self.features),
                self.kind,
                path=path,
                column=self.features,
                row0=lo,
                num_features=self.num_features,
            )
            y = decode_labels(table.column(self.label), where=path, column=self.label, row0=lo)
            Xs.append(X)
            ys.append(y)
        widths = {x.shape[1] for x in Xs}
        if len(widths) > 1:
            raise DataError(
                f"{self.files[self.segments[index][0][0]][0]}: feature-count mismatch between parts"
                f" (column {self.features!r} widths {sorted(widths)}); give num_features"
            )
        sparse_out = self.kind == "vector" if self.dense is None else not self.dense
        if sparse_out:
            X = sp.vstack([sp.csr_matrix(x) for x in Xs], format="csr")
        else:
            X = np.vstack([x.toarray() if sp.issparse(x) else x for x in Xs])
        return Block(X, np.concatenate(ys), self.row_offset(index))


def parquet_source(
    path: str | Sequence[str],
    num_blocks: int,
    *,
    features: str = "features",
    label: str = "label",
    num_features: int | None = None,
    dense: bool | None = None,
) -> ParquetSource:
    """Read the Parquet footers, check the schema, and cut the rows into ``num_blocks`` blocks.

    Raises
    ------
    DataError
        Missing or badly typed columns (naming the file and column), parts whose vector sizes or
        column types disagree, or empty input.
    """
    paths = list_part_files(path, suffix=".parquet") if isinstance(path, str) else list(path)
    files = []
    kinds = set()
    for p in paths:
        try:
            pf = pq.ParquetFile(p)
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataError(f"{p}: not a readable Parquet file ({exc})") from exc
        schema = pf.schema_arrow
        kinds.add((_check_schema(p, schema, features, label), str(schema.field(features).type)))
        md = pf.metadata
        groups = tuple(md.row_group(i).num_rows for i in range(md.num_row_groups))
        st = os.stat(p)
        files.append((p, int(st.st_size), st.st_mtime_ns, groups))
    if len({k for k, _ in kinds}) > 1:
        raise DataError(
            f"{paths[0]}: column {features!r} has different types across parts: "
            + ", ".join(sorted(t for _, t in kinds))
        )
    kind = next(iter(kinds))[0]
    counts = np.array([sum(f[3]) for f in files], dtype=np.int64)
    n = int(counts.sum())
    if n == 0:
        raise DataError(f"{paths[0]}: empty input (no rows)")
    if n < num_blocks:
        raise rows_cannot_fill(paths[0], n, num_blocks)
    bounds = _block_bounds(n, num_blocks)
    file_first = np.concatenate([[0], np.cumsum(counts)])
    segments = []
    for b in range(num_blocks):
        lo, hi = int(bounds[b]), int(bounds[b + 1])
        segs = []
        for fi in range(len(files)):
            a = max(lo, int(file_first[fi])) - int(file_first[fi])
            e = min(hi, int(file_first[fi + 1])) - int(file_first[fi])
            if a < e:
                segs.append((fi, a, e))
        segments.append(tuple(segs))
    return ParquetSource(
        tuple(files),
        tuple(segments),
        features,
        label,
        kind,
        None if num_features is None else int(num_features),
        dense,
    )

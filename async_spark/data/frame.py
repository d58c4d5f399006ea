"""A DataFrame's own partitions as blocks: each task reads its partition where it lives.

The blocks of a :class:`FrameSource` are the non-empty partitions of a DataFrame with a feature
column (a Spark ML vector or a numeric array) and a numeric label, in partition order. Nothing is staged and the driver (or a
Spark Connect client) never holds the rows:

- :func:`open_frame` describes the frame with one ``mapInArrow`` job (a second one when
  standardizing, for the row norms after scaling): each task decodes its partition and returns its
  row count, width, nonzeros, distinct labels, largest squared row norm and column moments, or the
  first bad value it met (:class:`~async_spark.data.errors.DataError`, naming the partition and the
  row);
- a resident task of the run is a ``mapInArrow`` over the same frame: it decodes its partition into
  a block and *holds* it (:func:`held`) while it serves tickets, so the task function finds it with
  :func:`~async_spark.data.blocks.get_block` as it finds any other block;
- the off-clock evaluation is a ``mapInArrow`` over the frame as well (:func:`frame_loss_sums`).

Block ``p`` must hold the same rows in every job that reads it: :func:`prepare_frame` repartitions
(Spark sorts rows before a round-robin repartition, so a recomputed partition is the same one) and
caches the frame. A ``FrameSource`` holds plain values only (the DataFrame stays in this process,
in :func:`frame_of`'s registry), so it pickles small into the task closures.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from async_spark.data.blocks import Block, BlockSource, DatasetDescriptor, forget_blocks
from async_spark.data.errors import DataError, rows_cannot_fill
from async_spark.data.parquet import decode_features, decode_labels
from async_spark.data.transform import (
    MAX_DISTINCT_LABELS,
    ScanResult,
    TransformedSource,
    block_moments,
    merge_moments,
    row_norms_sq,
)

__all__ = [
    "FrameSource",
    "augmented_gram",
    "frame_of",
    "frame_loss_sums",
    "held",
    "open_frame",
    "prepare_frame",
    "release",
    "scan_frame",
]

log = logging.getLogger(__name__)

_SCAN_SCHEMA = pa.schema(
    [
        ("partition", pa.int64()),
        ("rows", pa.int64()),
        ("width", pa.int64()),
        ("nnz", pa.int64()),
        ("max_row_norm_sq", pa.float64()),
        ("labels", pa.binary()),  # float64 bytes of the distinct labels; null: too many
        ("mean", pa.binary()),  # float64 bytes of the column means (moments only)
        ("m2", pa.binary()),  # float64 bytes of the centered second moments
        ("row_norm_sq_sum", pa.float64()),
        ("gram", pa.binary()),  # float64 bytes of sum (x_i, 1)(x_i, 1)^T; null past GRAM_COLUMNS
        ("label_min", pa.float64()),
        ("label_max", pa.float64()),
        ("label_non_integer", pa.int64()),  # labels with a fractional part
        ("error", pa.string()),
    ]
)
GRAM_COLUMNS = 1024  # below this many columns a partition returns its Gram matrix (< 8 MiB)
GRAM_BYTES = 256 * 2**20  # and all partitions' Gram matrices together at most this many bytes
_LOSSES_SCHEMA = pa.schema([("rows", pa.int64()), ("sums", pa.binary())])


@dataclass(frozen=True)
class FrameSource(BlockSource):
    """The partitions of one prepared DataFrame (see the module docstring)."""

    frame_id: str
    rows_per_block: tuple[int, ...]
    features: str
    label: str
    kind: str  # "vector" (Spark ML vectors: CSR blocks) or "array" (dense blocks)
    num_features: int
    dense: bool | None = None  # None: CSR for vectors, dense for arrays
    #: the frame's partition of each block (a round-robin repartition of few rows can leave a
    #: partition empty: it is no block); () while scanning
    partitions: tuple[int, ...] = ()
    frame_partitions: int = 0  # partitions of the prepared frame, empty ones included

    #: a block exists only inside the task that read its partition: never shared through disk
    host_cacheable: ClassVar[bool] = False

    @functools.cached_property
    def dataset_id(self) -> str:
        return f"frame-{self.frame_id}"

    @property
    def num_blocks(self) -> int:
        return len(self.rows_per_block)

    def row_offset(self, index: int) -> int:
        return int(sum(self.rows_per_block[:index]))

    def block_of(self, partition: int) -> int | None:
        """The block that partition ``partition`` of the frame is, or None (an empty one)."""
        try:
            return self.partitions.index(int(partition))
        except ValueError:
            return None

    def load(self, index: int) -> Block:
        with _held_lock:
            block = _held.get((self.frame_id, int(index)))
        if block is None:
            raise DataError(
                f"block {index} of a DataFrame is read by the task of its partition only "
                "(resident transport); the job transport cannot run on a DataFrame's partitions"
            )
        return block

    def decode(
        self, index: int, batches: Iterator[pa.RecordBatch], *, counted: bool = True
    ) -> Block:
        """Block ``index`` from its partition's Arrow batches, checked as a Parquet file is (errors
        name the partition); ``counted``: the scan's row count must match (False for the scan
        itself, whose ``index`` is the partition)."""
        partition = self.partitions[index] if counted and self.partitions else index
        where = f"DataFrame partition {partition}"
        tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        X: Any
        if tables:
            table = pa.concat_tables(tables)
            X, _ = decode_features(
                table.column(self.features),
                self.kind,
                path=where,
                column=self.features,
                row0=0,
                num_features=self.num_features or None,
            )
            y = decode_labels(table.column(self.label), where=where, column=self.label, row0=0)
        else:
            X, y = sp.csr_matrix((0, self.num_features)), np.zeros(0)
        X = sp.csr_matrix(X) if self.sparse else (X.toarray() if sp.issparse(X) else X)
        if not counted:
            return Block(X, y, 0)
        if X.shape[0] != self.rows_per_block[index]:
            raise DataError(
                f"{where}: {X.shape[0]} rows where the scan counted "
                f"{self.rows_per_block[index]}: the DataFrame's partitions changed between jobs "
                "(prepare it with prepare_frame: repartitioned and cached)"
            )
        return Block(X, y, self.row_offset(index))

    @property
    def sparse(self) -> bool:
        return self.kind == "vector" if self.dense is None else not self.dense


# --- blocks held by the task that read them ------------------------------------------------------
_held_lock = threading.Lock()
_held: dict[tuple[str, int], Block] = {}


@contextmanager
def held(source: FrameSource, index: int, block: Block) -> Iterator[None]:
    """Make ``block`` block ``index`` of ``source`` in this process while the context lasts."""
    key = (source.frame_id, int(index))
    with _held_lock:
        _held[key] = block
    try:
        yield
    finally:
        with _held_lock:
            _held.pop(key, None)
        forget_blocks(source.dataset_id)  # and what the block cache made of it (standardized)


# --- the DataFrames behind the sources (driver side) -------------------------------------------
_frames: dict[str, Any] = {}  # frame id -> the prepared DataFrame, until release()


def frame_of(source: BlockSource) -> Any:
    """The DataFrame whose partitions are ``source``'s blocks (through a TransformedSource), or
    None for any other source."""
    inner = source.inner if isinstance(source, TransformedSource) else source
    if not isinstance(inner, FrameSource):
        return None
    frame = _frames.get(inner.frame_id)
    if frame is None:
        raise DataError(
            f"the DataFrame of {inner.dataset_id} is gone from this process (a source made by "
            "open_frame trains in the session that made it)"
        )
    return frame


def release(source: BlockSource) -> None:
    """Forget the DataFrame of ``source`` (and unpersist it): the run that used it is over."""
    inner = source.inner if isinstance(source, TransformedSource) else source
    if isinstance(inner, FrameSource):
        frame = _frames.pop(inner.frame_id, None)
        if frame is not None:
            try:
                frame.unpersist()
            except Exception:  # noqa: BLE001 - a stopped session has nothing left to free
                pass


def prepare_frame(df: Any, features: str, label: str, partitions: int) -> Any:
    """The two columns of ``df`` in ``partitions`` partitions, cached: the blocks of a run.

    Round-robin repartitioning sorts the rows first (``spark.sql.execution.sortBeforeRepartition``,
    on by default), so a partition recomputed after a lost executor holds the same rows."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    return df.select(features, label).repartition(int(partitions)).cache()


# --- one pass over the partitions ----------------------------------------------------------------
def _kind_of(df: Any, features: str) -> str:
    field = df.schema[features]
    name = type(field.dataType).__name__
    if name == "VectorUDT":
        return "vector"
    if name == "ArrayType":
        return "array"
    raise DataError(
        f"DataFrame column {features!r} has type {field.dataType.simpleString()}; expected a "
        "Spark ML vector (e.g. from VectorAssembler) or an array of numbers"
    )


class _Scan:
    """``mapInArrow`` function: one statistics row per partition (see ``_SCAN_SCHEMA``)."""

    def __init__(
        self,
        source: FrameSource,
        moments: bool,
        mean: np.ndarray | None,
        scale: np.ndarray | None,
        gram: bool,
    ) -> None:
        self.source, self.moments, self.mean, self.scale = source, moments, mean, scale
        self.gram = gram

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        row: dict[str, Any] = {k: None for k in _SCAN_SCHEMA.names}
        row["partition"] = partition
        try:
            row.update(self._stats(partition, batches))
        except DataError as exc:
            row["error"] = str(exc)
        yield pa.RecordBatch.from_pylist([row], schema=_SCAN_SCHEMA)

    def _stats(self, partition: int, batches: Iterator[pa.RecordBatch]) -> dict[str, Any]:
        block = self.source.decode(partition, batches, counted=False)
        X, y = block.X, block.y
        if self.scale is not None:
            X = _standardized(X, self.mean, self.scale)
        rows, width = X.shape
        norms = row_norms_sq(X)
        out: dict[str, Any] = {
            "rows": int(rows),
            "width": int(width),
            "nnz": int(X.nnz) if sp.issparse(X) else int(np.count_nonzero(X)),
            "max_row_norm_sq": float(norms.max()) if rows else 0.0,
            "row_norm_sq_sum": float(norms.sum()),
        }
        if rows:
            out["label_min"], out["label_max"] = float(y.min()), float(y.max())
            out["label_non_integer"] = int(np.count_nonzero(y != np.floor(y)))
        if self.gram and width + 1 <= GRAM_COLUMNS:
            out["gram"] = augmented_gram(X).tobytes()
        labels = np.unique(y)
        out["labels"] = labels.tobytes() if labels.size <= MAX_DISTINCT_LABELS else None
        if self.moments and rows:
            mean, m2 = block_moments(X)
            out["mean"], out["m2"] = mean.tobytes(), m2.tobytes()
        return out


def augmented_gram(X: Any) -> np.ndarray:
    """sum_i (x_i, 1)(x_i, 1)^T as a dense (d + 1, d + 1) array."""
    rows, d = X.shape
    G = np.empty((d + 1, d + 1))
    XtX = X.T @ X
    G[:d, :d] = XtX.toarray() if sp.issparse(XtX) else XtX
    sums = np.asarray(X.sum(axis=0)).ravel()
    G[:d, d] = G[d, :d] = sums
    G[d, d] = rows
    return G


def gram_max(scan: ScanResult) -> tuple[float, float]:
    """lambda_max(X^T X / n) without and with the intercept column: exact from the partitions'
    Gram matrices, else (more than GRAM_COLUMNS columns) the trace bound mean ||x_i||^2 (+ 1)."""
    n = max(scan.n, 1)
    if scan.gram is None:
        bound = scan.row_norm_sq_sum / n
        return bound, bound + 1.0
    G = scan.gram / n
    d = G.shape[0] - 1
    without = float(np.linalg.eigvalsh(G[:d, :d])[-1]) if d else 0.0
    return without, float(np.linalg.eigvalsh(G)[-1])


def _standardized(X: Any, mean: np.ndarray | None, scale: np.ndarray) -> Any:
    inv = 1.0 / scale
    if sp.issparse(X):
        X = sp.csr_matrix(X, copy=True)
        X.data = X.data * inv[X.indices]
        return X
    X = np.asarray(X, dtype=np.float64)
    return (X - mean) * inv if mean is not None else X * inv


def _collect(frame: Any, fn: Callable[..., Any], schema: pa.Schema) -> list[Any]:
    ddl = ", ".join(f"{f.name} {_DDL[f.type]}" for f in schema)
    return frame.mapInArrow(fn, ddl).collect()


_DDL = {pa.int64(): "long", pa.float64(): "double", pa.binary(): "binary", pa.string(): "string"}


def scan_frame(
    frame: Any,
    source: FrameSource,
    *,
    moments: bool = False,
    mean: np.ndarray | None = None,
    scale: np.ndarray | None = None,
    gram: bool = False,
) -> ScanResult:
    """One job over the partitions: their statistics, merged in partition order (rows as the
    standardized ones when ``scale`` is given; with ``gram``, their Gram matrices summed).
    Raises the first partition's DataError."""
    rows = sorted(
        _collect(frame, _Scan(source, moments, mean, scale, gram), _SCAN_SCHEMA),
        key=lambda r: r["partition"],
    )
    for r in rows:
        if r["error"] is not None:
            raise DataError(r["error"])
    if len({int(r["width"]) for r in rows if r["rows"]}) > 1:
        widths = sorted({int(r["width"]) for r in rows if r["rows"]})
        raise DataError(
            f"DataFrame column {source.features!r}: feature-count mismatch between partitions: "
            f"vectors of sizes {widths}"
        )
    res = ScanResult()
    res.sparse = source.sparse
    grams_complete = all(r["gram"] is not None for r in rows if r["rows"])
    for r in rows:
        if not r["rows"]:
            continue  # an empty partition is no block
        res.rows_per_block.append(int(r["rows"]))
        res.partitions.append(int(r["partition"]))
        res.widths.add(int(r["width"]))
        res.width = max(res.width, int(r["width"]))
        res.nnz += int(r["nnz"])
        res.max_row_norm_sq = max(res.max_row_norm_sq, float(r["max_row_norm_sq"]))
        if res.labels is not None:
            if r["labels"] is None:
                res.labels = None
            else:
                res.labels = np.union1d(res.labels, np.frombuffer(r["labels"], dtype=np.float64))
                if res.labels.size > MAX_DISTINCT_LABELS:
                    res.labels = None
        res.row_norm_sq_sum += float(r["row_norm_sq_sum"])
        res.label_min = min(res.label_min, float(r["label_min"]))
        res.label_max = max(res.label_max, float(r["label_max"]))
        res.label_non_integer += int(r["label_non_integer"])
        if grams_complete:
            g = np.frombuffer(r["gram"], dtype=np.float64).reshape(
                int(r["width"]) + 1, int(r["width"]) + 1
            )
            res.gram = g.copy() if res.gram is None else res.gram + g
        if moments and r["mean"] is not None:
            merge_moments(
                res,
                np.frombuffer(r["mean"], dtype=np.float64),
                np.frombuffer(r["m2"], dtype=np.float64),
                int(r["rows"]),
            )
    return res


def open_frame(
    df: Any,
    *,
    features: str = "features",
    label: str = "label",
    partitions: int,
    standardize: bool = False,
    loss: str | None = None,
    dense: bool | None = None,
    center: bool = True,
    on_scan: Callable[[ScanResult], bool | None] | None = None,
    fewer_rows_ok: bool = False,
    measure_rows: bool = True,
) -> tuple[BlockSource, DatasetDescriptor]:
    """Describe ``df``'s two columns as ``partitions`` blocks read where they live.

    Returns the source and descriptor :func:`~async_spark.data.dataset.open_dataset` returns for
    a file; the prepared (repartitioned, cached) DataFrame stays in this process for the run's
    jobs (:func:`frame_of`; :func:`release` forgets it). With ``standardize``, dense columns are
    centered unless ``center`` is False (a model without an intercept); sparse ones are scaled
    only.

    ``on_scan`` is called with the first pass's statistics (the rows as read: sizes, labels'
    range, nonzeros) before anything else is decided, so a caller checks its labels and picks
    the blocks' layout without a job of its own: it may raise, and it returns the layout (True
    dense, False CSR, None as ``dense`` says). ``fewer_rows_ok``: fewer rows than ``partitions``
    leave some partitions empty (no block) instead of being an error. ``measure_rows=False``
    skips the job that measures the rows as trained (their largest norm and Gram matrix, which
    only the automatic steps of the stochastic and momentum methods read): the descriptor's
    ``max_row_norm_sq`` and ``gram_max`` are then None."""
    from async_spark.data.dataset import describe_scanned  # the shared tail of open_dataset

    for column in (features, label):
        if column not in df.columns:
            raise DataError(f"DataFrame has no column {column!r} (columns: {df.columns})")
    kind = _kind_of(df, features)
    frame = prepare_frame(df, features, label, partitions)
    source = FrameSource(uuid.uuid4().hex, (), features, label, kind, 0, dense)
    _frames[source.frame_id] = frame
    try:
        scan = scan_frame(frame, source, moments=standardize)
        if on_scan is not None:
            layout = on_scan(scan)
            dense = dense if layout is None else layout
        if scan.n < (1 if fewer_rows_ok else partitions):
            raise rows_cannot_fill("the DataFrame", scan.n, partitions)
        if scan.width < 1:
            raise DataError(f"DataFrame column {features!r}: no features (every vector is empty)")
        source = FrameSource(
            source.frame_id,
            tuple(scan.rows_per_block),
            features,
            label,
            kind,
            int(scan.width),
            dense,
            tuple(scan.partitions),
            int(partitions),
        )
        if len(scan.partitions) < partitions:
            log.info(
                "%d of the DataFrame's %d partitions hold rows (a round-robin repartition of %d "
                "rows): %d blocks",
                len(scan.partitions),
                partitions,
                scan.n,
                len(scan.partitions),
            )

        # the Gram matrices (for lambda_max) when they fit the budget, of the rows as trained:
        # with the standardized rows' scan, or in one more pass when not standardizing
        gram = (
            scan.width + 1 < GRAM_COLUMNS
            and len(scan.rows_per_block) * (scan.width + 1) ** 2 * 8 <= GRAM_BYTES
        )
        final = [scan]

        def rescan(transformed: BlockSource) -> ScanResult:
            assert isinstance(transformed, TransformedSource)
            final[0] = scan_frame(
                frame, source, mean=transformed.mean, scale=transformed.scale, gram=gram
            )
            return final[0]

        out, desc = describe_scanned(
            source,
            scan,
            implicit_center=False,  # the executors' rescan measures the rows as scaled only
            d=int(scan.width),
            sparse=source.sparse,
            standardize=standardize,
            loss=loss,
            where=f"DataFrame column {label!r}",
            center=center,
            rescan=rescan if measure_rows else None,
        )
        if not measure_rows:
            return out, desc
        if gram and final[0].gram is None:
            final[0] = scan_frame(frame, source, gram=True)
        return out, dataclasses.replace(desc, gram_max=gram_max(final[0]))
    except BaseException:
        release(source)
        raise


# --- evaluation over the partitions ----------------------------------------------------------------
class _FrameLosses:
    """``mapInArrow`` function: the loss sums of every snapshot on this task's partition."""

    def __init__(
        self, source: BlockSource, model: Any, thetas: np.ndarray, gradients: tuple[int, ...] = ()
    ) -> None:
        self.source, self.model, self.thetas = source, model, thetas
        self.gradients = gradients

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        from async_spark.solvers.worker import snapshot_losses

        ctx = TaskContext.get()
        inner = self.source.inner if isinstance(self.source, TransformedSource) else self.source
        assert isinstance(inner, FrameSource)
        block = inner.block_of(ctx.partitionId() if ctx is not None else 0)
        if block is None:  # an empty partition: no block, no losses
            return
        with held(inner, block, inner.decode(block, batches)):
            parts = list(
                snapshot_losses(self.source, self.model, self.thetas, [block], self.gradients)
            )
        yield pa.RecordBatch.from_pydict(
            {
                "rows": [rows for _, rows in parts],
                "sums": [np.asarray(s, dtype=np.float64).tobytes() for s, _ in parts],
            },
            schema=_LOSSES_SCHEMA,
        )


def frame_loss_sums(
    source: BlockSource, model: Any, thetas: np.ndarray, gradients: tuple[int, ...] = ()
) -> list[tuple[np.ndarray, int]]:
    """Each partition's loss sums of every snapshot, then the gradient sums of the snapshots at
    positions ``gradients`` (one ``mapInArrow`` job over the frame; see
    :func:`~async_spark.solvers.worker.snapshot_losses`)."""
    frame = frame_of(source)
    count = len(thetas) + len(gradients) * thetas.shape[1]
    function = _FrameLosses(source, model, np.ascontiguousarray(thetas), gradients)
    rows = _collect(frame, function, _LOSSES_SCHEMA)
    return [(np.frombuffer(r["sums"], dtype=np.float64, count=count), int(r["rows"])) for r in rows]

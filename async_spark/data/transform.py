"""The driver's scan over blocks, label conventions per loss, and standardization.

Label conventions (applied on load by :class:`TransformedSource`)
----------------------------------------------------------------
- ``logistic``: exactly two distinct label values ``a < b``, mapped ``a -> 0``, ``b -> 1``
  (so {-1, 1}, {0, 1}, {1, 2} all become {0, 1}; the loss is written for y in {0, 1}).
- ``softmax``: integer labels; if the distinct values are exactly ``0..K-1`` they are kept,
  otherwise the sorted distinct values are mapped to ``0..K-1`` (e.g. 1..10 -> 0..9).
  At least 2 and at most :data:`MAX_CLASSES` classes.
- ``squares``: any finite value, unchanged.

The descriptor's ``classes`` holds the original value of each class index.

Standardization
---------------
Dense data: ``x_j <- (x_j - mean_j) / std_j``. Sparse data: ``x_j <- x_j / std_j`` in the blocks,
and centered *implicitly*: the source's ``center`` (``mean_j / std_j``) goes to the model
(:class:`~async_spark.models.linear.LinearModel` ``center``), which reads each row as
``x - center`` through two cheap corrections of its products, because centering the matrix would
turn every implicit zero into ``-mean_j`` and make it dense (memory and time grow by
``d / nnz_per_row``). With an intercept a shift of the columns changes nothing but the intercept
and the conditioning, and the conditioning is what it buys: scaled but uncentered, sparse columns
share a large common direction (their means and the intercept's column of ones); on the rcv1-like
data of the benchmarks the smoothness of the scaled problem falls 14x once centered
(``benchmarks/conditioning.py``). Columns with ``std_j = 0`` are left unscaled.
Moments are merged across blocks with Chan et al.'s pairwise update (one pass, stable).
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from async_spark.data.blocks import Block, BlockSource
from async_spark.data.errors import OPTION, DataError

__all__ = [
    "LOSSES",
    "MAX_CLASSES",
    "MAX_DISTINCT_LABELS",
    "ScanResult",
    "TransformedSource",
    "block_moments",
    "label_mapping",
    "merge_moments",
    "resolve_loss",
    "scan_blocks",
    "row_norms_sq",
]

LOSSES = ("logistic", "squares", "softmax")
MAX_CLASSES = 1000
MAX_DISTINCT_LABELS = 100_000  # stop collecting distinct labels beyond this (regression targets)


def row_norms_sq(X: Any, center: np.ndarray | None = None) -> np.ndarray:
    """Squared Euclidean norm of every row of a dense or CSR matrix (of ``x - center``, with
    ``center``: ``|x|^2 - 2 x.c + |c|^2``, the matrix kept sparse)."""
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        sq = np.bincount(
            np.repeat(np.arange(X.shape[0]), np.diff(X.indptr)),
            weights=X.data * X.data,
            minlength=X.shape[0],
        )
    else:
        X = np.asarray(X)
        sq = np.einsum("ij,ij->i", X, X)
    if center is None:
        return sq
    c = np.asarray(center, dtype=np.float64)
    # rounding may leave a tiny negative for a row equal to the center
    return np.maximum(sq - 2.0 * np.asarray(X @ c).ravel() + float(c @ c), 0.0)


@dataclass
class ScanResult:
    """What one pass over the blocks finds."""

    rows_per_block: list[int] = field(default_factory=list)
    width: int = 0
    widths: set[int] = field(default_factory=set)
    nnz: int = 0
    sparse: bool = False
    labels: np.ndarray | None = field(default_factory=lambda: np.zeros(0))
    max_row_norm_sq: float = 0.0
    count: int = 0
    mean: np.ndarray | None = None
    m2: np.ndarray | None = None
    #: sum of the rows' (x_i, 1) outer products, when measured (a DataFrame's partitions, d < 1024)
    gram: np.ndarray | None = None
    row_norm_sq_sum: float = 0.0
    partitions: list[int] = field(default_factory=list)  # a DataFrame's: each block's partition
    #: the labels' range and how many have a fractional part (a DataFrame's scan)
    label_min: float = math.inf
    label_max: float = -math.inf
    label_non_integer: int = 0

    @property
    def n(self) -> int:
        return int(sum(self.rows_per_block))


def _pad(a: np.ndarray, d: int) -> np.ndarray:
    return a if a.size >= d else np.concatenate([a, np.zeros(d - a.size)])


def scan_blocks(source: BlockSource, *, moments: bool = False) -> ScanResult:
    """Load every block once (on the driver, not cached) and collect the dataset's statistics.

    Parameters
    ----------
    moments : bool
        Also accumulate the column means and centered second moments (for standardization).
    """
    res = ScanResult()
    center = getattr(source, "center", None)  # the rows as the model reads them
    for p in range(source.num_blocks):
        blk = source.load(p)
        X, y = blk.X, blk.y
        rows, width = X.shape
        res.rows_per_block.append(int(rows))
        res.widths.add(int(width))
        res.width = max(res.width, int(width))
        res.sparse = res.sparse or sp.issparse(X)
        res.nnz += int(X.nnz) if sp.issparse(X) else int(np.count_nonzero(X))
        if rows:
            norms = row_norms_sq(X, center)
            res.max_row_norm_sq = max(res.max_row_norm_sq, float(norms.max()))
        if res.labels is not None:
            res.labels = np.union1d(res.labels, np.unique(y))
            if res.labels.size > MAX_DISTINCT_LABELS:
                res.labels = None
        if moments and rows:
            merge_moments(res, *block_moments(X), rows)
    return res


def block_moments(X: Any) -> tuple[np.ndarray, np.ndarray]:
    """The column means and centered second moments (sums of squared deviations) of one
    non-empty block, dense or CSR."""
    rows = X.shape[0]
    if sp.issparse(X):
        s1 = np.asarray(X.sum(axis=0)).ravel()
        s2 = np.asarray(X.multiply(X).sum(axis=0)).ravel()
        mean = s1 / rows
        return mean, s2 - rows * mean * mean
    mean = X.mean(axis=0)
    return mean, ((X - mean) ** 2).sum(axis=0)


def merge_moments(res: ScanResult, mean_b: np.ndarray, m2_b: np.ndarray, rows: int) -> None:
    """Fold one block's column means and centered second moments into ``res`` (Chan et al.'s
    pairwise update: exact whatever the order of the blocks, up to rounding)."""
    if res.mean is None or res.m2 is None:
        res.mean, res.m2, res.count = mean_b.copy(), m2_b.copy(), rows
        return
    d = max(res.mean.size, mean_b.size)
    ma, mb = _pad(res.mean, d), _pad(mean_b, d)
    qa, qb = _pad(res.m2, d), _pad(m2_b, d)
    na, nb = res.count, rows
    delta = mb - ma
    res.mean = ma + delta * (nb / (na + nb))
    res.m2 = qa + qb + delta * delta * (na * nb / (na + nb))
    res.count = na + nb


def resolve_loss(loss: str | None, labels: np.ndarray | None, where: str) -> str | None:
    """``loss`` as given, or for ``"auto"`` the classification loss the labels call for, as
    pyspark.ml's ``family="auto"``: ``logistic`` for two label values, ``softmax`` for 3 to
    :data:`MAX_CLASSES` integer classes.

    Raises
    ------
    DataError
        ``"auto"`` with labels that are not classes (one value, real values, or too many
        distinct ones): the message names ``where``, what it found, and the loss to ask for.
    """
    if loss != "auto":
        return loss
    if labels is not None and labels.size < 2:
        shown = ", ".join(f"{v:g}" for v in labels)
        raise DataError(
            f"{where}: loss 'auto' needs at least 2 label values, found {labels.size} ({shown})"
        )
    if labels is not None and labels.size == 2:
        return "logistic"
    if labels is not None and labels.size <= MAX_CLASSES and np.all(labels == np.round(labels)):
        return "softmax"
    if labels is None:
        found = f"more than {MAX_DISTINCT_LABELS} distinct labels"
    elif labels.size > MAX_CLASSES:
        found = f"{labels.size} distinct labels (more than {MAX_CLASSES} classes)"
    else:
        found = f"the non-integer label {labels[labels != np.round(labels)][0]:g}"
    message = (
        f"{where}: loss 'auto' chooses logistic for 2 label values and softmax for 3 to "
        f"{MAX_CLASSES} integer classes, found {found}"
    )
    raise DataError(
        f"{message}; for real-valued labels use loss='squares'",
        option="loss",
        problem=f"{message}; for real-valued labels use {OPTION} squares",
    )


def label_mapping(
    loss: str | None, labels: np.ndarray | None, where: str
) -> tuple[float, ...] | None:
    """The class values for ``loss`` (index = class id), or None for no mapping.

    Raises
    ------
    DataError
        The label set does not fit the loss; the message starts with ``where`` (the file,
        column or array) and lists the values found.
    """
    if loss is None or loss == "squares":
        return None
    if labels is None:
        raise DataError(
            f"{where}: more than {MAX_DISTINCT_LABELS} distinct labels; loss {loss!r} needs classes",
            option="loss",
            problem=f"{where}: more than {MAX_DISTINCT_LABELS} distinct labels; loss {loss!r} needs "
            f"classes (for real-valued labels use {OPTION} squares)",
        )
    shown = ", ".join(f"{v:g}" for v in labels[:10]) + (", ..." if labels.size > 10 else "")
    if loss == "logistic":
        if labels.size != 2:
            found = f"{where}: loss 'logistic' needs exactly 2 label values, found {labels.size}"
            if labels.size <= 2:
                raise DataError(f"{found} ({shown})")
            raise DataError(
                f"{found} ({shown}); use loss='softmax'",
                option="loss",
                problem=f"{found} ({shown}); for {labels.size} classes use {OPTION} softmax",
            )
        return (float(labels[0]), float(labels[1]))
    if loss == "softmax":
        if np.any(labels != np.round(labels)):
            bad = labels[labels != np.round(labels)][0]
            raise DataError(
                f"{where}: loss 'softmax' needs integer class labels, found {bad:g}",
                option="loss",
                problem=f"{where}: loss 'softmax' needs integer class labels, found {bad:g} "
                f"(for real-valued labels use {OPTION} squares)",
            )
        if not 2 <= labels.size <= MAX_CLASSES:
            raise DataError(
                f"{where}: loss 'softmax' needs 2..{MAX_CLASSES} classes, found {labels.size} ({shown})"
            )
        return tuple(float(v) for v in labels)
    raise ValueError(f"loss must be one of {', '.join(LOSSES)} or None, got {loss!r}")


@dataclass(frozen=True, eq=False)
class TransformedSource(BlockSource):
    """Another source with its labels mapped to class indices and/or its columns standardized.

    Carries d-vectors when standardizing: ``scale``, and ``mean`` (dense: subtracted on load) or
    ``center`` (sparse: ``mean / scale``, subtracted implicitly by the model, see the module
    docstring); everything else is plain.
    """

    inner: BlockSource
    classes: tuple[float, ...] | None = None
    mean: np.ndarray | None = None  # None for sparse (centered implicitly) or no standardization
    scale: np.ndarray | None = None
    center: np.ndarray | None = None  # sparse: the scaled means the model subtracts

    @functools.cached_property
    def dataset_id(self) -> str:  # hashed once per instance (asked on every task)
        h = hashlib.blake2b(digest_size=10)
        h.update(repr(self.classes).encode())
        for a in (self.mean, self.scale):
            h.update(b"-" if a is None else np.ascontiguousarray(a).tobytes())
        if self.center is not None:  # (ids of uncentered sources unchanged)
            h.update(b"c" + np.ascontiguousarray(self.center).tobytes())
        return f"{self.inner.dataset_id}+{h.hexdigest()}"

    @property
    def num_blocks(self) -> int:
        return self.inner.num_blocks

    def load(self, index: int) -> Block:
        blk = self.inner.load(index)
        X, y = blk.X, blk.y
        if self.classes is not None:
            cls = np.asarray(self.classes)
            k = np.searchsorted(cls, y)
            k = np.minimum(k, cls.size - 1)
            if not np.array_equal(cls[k], y):
                bad = y[cls[k] != y][0]
                raise DataError(
                    f"block {index}: label {bad:g} is not one of the classes {self.classes}"
                )
            y = k.astype(np.float64)
        if self.scale is not None:
            inv = 1.0 / self.scale
            if sp.issparse(X):
                X = sp.csr_matrix(X, copy=True)
                X.data = X.data * inv[X.indices]
            else:
                X = np.asarray(X, dtype=np.float64)
                X = (X - self.mean) * inv if self.mean is not None else X * inv
        return Block(X, np.asarray(y, dtype=np.float64), blk.row_offset)

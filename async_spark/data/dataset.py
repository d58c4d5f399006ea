"""One entry point from a dataset spec to (block source, descriptor): :func:`open_dataset`."""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

import numpy as np

from async_spark.data.arrays import array_source
from async_spark.data.blocks import BlockSource, DatasetDescriptor
from async_spark.data.builtin import SMALL_DATASETS, small_dataset, synthetic_source
from async_spark.data.errors import OPTION, DataError
from async_spark.data.libsvm import LibsvmSource, libsvm_source
from async_spark.data.limits import feature_limit
from async_spark.data.parquet import ParquetSource, parquet_source
from async_spark.data.transform import (
    LOSSES,
    ScanResult,
    TransformedSource,
    label_mapping,
    resolve_loss,
    scan_blocks,
)

__all__ = ["FORMATS", "DEFAULT_DATA", "describe_scanned", "open_dataset", "parse_builtin_spec"]

FORMATS = ("auto", "libsvm", "parquet")
DEFAULT_DATA = "builtin:synthetic"
_SYNTHETIC_PARAMS = {"n": int, "d": int, "density": float, "nnz": float, "seed": int}


def parse_builtin_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"builtin:name?k=v&..."`` -> ``(name, {k: v})`` with typed values.

    Raises
    ------
    ValueError
        Unknown dataset, unknown parameter or a value of the wrong type (naming the parameter
        and what it accepts).
    """
    body = spec[len("builtin:") :]
    name, _, query = body.partition("?")
    allowed: dict[str, type] = (
        _SYNTHETIC_PARAMS if name == "synthetic" else {"num_samples": int, "seed": int}
    )
    if name != "synthetic" and name not in SMALL_DATASETS:
        names = ("synthetic", *SMALL_DATASETS)
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        raise ValueError(
            f"unknown built-in dataset {name!r}; choose from {', '.join(names)}"
            + (f"; did you mean 'builtin:{close[0]}'?" if close else "")
        )
    params: dict[str, Any] = {}
    for key, raw in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
        if key not in allowed or (name in ("breast_cancer", "digits")):
            ok = ", ".join(allowed) if name not in ("breast_cancer", "digits") else "none"
            raise ValueError(f"builtin:{name}: unknown parameter {key!r}; allowed: {ok}")
        try:
            params[key] = allowed[key](raw)
        except ValueError:
            raise ValueError(
                f"builtin:{name}: parameter {key} must be {allowed[key].__name__}, got {raw!r}"
            ) from None
    return name, params


def _check_int(name: str, value: Any, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


def _is_parquet(path: str) -> bool:
    if path.endswith(".parquet"):
        return True
    if os.path.isdir(path):
        return any(
            n.endswith(".parquet") and not n.startswith((".", "_")) for n in os.listdir(path)
        )
    return False


CSV_HELP = (
    "CSV is not a supported format; convert it to LIBSVM, e.g. in Python: "
    "df = pandas.read_csv(PATH); sklearn.datasets.dump_svmlight_file(df.drop(columns='label'), "
    "df['label'], 'data.svm', zero_based=False), or to Parquet with a vector column "
    "(docs/quickstart.md, "
    "'Your own data')"
)


def _looks_like_csv(path: str) -> bool:
    """A ``.csv``/``.tsv`` name, or a first data line with commas and no ``index:value``."""
    first = path
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.startswith((".", "_")))
        if not names:
            return False
        first = os.path.join(path, names[0])
    if not os.path.isfile(first):
        return False  # the reader says what is wrong with it
    if first.lower().endswith((".csv", ".tsv", ".csv.gz")):
        return True
    try:
        with open(first, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    for raw in head.splitlines()[:5]:
        line = raw.split(b"#", 1)[0].strip()
        if line:
            return b"," in line and b":" not in line
    return False


def _check_model_fits(source: BlockSource, d: int, outputs: int, where: str) -> None:
    """Refuse a dimension whose dense model (``outputs (d + 1)`` float64) would not fit.

    The LIBSVM parser already refused any index above the one-output limit with its line; with
    several outputs (softmax) the tighter limit is found again by a second scan, so that the
    message still names the line of the first index above it.
    """
    limit = feature_limit(outputs)
    if d <= limit.max_features:
        return
    if isinstance(source, LibsvmSource):  # raises naming the line of the first index above it
        scan_blocks(dataclasses.replace(source, num_features=None, limit=limit))
    raise DataError(f"{where}: " + limit.message(f"d={d} with {outputs} outputs"))


def open_dataset(
    spec: str | tuple[Any, Any] | None,
    num_blocks: int,
    *,
    format: str = "auto",
    num_features: int | None = None,
    standardize: bool = False,
    loss: str | None = None,
    dense: bool | None = None,
    features_column: str = "features",
    label_column: str = "label",
    staging_dir: str | None = None,
    implicit_center: bool = True,
    center: bool = True,
) -> tuple[BlockSource, DatasetDescriptor]:
    """Open a dataset as ``num_blocks`` blocks and describe it.

    Parameters
    ----------
    spec : str, (X, y) or None
        - ``"builtin:synthetic[?n=&d=&density=|nnz=&seed=]"`` (the default when None): seeded
          rcv1-like sparse binary data generated on the executors (n=100000, d=10000,
          density=0.005, i.e. ~50 nonzeros per row, seed=0);
        - ``"builtin:breast_cancer"``, ``"builtin:digits"`` (scikit-learn),
          ``"builtin:mnist1d[?num_samples=&seed=]"`` (the ``mnist1d`` package);
        - a LIBSVM file or a directory of part files; a Parquet file or directory
          (``file://`` prefix allowed; paths must be visible to every executor);
        - a pair ``(X, y)`` of a 2-D ndarray or scipy sparse matrix and labels, staged once to
          ``staging_dir`` as ``.npy`` files that the workers memory-map.
    num_blocks : int >= 1
        P, the number of blocks (row ranges of near-equal size).
    format : {"auto", "libsvm", "parquet"}
        File format; "auto" picks Parquet for ``*.parquet`` paths or directories holding them.
    num_features : int or None
        d. LIBSVM: indices must lie in ``[1, d]``; None infers ``d`` = the largest index
        (during the scan). Parquet: every vector must have this size.
    standardize : bool
        Scale columns to unit variance and center them (sparse data: implicitly, through the
        model, see :mod:`async_spark.data.transform`).
    implicit_center : bool
        With ``standardize``, center sparse columns implicitly (default); False scales them
        only, as a DataFrame's partitions are (:func:`~async_spark.data.frame.open_frame`): the
        same objective in other coordinates.
    center : bool
        With ``standardize``, center the columns at all (default). False scales them only, dense
        or sparse, as pyspark.ml does for a model without an intercept: no intercept would absorb
        the shift, so centered columns would change the model.
    loss : {"logistic", "squares", "softmax", "auto"} or None
        Validate and map labels for this loss (see :mod:`async_spark.data.transform`); ``"auto"``
        picks logistic or softmax from the labels (:func:`~.transform.resolve_loss`), and the
        descriptor's ``loss`` says which.
    dense : bool or None
        Force dense (True) or CSR (False) blocks; None keeps the source's layout (CSR for
        LIBSVM, Parquet vectors and synthetic; dense for arrays and the small built-ins).

    Returns
    -------
    (BlockSource, DatasetDescriptor)
        The picklable source for the tasks and the driver's description (n, d, rows per block,
        nnz, classes, max squared row norm).

    Notes
    -----
    The driver loads every block once (not cached) to check labels and values, infer ``d`` and
    compute the statistics; with ``standardize`` a second pass measures the row norms of the
    standardized rows. For files this is one full parse on the driver.
    """
    P = _check_int("num_blocks", num_blocks, 1)
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if loss is not None and loss not in (*LOSSES, "auto"):
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}, auto or None, got {loss!r}")
    if num_features is not None:
        num_features = _check_int("num_features", num_features, 1)
        limit = feature_limit(1)
        if num_features > limit.max_features:
            raise DataError(
                limit.message(f"num_features={num_features}"),
                option="num_features",
                problem=limit.message(f"{OPTION} {num_features}"),
            )
    if dense not in (None, True, False):
        raise ValueError(f"dense must be True, False or None, got {dense!r}")
    if spec is None:
        spec = DEFAULT_DATA

    source: BlockSource
    where: str
    if isinstance(spec, tuple | list):
        if len(spec) != 2:
            raise ValueError(f"array input must be a pair (X, y), got {len(spec)} items")
        X, y = spec
        if num_features is not None and X.shape[1] != num_features:
            raise DataError(
                f"X: has {X.shape[1]} columns, num_features={num_features}",
                option="num_features",
                problem=f"X: has {X.shape[1]} columns, {OPTION} says {num_features}",
            )
        source = array_source(X, y, P, staging_dir=staging_dir, dense=dense)
        where = "arrays (X, y)"
    elif isinstance(spec, str) and spec.startswith("builtin:"):
        name, params = parse_builtin_spec(spec)
        where = spec
        if name == "synthetic":
            if "nnz" in params:
                if "density" in params:
                    raise ValueError("builtin:synthetic: give density or nnz, not both")
                params["density"] = params.pop("nnz") / params.get("d", 10_000)
            source = synthetic_source(P, dense=bool(dense), **params)
        else:
            source = small_dataset(name, P, params=params, dense=dense is not False)
    elif isinstance(spec, str):
        path = spec[len("file://") :] if spec.startswith("file://") else spec
        kind = format if format != "auto" else ("parquet" if _is_parquet(path) else "libsvm")
        where = path
        if kind == "parquet":
            source = parquet_source(
                path,
                P,
                features=features_column,
                label=label_column,
                num_features=num_features,
                dense=dense,
            )
            where = f"{path} column {label_column!r}"
        else:
            if _looks_like_csv(path):
                raise DataError(f"{path}: {CSV_HELP}")
            source = libsvm_source(
                path, P, num_features=num_features, dense=False, limit=feature_limit(1)
            )
    else:
        raise TypeError(f"spec must be a string, a pair (X, y) or None, got {type(spec).__name__}")

    scan = scan_blocks(source, moments=standardize)
    if isinstance(source, ParquetSource) and len(scan.widths) > 1:
        raise DataError(
            f"{where.split(' column')[0]}: feature-count mismatch between parts: column"
            f" {features_column!r} has vectors of sizes {sorted(scan.widths)}"
        )
    if num_features is not None and num_features != scan.width and _fixed_width(source):
        raise DataError(
            f"{where}: rows of {scan.width} features, num_features={num_features}",
            option="num_features",
            problem=f"{where}: rows of {scan.width} features, {OPTION} says {num_features}",
        )
    d = num_features if num_features is not None else scan.width
    if d < 1:
        raise DataError(
            f"{where}: no features (every row is empty); give num_features",
            option="num_features",
            problem=f"{where}: no features (every row is empty); give {OPTION}",
        )
    final_sparse = scan.sparse
    if isinstance(source, LibsvmSource):  # scanned as CSR; now fix d and the layout
        source = dataclasses.replace(source, num_features=d, dense=bool(dense))
        final_sparse = not dense
    elif isinstance(source, ParquetSource) and source.num_features is None:
        source = dataclasses.replace(source, num_features=d)

    return describe_scanned(
        source,
        scan,
        d=int(d),
        sparse=bool(final_sparse),
        standardize=standardize,
        loss=loss,
        where=where,
        implicit_center=implicit_center,
        center=center,
    )


def _fixed_width(source: BlockSource) -> bool:
    """Whether every row of ``source`` has as many columns as its widest (a LIBSVM row lists
    only its nonzero indices, so its width is a lower bound that ``num_features`` raises)."""
    return not isinstance(source, LibsvmSource)


def describe_scanned(
    source: BlockSource,
    scan: ScanResult,
    *,
    d: int,
    sparse: bool,
    standardize: bool,
    loss: str | None,
    where: str,
    rescan: Callable[[BlockSource], ScanResult] | None = scan_blocks,
    implicit_center: bool = True,
    center: bool = True,
) -> tuple[BlockSource, DatasetDescriptor]:
    """The tail of :func:`open_dataset`, shared by every kind of source once it is scanned: map
    the labels for ``loss``, check that the model fits, standardize (the column scales from the
    scan's moments; ``rescan`` measures the standardized rows' norms; None measures nothing:
    ``max_row_norm_sq`` is then None) and describe the result. Standardized sparse columns are
    centered implicitly (``TransformedSource.center``) unless ``implicit_center`` is False (a
    rescan that measures the rows uncentered); with ``center`` False no column is centered (dense
    ones neither: a model without an intercept)."""
    final_sparse = sparse
    loss = resolve_loss(loss, scan.labels, where)
    classes = label_mapping(loss, scan.labels, where)
    _check_model_fits(source, d, len(classes) if loss == "softmax" and classes else 1, where)
    mean = scale = shift = None
    if standardize:
        if scan.mean is None or scan.m2 is None:
            raise DataError(f"{where}: empty input")
        m = np.zeros(d)
        q = np.zeros(d)
        m[: scan.mean.size] = scan.mean
        q[: scan.m2.size] = scan.m2
        std = np.sqrt(np.maximum(q / scan.count, 0.0))
        scale = np.where(std > 0, std, 1.0)
        mean = None if final_sparse or not center else m
        if final_sparse and implicit_center and center:
            shift = m / scale
    identity = classes is not None and classes == tuple(float(k) for k in range(len(classes)))
    label_map = None if identity else classes
    if label_map is not None or scale is not None:
        source = TransformedSource(source, label_map, mean, scale, shift)
    max_norm: float | None = scan.max_row_norm_sq
    nnz = scan.nnz
    if rescan is None:  # not measured: the rows' norms as trained are unknown
        max_norm = None
    elif standardize:
        after = rescan(source)
        max_norm, nnz = after.max_row_norm_sq, after.nnz
    desc = DatasetDescriptor(
        dataset_id=source.dataset_id,
        n=scan.n,
        d=int(d),
        rows_per_block=tuple(scan.rows_per_block),
        sparse=bool(final_sparse),
        nnz=int(nnz),
        num_classes=None if classes is None else len(classes),
        max_row_norm_sq=None if max_norm is None else float(max_norm),
        classes=classes,
        loss=loss,
    )
    return source, desc

"""From a DataFrame to a trained linear model: checks, the rows as blocks, training,
original-scale weights.

How the rows reach the engine
-----------------------------
The engine's tasks read *blocks* that stay decoded in the Python workers
(:mod:`async_spark.data.blocks`), so ``fit`` does not ship rows through the JVM on every update.

- **The resident transport (the default): the DataFrame's own partitions.** ``fit`` selects the
  two columns, repartitions them into ``numPartitions`` partitions and caches them
  (:func:`~async_spark.data.frame.open_frame`); one Spark job describes them (sizes, labels,
  row norms and the column moments, per partition, merged on the driver; a second one measures
  the standardized rows), and the run's resident job is a ``mapInArrow`` over the same frame:
  each task decodes its partition once and holds it while it serves updates. Nothing is staged,
  no row reaches the driver (or a Spark Connect client), and no directory must be shared.
- **The job transport** (``transport="jobs"``: one Spark job per task, whose tasks open their
  blocks from files) writes the two columns once as Parquet into a fresh folder under
  ``stagingDir`` (distributed, no collect), opens it with
  :func:`~async_spark.data.dataset.open_dataset`, trains, and deletes it. ``stagingDir`` must then
  be the same directory for the driver and every executor (local mode, ``local-cluster`` or a
  shared mount); the row count read back is compared with the DataFrame's, so a non-shared
  directory fails with a clear error rather than training on a subset, and the driver scans the
  staged copy once.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from async_spark.data.arrays import default_staging_dir
from async_spark.data.blocks import BlockSource, DatasetDescriptor, private_directory
from async_spark.data.dataset import open_dataset
from async_spark.data.errors import DataError
from async_spark.data.frame import open_frame, release
from async_spark.data.transform import MAX_CLASSES, ScanResult
from async_spark.engine.connect import default_parallelism, is_connect
from async_spark.engine.session import check_executors
from async_spark.solvers.config import ConfigError, TrainConfig
from async_spark.solvers.linear import TrainResult, train_linear
from async_spark.solvers.methods import reads_curvature
from async_spark.solvers.outputs import original_scale

from ._params import ParamValueError, _AsyncLinearParams, _param_name
from .summary import AsyncTrainingSummary

__all__ = ["FitOutput", "LabelStats", "Problem", "fit_linear", "label_stats"]

_DENSE_MAX_FEATURES = 4096
_DENSE_MIN_DENSITY = 0.25


@dataclass
class LabelStats:
    """What a fit checks before it trains: rows, the labels' range and integrality, the
    features' nonzeros and width (from the first pass over the frame's partitions, or one
    aggregation for the job transport)."""

    n: int
    min: float
    max: float
    non_integer: int
    nnz: int
    d: int
    meta_classes: int | None

    @classmethod
    def from_scan(cls, scan: ScanResult, meta_classes: int | None) -> LabelStats:
        return cls(
            n=scan.n,
            min=scan.label_min,
            max=scan.label_max,
            non_integer=scan.label_non_integer,
            nnz=scan.nnz,
            d=scan.width,
            meta_classes=meta_classes,
        )


#: what a fit trains, from its data's LabelStats: the loss and, for softmax, the classes
Problem = Callable[[LabelStats], tuple[str, "int | None"]]


@dataclass
class FitOutput:
    weights: np.ndarray  # (K, d), K = 1 except for multinomial
    intercepts: np.ndarray  # (K,)
    summary: AsyncTrainingSummary
    result: TrainResult
    loss: str  # what the Problem chose
    num_classes: int | None


def _check_columns(dataset: Any, features: str, label: str | None) -> None:
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql.types import NumericType

    fields = {f.name: f for f in dataset.schema.fields}
    if features not in fields:
        raise ValueError(
            f"featuresCol: no column {features!r} in the DataFrame (columns: "
            f"{', '.join(fields)}); assemble one with pyspark.ml.feature.VectorAssembler"
        )
    if not isinstance(fields[features].dataType, VectorUDT):
        raise ValueError(
            f"featuresCol: column {features!r} must be a Spark ML vector (VectorUDT), got "
            f"{fields[features].dataType.simpleString()}; use VectorAssembler"
        )
    if label is not None:
        if label not in fields:
            raise ValueError(
                f"labelCol: no column {label!r} in the DataFrame (columns: {', '.join(fields)})"
            )
        if not isinstance(fields[label].dataType, NumericType):
            raise ValueError(
                f"labelCol: column {label!r} must be numeric, got "
                f"{fields[label].dataType.simpleString()}"
            )


def _meta_num_classes(dataset: Any, label: str) -> int | None:
    """Number of classes from the label's ML attribute metadata (e.g. a StringIndexer's)."""
    attr = dataset.schema[label].metadata.get("ml_attr", {})
    if attr.get("type") == "nominal":
        if "vals" in attr:
            return len(attr["vals"])
        if "num_vals" in attr:
            return int(attr["num_vals"])
    return None


def label_stats(dataset: Any, features: str, label: str) -> LabelStats:
    """Rows, label range and integrality, nonzeros and width of the features: one Spark job."""
    from pyspark.ml.stat import Summarizer
    from pyspark.sql import functions as F

    _check_columns(dataset, features, label)
    y = F.col(label).cast("double")
    row = dataset.agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.when(y.isNull() | F.isnan(y), 1).otherwise(0)).alias("bad"),
        F.min(y).alias("lo"),
        F.max(y).alias("hi"),
        F.sum(F.when(y != F.floor(y), 1).otherwise(0)).alias("frac"),
        Summarizer.metrics("numNonZeros").summary(F.col(features)).alias("s"),
    ).first()
    if row is None or not row["n"]:
        _no_rows()
    if row["bad"]:
        raise ValueError(f"labelCol: column {label!r} has {row['bad']} null or NaN label(s)")
    nz = row["s"]["numNonZeros"]
    return LabelStats(
        n=int(row["n"]),
        min=float(row["lo"]),
        max=float(row["hi"]),
        non_integer=int(row["frac"] or 0),
        nnz=int(round(float(np.sum(nz.toArray())))),
        d=int(nz.size),
        meta_classes=_meta_num_classes(dataset, label),
    )


def _no_rows() -> NoReturn:
    raise ValueError("fit: the DataFrame has no rows")


def _layout(stats: LabelStats) -> bool | None:
    """Dense blocks for dense enough data of moderate width (standardization then also centers
    them: better conditioning, unless there is no intercept); None: the column's own layout."""
    if stats.d <= _DENSE_MAX_FEATURES and stats.nnz >= _DENSE_MIN_DENSITY * stats.n * stats.d:
        return True
    return None


def classes_for(stats: LabelStats, label: str) -> int:
    """K as pyspark.ml counts it: label metadata if present, else ``max label + 1``."""
    if stats.non_integer or stats.min < 0:
        bad = "non-integer" if stats.non_integer else f"negative ({stats.min:g})"
        raise ValueError(
            f"labelCol: classification labels must be class indices 0, 1, ..., K-1 (as in "
            f"pyspark.ml); column {label!r} has {bad} values; index them with StringIndexer"
        )
    K = int(stats.max) + 1
    if stats.meta_classes is not None:
        if K > stats.meta_classes:
            raise ValueError(
                f"labelCol: label {stats.max:g} is out of range for the {stats.meta_classes} "
                f"classes in column {label!r}'s metadata"
            )
        K = stats.meta_classes
    if K > MAX_CLASSES:
        raise ValueError(
            f"labelCol: at most {MAX_CLASSES} classes, found labels up to {stats.max:g}"
        )
    return max(K, 2)


def _staging_root(params: _AsyncLinearParams) -> str:
    root = params.getStagingDir() or default_staging_dir()
    if root.startswith("file://"):
        root = root[len("file://") :]
    if "://" in root:
        raise ParamValueError(
            f"stagingDir must be a local or mounted directory path (read back with pyarrow), "
            f"got {root!r}"
        )
    return os.path.abspath(root)


def _two_columns(params: _AsyncLinearParams, dataset: Any) -> Any:
    from pyspark.sql import functions as F

    return dataset.select(
        F.col(params.getFeaturesCol()).alias("features"),
        F.col(params.getLabelCol()).cast("double").alias("label"),
    )


def _open_partitions(
    params: _AsyncLinearParams,
    dataset: Any,
    P: int,
    on_stats: Callable[[LabelStats], bool | None],
    cleanup: ExitStack,
) -> tuple[BlockSource, DatasetDescriptor, str]:
    """The DataFrame's own partitions as the blocks (the resident transport): repartitioned to
    P and cached, described by one Spark job (two when standardizing), each resident task
    decoding its partition; nothing is staged and no row reaches the driver. The first job's
    statistics go to ``on_stats``, which checks them and returns the blocks' layout (a fit runs
    no job of its own for its checks); with fewer rows than P, the empty partitions are no
    blocks."""
    meta_classes = _meta_num_classes(dataset, params.getLabelCol())

    def on_scan(scan: ScanResult) -> bool | None:
        return on_stats(LabelStats.from_scan(scan, meta_classes))

    source, desc = open_frame(
        _two_columns(params, dataset),
        partitions=P,
        standardize=True,  # always scaled; the penalty follows standardization
        loss=None,
        center=params.getFitIntercept(),  # without an intercept: scaled only, as pyspark.ml
        on_scan=on_scan,
        fewer_rows_ok=True,
        measure_rows=_reads_curvature(params),
    )
    cleanup.callback(release, source)
    return source, desc, f"DataFrame ({P} partitions)"


def _reads_curvature(params: _AsyncLinearParams) -> bool:
    """Whether the fit's method (``auto`` resolved as the run will) may read the rows' measured
    curvature: L-BFGS, the default, does not, so its fit skips the job that measures it."""
    try:
        name = _train_config(params, "auto", 1, "").validate().method  # auto resolved there
    except (ConfigError, ValueError):
        return True  # a bad combination: the run refuses it, with its own message
    return reads_curvature(name)


def _open_staged(
    params: _AsyncLinearParams,
    dataset: Any,
    P: int,
    dense: bool | None,
    shape: tuple[int, int],
    cleanup: ExitStack,
) -> tuple[BlockSource, DatasetDescriptor, str]:
    """The two columns written once as Parquet under ``stagingDir`` (the job transport, whose
    one-off tasks open their blocks from files), then opened as a Parquet dataset; ``shape``:
    the DataFrame's (rows, features), which the copy read back must have."""
    n, d = shape
    root = _staging_root(params)
    if not params.getStagingDir() and not os.environ.get("ASYNC_SPARK_STAGING_DIR"):
        # the default under the shared temporary folder: this user's alone (as for arrays)
        private_directory(root, "staging directory", env="ASYNC_SPARK_STAGING_DIR")
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="fit-", dir=root)
    cleanup.callback(shutil.rmtree, tmp, ignore_errors=True)
    path = os.path.join(tmp, "data")
    spark = dataset.sparkSession
    sc = None if is_connect(spark) else spark.sparkContext  # Connect has no SparkContext
    if sc is not None:
        sc.setJobDescription("async_spark.ml: stage the features and labels as Parquet")
    try:
        _two_columns(params, dataset).write.parquet("file://" + path)
    finally:
        if sc is not None:
            sc.setJobDescription(None)
    source, desc = open_dataset(
        path,
        P,
        format="parquet",
        standardize=True,  # always scaled; the penalty follows standardization
        # sparse columns scaled only, as the resident transport's frame partitions are: both
        # transports train in the same coordinates, so they end at the same model
        implicit_center=False,
        center=params.getFitIntercept(),  # without an intercept: scaled only, as pyspark.ml
        loss=None,
        dense=dense,
        num_features=d,
    )
    if desc.n != n:
        raise DataError(
            f"stagingDir {root!r}: read back {desc.n} of the DataFrame's {n} rows; the staging "
            "directory must be visible under the same path to the driver and every executor "
            "(local mode, local-cluster or a shared mount); set stagingDir"
        )
    return source, desc, path


def _train_config(params: _AsyncLinearParams, loss: str, partitions: int, data: str) -> TrainConfig:
    return TrainConfig(
        data=data, format="parquet", loss=loss, partitions=partitions, **params._train_fields()
    )


def fit_linear(params: _AsyncLinearParams, dataset: Any, *, problem: Problem) -> FitOutput:
    """Open ``dataset`` as blocks, train with :func:`train_linear` on its session, undo the
    scaling.

    Parameters
    ----------
    problem : Problem
        Called once with the data's :class:`LabelStats` (before any training): raises for
        labels the Estimator cannot train on, else returns the loss (``"logistic"``,
        ``"softmax"`` or ``"squares"``) and, for softmax, the number of classes.
    """
    params._check_combinations()
    run = None
    if params.getMlflowTracking():  # before staging and training: a bad setup fails first
        from async_spark.reporting.tracking import MlflowRun

        run = MlflowRun(
            f"{type(params).__name__}-{params.getMethod()}",
            tags={"async_spark.estimator": type(params).__name__},
            parent_run_id=getattr(params, "_mlflow_parent_run_id", None),
        )
    try:
        out = _fit_rows(params, dataset, problem)
    except BaseException as exc:
        if run is not None:
            run.end("KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")
        raise
    if run is not None:
        _log_fit(run, params, out)
    return out


def fit_multiple(estimator: Any, dataset: Any, param_maps: Any) -> Any:
    """``Estimator.fitMultiple`` that carries the caller's MLflow run to the fits.

    ``CrossValidator`` and ``TrainValidationSplit`` call ``fitMultiple`` in the caller's thread
    and then fit in a thread pool, where MLflow's active run (kept per thread) is not visible: the
    run active here is recorded on the copies, so their MLflow runs nest under it.
    """
    from pyspark.ml.base import _FitMultipleIterator

    from async_spark.reporting.tracking import active_run_id

    base = estimator.copy()
    base._mlflow_parent_run_id = active_run_id()

    def fit_single(index: int) -> Any:
        return base.fit(dataset, param_maps[index])

    return _FitMultipleIterator(fit_single, len(param_maps))


def _log_fit(run: Any, params: _AsyncLinearParams, out: FitOutput) -> None:
    """The fit's MLflow run; a logging failure is a warning (the fitted model is not lost)."""
    from async_spark.solvers.outputs import atomic_write, json_bytes, jsonl_bytes
    from async_spark.solvers.tracking import log_linear_result

    result = out.result

    def write_artifacts(folder: str) -> None:
        atomic_write(
            os.path.join(folder, "model.npz"),
            lambda fh: np.savez(fh, coefficients=out.weights, intercept=out.intercepts),
        )
        atomic_write(
            os.path.join(folder, "summary.json"), lambda fh: fh.write(json_bytes(result.summary()))
        )
        atomic_write(
            os.path.join(folder, "trace.jsonl"), lambda fh: fh.write(jsonl_bytes(result.trace))
        )

    estimator = {f"estimator.{p.name}": v for p, v in params.extractParamMap().items()}
    try:
        log_linear_result(run, result, write_artifacts=write_artifacts, extra_params=estimator)
        run.end("FINISHED")
    except Exception as exc:
        warnings.warn(f"MLflow logging of run {run.run_id} failed: {exc}", stacklevel=3)
        try:
            run.end("FAILED")
        except Exception:  # the server is gone: nothing more to tell it
            pass


def _fit_rows(params: _AsyncLinearParams, dataset: Any, problem: Problem) -> FitOutput:
    spark = dataset.sparkSession
    features, label = params.getFeaturesCol(), params.getLabelCol()
    _check_columns(dataset, features, label)
    # Before any Python task: executors without the project fail here, in seconds, with the fix
    # (once per session: a CrossValidator's fits and a notebook's refits do not pay it again).
    check_executors(spark)
    _staging_root(params)  # the Param is checked whichever transport stages (or not)
    P = params.getNumPartitions() or default_parallelism(spark)
    chosen: list[tuple[str, int | None]] = []

    def on_stats(stats: LabelStats) -> bool | None:
        if not stats.n:
            _no_rows()
        chosen.append(problem(stats))
        return _layout(stats)

    with ExitStack() as cleanup:
        try:
            if params.getTransport() == "resident":
                source, desc, data = _open_partitions(params, dataset, P, on_stats, cleanup)
            else:
                stats = label_stats(dataset, features, label)
                dense = on_stats(stats)
                P = max(1, min(P, stats.n))
                shape = (stats.n, stats.d)
                source, desc, data = _open_staged(params, dataset, P, dense, shape, cleanup)
            loss, num_classes = chosen[0]
            if loss == "softmax":
                assert num_classes is not None
                classes = tuple(float(k) for k in range(num_classes))
                desc = dataclasses.replace(desc, num_classes=num_classes, classes=classes)
            config = _train_config(params, loss, desc.num_blocks, data)
            try:
                result = train_linear(config, spark=spark, dataset=(source, desc))
            except ConfigError as exc:  # our own checks come first; say it in the Params' names
                raise ParamValueError(f"invalid Params: {exc.render(_param_name)}") from None
            except FloatingPointError as exc:
                raise FloatingPointError(
                    str(exc).replace("--step", "stepSize") + " (or set stepSize=0.0 for auto)"
                ) from None
        except DataError as exc:  # a data error that names an option: in the Params' names
            if exc.option is None:
                raise
            raise DataError(exc.render(_param_name)) from None

    try:
        W, b = original_scale(result.model, result.theta, source)
    except FloatingPointError as exc:
        raise FloatingPointError(f"{exc} (stepSize)") from None
    summary = AsyncTrainingSummary.from_result(result)
    return FitOutput(W, b, summary, result, loss, num_classes)

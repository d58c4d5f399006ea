"""Save and load fitted models without pickle: pyspark.ml metadata JSON + a Parquet row of arrays.

Layout of a saved model at ``path`` (any Hadoop file system Spark can write):

- ``path/metadata/``: one JSON line written by :class:`pyspark.ml.util.DefaultParamsWriter`
  (class, uid, Spark version, Params and defaults) plus ``numFeatures``, ``numClasses``,
  ``isMultinomial`` and ``formatVersion``;
- ``path/data/``: one Parquet row ``coefficients array<double>`` (the K x d matrix, row-major)
  and ``intercepts array<double>`` (K values). Doubles round-trip exactly.
"""

from __future__ import annotations

import os
from typing import Any, Generic, TypeVar

import numpy as np
from pyspark.ml.util import DefaultParamsReader, DefaultParamsWriter, MLReader, MLWriter

__all__ = ["LinearModelReader", "LinearModelWriter"]

FORMAT_VERSION = 1
M = TypeVar("M")


class LinearModelWriter(MLWriter):
    """Writes a fitted async linear model (``instance._W``, ``instance._b``)."""

    def __init__(self, instance: Any) -> None:
        super().__init__()
        self.instance = instance

    def _handleOverwrite(self, path: str) -> None:
        """``overwrite()`` on Spark Connect, which has no JVM handle: Spark itself replaces
        ``path`` (a write in mode overwrite clears it on any file system it can write)."""
        from async_spark.engine.connect import is_connect

        spark = self.sparkSession
        if not is_connect(spark):
            super()._handleOverwrite(path)
            return
        spark.createDataFrame([], "x int").write.mode("overwrite").parquet(path)

    def saveImpl(self, path: str) -> None:
        inst = self.instance
        W = np.asarray(inst._W, dtype=np.float64)
        extra = {
            "numFeatures": int(W.shape[1]),
            "numClasses": int(inst._num_classes),
            "isMultinomial": bool(inst._multinomial),
            "formatVersion": FORMAT_VERSION,
        }
        DefaultParamsWriter.saveMetadata(inst, path, self.sparkSession, extraMetadata=extra)
        data = self.sparkSession.createDataFrame(
            [([float(v) for v in W.ravel()], [float(v) for v in np.ravel(inst._b)])],
            schema="coefficients array<double>, intercepts array<double>",
        )
        data.coalesce(1).write.parquet(os.path.join(path, "data"))


class LinearModelReader(MLReader, Generic[M]):
    """Reads what :class:`LinearModelWriter` wrote into an instance of ``cls``."""

    def __init__(self, cls: Any) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> M:
        meta = DefaultParamsReader.loadMetadata(path, self.sparkSession)
        expected = f"{self.cls.__module__}.{self.cls.__name__}"
        if meta["class"] != expected:
            raise ValueError(f"{path}: holds a {meta['class']}, not a {expected}")
        if int(meta.get("formatVersion", 0)) != FORMAT_VERSION:
            raise ValueError(
                f"{path}: unknown format version {meta.get('formatVersion')!r} "
                f"(this library writes {FORMAT_VERSION})"
            )
        row = self.sparkSession.read.parquet(os.path.join(path, "data")).first()
        if row is None:
            raise ValueError(f"{path}/data: no coefficient row")
        d = int(meta["numFeatures"])
        W = np.asarray(row["coefficients"], dtype=np.float64).reshape(-1, d)
        b = np.asarray(row["intercepts"], dtype=np.float64)
        instance = self.cls._from_arrays(
            W, b, num_classes=int(meta["numClasses"]), multinomial=bool(meta["isMultinomial"])
        )
        instance._resetUid(meta["uid"])
        DefaultParamsReader.getAndSetParams(instance, meta)
        return instance  # type: ignore[no-any-return]

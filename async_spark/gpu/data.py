"""Training data of the GPU stage, one shard per rank, read where the rank runs.

A :class:`ShardSource` says where the rows are:

* ``builtin`` -- the HyLo datasets (``builtin:mnist1d``, ``synthetic``), generated on the
  executor; shard ``r`` of ``P`` is the ``r``-th ``numpy.array_split`` range of the training rows;
* ``parquet`` -- a Parquet file or directory with a numeric list column of features (flattened
  model input) and a label column (class index, or a flattened mask for ``unet``).

:func:`shard_rdd` turns a source into an RDD with one partition per rank whose partition ``r``
*computes* shard ``r`` on the executor (only the integers ``0..P-1`` leave the driver);
:func:`dataframe_shards` does the same for any DataFrame (each rank reads one DataFrame
partition). :func:`load_shard` reads shard ``r`` without Spark (the in-process reference run and
the TorchDistributor launcher, whose processes cannot see a Spark partition).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = [
    "ShardSource",
    "input_shape",
    "load_shard",
    "load_test",
    "shape_batch",
    "shard_rdd",
    "dataframe_shards",
]

_INPUT = {"cnn1d": (1, 1, 40), "resnet32": (3, 32, 32), "unet": (3, 32, 32)}


def input_shape(model: str) -> tuple[int, ...]:
    """Per-sample input shape of a reference model."""
    if model not in _INPUT:
        raise ValueError(f"model must be one of {tuple(_INPUT)}, got {model!r}")
    return _INPUT[model]


def shape_batch(model: str, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flat rows -> model input (float32) and labels (int64 classes, float32 masks for unet)."""
    n = x.shape[0]
    x = np.ascontiguousarray(x, dtype=np.float32).reshape((n, *input_shape(model)))
    if model == "unet":
        y = np.ascontiguousarray(y, dtype=np.float32).reshape(n, 1, 32, 32)
    else:
        y = np.asarray(y).reshape(n).astype(np.int64)
    return x, y


@dataclass(frozen=True)
class ShardSource:
    """Where the training rows come from (plain values, so it travels in closures)."""

    kind: str  # "builtin" or "parquet"
    data: str  # builtin name or Parquet path
    model: str = "cnn1d"
    seed: int = 0
    n_train: int = 1024
    n_test: int = 512
    test_path: str | None = None  # Parquet test set (kind "parquet")
    features: str = "features"
    label: str = "label"

    def __post_init__(self) -> None:
        if self.kind not in ("builtin", "parquet"):
            raise ValueError(f"kind must be 'builtin' or 'parquet', got {self.kind!r}")
        input_shape(self.model)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _bounds(n: int, parts: int) -> np.ndarray:
    return np.cumsum([0] + [len(a) for a in np.array_split(np.arange(n), parts)])


def _builtin(src: ShardSource) -> Any:
    from async_spark.hylo.data import load_dataset

    return load_dataset(src.data, src.model, seed=src.seed, n_train=src.n_train, n_test=src.n_test)


def _read_parquet(path: str, features: str, label: str) -> tuple[np.ndarray, np.ndarray]:
    import pyarrow.parquet as pq

    table = pq.read_table(path.removeprefix("file://"), columns=[features, label])
    n = table.num_rows
    fcol = table.column(features).combine_chunks()
    x = np.asarray(fcol.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
    x = x.reshape(n, -1) if n else x.reshape(0, 0)
    lcol = table.column(label).combine_chunks()
    if hasattr(lcol, "flatten") and lcol.type.num_fields == 0 and "list" in str(lcol.type):
        y = np.asarray(lcol.flatten().to_numpy(zero_copy_only=False)).reshape(n, -1)
    else:
        y = np.asarray(lcol.to_numpy(zero_copy_only=False))
    return x, y


def _flat(model: str, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = x.shape[0]
    return x.reshape(n, -1), (y.reshape(n, -1) if model == "unet" else y.reshape(n))


def load_shard(src: ShardSource, rank: int, world: int) -> tuple[np.ndarray, np.ndarray]:
    """Shard ``rank`` of ``world`` as flat ``(x, y)`` rows (no Spark)."""
    if src.kind == "builtin":
        d = _builtin(src)
        x, y = _flat(src.model, d.x_train.numpy(), d.y_train.numpy())
    else:
        x, y = _read_parquet(src.data, src.features, src.label)
    b = _bounds(x.shape[0], world)
    return x[b[rank] : b[rank + 1]], y[b[rank] : b[rank + 1]]


def load_test(src: ShardSource) -> tuple[np.ndarray, np.ndarray] | None:
    """The test set (flat rows) read by rank 0, or None when the source has none."""
    if src.kind == "builtin":
        d = _builtin(src)
        return _flat(src.model, d.x_test.numpy(), d.y_test.numpy())
    if src.test_path is None:
        return None
    return _read_parquet(src.test_path, src.features, src.label)


def shard_rdd(sc: Any, src: ShardSource, world: int) -> Any:
    """An RDD with ``world`` partitions; partition ``r`` is one ``(x, y)`` block, shard ``r``.

    Only the integers ``0..world-1`` are parallelized from the driver; each executor reads (or
    generates) its own shard. For a Parquet source, prefer :func:`dataframe_shards` over a
    DataFrame that Spark reads in parallel.
    """

    def read(index: int, _: Any) -> Any:
        yield load_shard(src, index, world)

    return sc.parallelize(range(world), world).mapPartitionsWithIndex(read)


def dataframe_shards(df: Any, world: int, features: str = "features", label: str = "label") -> Any:
    """An RDD of ``(features, label)`` rows with ``world`` partitions from a DataFrame.

    The DataFrame is repartitioned (a shuffle on the executors) when its partition count is not
    ``world``; rank ``r`` then reads partition ``r``. Rows cross into Python one by one (Rows),
    which is fine for the sizes a deep model's epoch loop holds in memory.
    """
    if df.rdd.getNumPartitions() != world:
        df = df.repartition(world)
    return df.select(features, label).rdd.map(lambda row: (row[0], row[1]))

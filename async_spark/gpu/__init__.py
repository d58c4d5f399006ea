"""async_spark.gpu: the Spark side of HyLo.

A barrier stage with a GPU resource profile runs one torch rank per task
(:class:`BarrierLauncher`), each reading its own Spark partition; :func:`train_hylo_spark` runs
the HyLo training on it (or on ``TorchDistributor``) and writes the outputs of
``async-spark hylo``. pyspark and torch are imported when used, not here.
"""

from .data import ShardSource, dataframe_shards, load_shard, shard_rdd
from .hylo_stage import LAUNCHERS, hylo_rank, train_hylo_local, train_hylo_spark, write_outputs
from .launcher import (
    BarrierLauncher,
    LaunchResult,
    RankContext,
    RankFailedError,
    concat_blocks,
    gpu_resource_profile,
)

__all__ = [
    "LAUNCHERS",
    "BarrierLauncher",
    "LaunchResult",
    "RankContext",
    "RankFailedError",
    "ShardSource",
    "concat_blocks",
    "dataframe_shards",
    "gpu_resource_profile",
    "hylo_rank",
    "load_shard",
    "shard_rdd",
    "train_hylo_local",
    "train_hylo_spark",
    "write_outputs",
]

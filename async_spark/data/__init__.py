"""async_spark.data: datasets as P blocks that live in the Python workers.

Entry point: :func:`open_dataset` (a spec -> a picklable :class:`BlockSource` and a
:class:`DatasetDescriptor`). Sources: LIBSVM files, Parquet, numpy/scipy arrays (staged as
``.npy``), built-ins (``builtin:synthetic``, ``builtin:breast_cancer``, ``builtin:digits``,
``builtin:mnist1d``). Bad input raises :class:`DataError` naming the file and line or column.
"""

from async_spark.data.arrays import ArraySource, array_source, default_staging_dir, stage_arrays
from async_spark.data.blocks import (
    Block,
    BlockSource,
    DatasetDescriptor,
    block_nbytes,
    cache_info,
    clear_cache,
    get_block,
    set_cache_limit,
)
from async_spark.data.builtin import (
    SmallDatasetSource,
    SyntheticSource,
    small_dataset,
    synthetic_source,
)
from async_spark.data.dataset import DEFAULT_DATA, FORMATS, open_dataset, parse_builtin_spec
from async_spark.data.errors import DataError
from async_spark.data.libsvm import (
    LibsvmSource,
    index_libsvm,
    libsvm_source,
    parse_libsvm_bytes,
    parse_libsvm_naive,
)
from async_spark.data.parquet import ParquetSource, parquet_source
from async_spark.data.transform import LOSSES, TransformedSource, row_norms_sq, scan_blocks

__all__ = [
    # blocks and the worker cache
    "Block",
    "BlockSource",
    "DatasetDescriptor",
    "block_nbytes",
    "get_block",
    "cache_info",
    "clear_cache",
    "set_cache_limit",
    # entry point
    "open_dataset",
    "parse_builtin_spec",
    "DEFAULT_DATA",
    "FORMATS",
    "LOSSES",
    "DataError",
    # sources
    "LibsvmSource",
    "libsvm_source",
    "index_libsvm",
    "parse_libsvm_bytes",
    "parse_libsvm_naive",
    "ParquetSource",
    "parquet_source",
    "ArraySource",
    "array_source",
    "stage_arrays",
    "default_staging_dir",
    "SyntheticSource",
    "synthetic_source",
    "SmallDatasetSource",
    "small_dataset",
    "TransformedSource",
    "scan_blocks",
    "row_norms_sq",
]

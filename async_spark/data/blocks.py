"""Datasets as P blocks whose decoded arrays stay in the Python worker processes.

Why not ``RDD.cache()``: a cached PySpark RDD is stored pickled in the JVM and every task re-reads
and unpickles its partition into the Python worker (~400 ms per task here, see
``shared/reference/spark-notes.md``). PySpark reuses its Python workers between tasks, so a block
decoded once into a module-level cache of the worker process is found again by the next task on
the same worker at the cost of a dictionary lookup.

A :class:`BlockSource` is a small picklable description of where block ``p`` comes from (a file
and a row range, a seed, a memory-mapped ``.npy``). It is what travels in the task closure; the
decoded :class:`Block` never does. Any worker can rebuild any block from its source, so a lost
executor loses nothing but a cache entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

__all__ = [
    "Block",
    "BlockSource",
    "DatasetDescriptor",
    "block_nbytes",
    "get_block",
    "cache_info",
    "clear_cache",
    "clear_host_cache",
    "forget_blocks",
    "host_cache_dir",
    "private_directory",
    "UnsafeDirectoryError",
    "set_cache_limit",
]


class Block(NamedTuple):
    """One partition of a dataset, decoded.

    Attributes
    ----------
    X : ndarray (rows, d) float64 or scipy.sparse.csr_matrix
    y : ndarray (rows,) float64 labels (class index as float for multinomial)
    row_offset : int
        Global index of the block's first row; a block holds rows
        ``row_offset .. row_offset + rows - 1`` of the dataset (used by SAGA's per-sample table).
    """

    X: Any
    y: np.ndarray
    row_offset: int

    @property
    def rows(self) -> int:
        return int(self.y.shape[0])


@dataclass(frozen=True)
class DatasetDescriptor:
    """What the driver knows of a dataset without holding its rows."""

    dataset_id: str
    n: int
    d: int
    rows_per_block: tuple[int, ...]
    sparse: bool
    nnz: int | None = None
    num_classes: int | None = None
    #: max_i ||x_i||^2 over the rows as loaded (after standardization); for step-size rules.
    max_row_norm_sq: float | None = None
    #: original label value of each class index (classification losses), else None.
    classes: tuple[float, ...] | None = None
    #: lambda_max(X^T X / n) without and with the intercept column, when the source measured it
    #: where the rows live (a DataFrame's partitions): exact from their Gram matrices when those
    #: are small enough (d + 1 <= 1024 and 256 MiB in all), else the trace bound; None: measured
    #: on the driver over the blocks when a step size needs it.
    gram_max: tuple[float, float] | None = None
    #: the loss the labels were checked and mapped for (``"auto"`` resolved); None: not checked.
    loss: str | None = None

    @property
    def num_blocks(self) -> int:
        return len(self.rows_per_block)

    @property
    def row_offsets(self) -> tuple[int, ...]:
        offsets = np.concatenate([[0], np.cumsum(self.rows_per_block)[:-1]])
        return tuple(int(o) for o in offsets)


class BlockSource(ABC):
    """Picklable recipe for the blocks of one dataset.

    Subclasses hold plain values only (paths, seeds, sizes) so that they pickle small into a task
    closure, and implement :meth:`load`, which runs inside a Python worker.
    """

    @property
    @abstractmethod
    def dataset_id(self) -> str:
        """A key that identifies the decoded content (changes when the content would)."""

    @property
    @abstractmethod
    def num_blocks(self) -> int:
        """P, the number of blocks."""

    @abstractmethod
    def load(self, index: int) -> Block:
        """Decode block ``index`` from the source (runs on a worker; deterministic)."""


def block_nbytes(block: Block) -> int:
    """Bytes held by a decoded block (the data, indices and labels)."""
    X = block.X
    if sp.issparse(X):
        size = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    else:
        size = np.asarray(X).nbytes
    return int(size + block.y.nbytes)


# --- per-process cache -------------------------------------------------------------------------
# One cache per Python worker process. Bounded in bytes (least recently used block evicted first);
# the bound comes from ASYNC_SPARK_BLOCK_CACHE_MB (set it with spark.executorEnv.* on a cluster).

_DEFAULT_LIMIT_MB = 4096
_lock = threading.Lock()
_cache: OrderedDict[tuple[str, int], tuple[Block, int]] = OrderedDict()
_stats = {"hits": 0, "misses": 0, "evictions": 0, "bytes": 0, "host_hits": 0}
_limit_bytes = int(float(os.environ.get("ASYNC_SPARK_BLOCK_CACHE_MB", _DEFAULT_LIMIT_MB)) * 2**20)


def set_cache_limit(megabytes: float) -> None:
    """Set this process's cache bound in MiB (evicts at once if over)."""
    global _limit_bytes
    if not megabytes > 0:
        raise ValueError(f"cache limit must be > 0 MiB, got {megabytes!r}")
    with _lock:
        _limit_bytes = int(megabytes * 2**20)
        _evict_locked()


def _evict_locked() -> None:
    # Keep the most recent block even when it alone exceeds the bound: a task needs it now.
    while _stats["bytes"] > _limit_bytes and len(_cache) > 1:
        _, (_, size) = _cache.popitem(last=False)
        _stats["bytes"] -= size
        _stats["evictions"] += 1


def get_block(source: BlockSource, index: int) -> Block:
    """Block ``index`` of ``source`` from this process's cache, loading it on a miss."""
    if not 0 <= index < source.num_blocks:
        raise IndexError(f"block index {index} outside [0, {source.num_blocks})")
    key = (source.dataset_id, int(index))
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            _stats["hits"] += 1
            return hit[0]
        _stats["misses"] += 1
    # Load outside the lock: loading can take seconds and other threads may want other blocks.
    block = _load_through_host_cache(source, index)
    size = block_nbytes(block)
    with _lock:
        if key not in _cache:
            _cache[key] = (block, size)
            _stats["bytes"] += size
            _evict_locked()
    return block


def forget_blocks(dataset_prefix: str) -> int:
    """Drop from this process's cache every block of the datasets whose id starts with
    ``dataset_prefix`` (a DataFrame's, once the task that held it is done); how many."""
    with _lock:
        keys = [k for k in _cache if k[0].startswith(dataset_prefix)]
        for k in keys:
            _stats["bytes"] -= _cache.pop(k)[1]
    return len(keys)


# --- host cache ---------------------------------------------------------------------------------
# Spark runs one Python worker per concurrent task slot, and a task may land on any of them, so
# with 8 slots a block could be decoded 8 times on one host. The first worker to decode a block
# also writes it as .npy files under a host directory; the others memory-map those files (the
# page cache shares them between processes). Writes are atomic (temporary folder + rename).
# ASYNC_SPARK_BLOCK_DIR sets the directory ("off" disables it); ASYNC_SPARK_BLOCK_DIR_MB bounds
# its size (oldest entries removed first). The directory is this user's alone: created 0700, and
# refused when it is owned by someone else, is a symbolic link or is group/world-writable (its
# default path under /tmp is predictable, so another user could create it first and plant blocks).

_DEFAULT_HOST_DIR_MB = 16384


class UnsafeDirectoryError(PermissionError):
    """A directory that others could write or own, refused (the message says what to do)."""


def private_directory(path: str | os.PathLike[str], what: str, *, env: str | None = None) -> Path:
    """Create ``path`` with mode 0700 if missing; refuse it unless this user alone can write it.

    An existing directory must be a real directory (not a symbolic link), owned by this user
    and not writable by group or others; if it is readable by them it is narrowed to 0700.

    Raises
    ------
    UnsafeDirectoryError
        (a ``PermissionError``) One line naming the directory, what is wrong with it and what
        to do (``env`` names the variable that chooses another directory).
    """
    root = Path(path)
    root.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(root, 0o700)
        os.chmod(root, 0o700)  # exactly 0700, whatever the umask
    except FileExistsError:
        pass
    st = os.lstat(root)
    hint = f"; remove it or set {env} to a directory of your own" if env else "; remove it"
    if not stat.S_ISDIR(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise UnsafeDirectoryError(f"{root}: the {what} is {kind}{hint}")
    uid = os.getuid() if hasattr(os, "getuid") else st.st_uid
    if st.st_uid != uid:
        raise UnsafeDirectoryError(
            f"{root}: the {what} is owned by uid {st.st_uid}, not by this user (uid {uid}){hint}"
        )
    if st.st_mode & 0o022:
        raise UnsafeDirectoryError(
            f"{root}: the {what} is writable by group or others"
            f" (mode {stat.S_IMODE(st.st_mode):04o}){hint}"
        )
    if st.st_mode & 0o077:
        os.chmod(root, 0o700)
    return root


def host_cache_dir() -> Path | None:
    """The host-level block directory, or None when disabled (not created; see
    :func:`private_directory` for the checks made before it is used)."""
    env = os.environ.get("ASYNC_SPARK_BLOCK_DIR", "")
    if env.lower() == "off":
        return None
    if env:
        return Path(env)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"async-spark-blocks-{uid}"


def _entry_dir(root: Path, source: BlockSource, index: int) -> Path:
    digest = hashlib.sha1(source.dataset_id.encode()).hexdigest()[:20]
    return root / digest / str(int(index))


def _read_entry(entry: Path) -> Block:
    meta = json.loads((entry / "meta.json").read_text())
    y = np.load(entry / "y.npy", mmap_mode="r")
    if meta["sparse"]:
        parts = [np.load(entry / f"{k}.npy", mmap_mode="r") for k in ("data", "indices", "indptr")]
        X: Any = sp.csr_matrix(tuple(parts), shape=tuple(meta["shape"]), copy=False)
    else:
        X = np.load(entry / "X.npy", mmap_mode="r")
    return Block(X, y, int(meta["row_offset"]))


def _write_entry(entry: Path, block: Block) -> None:
    entry.parent.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    try:
        X = block.X
        sparse = sp.issparse(X)
        if sparse:
            X = sp.csr_matrix(X)
            for name, arr in (("data", X.data), ("indices", X.indices), ("indptr", X.indptr)):
                np.save(tmp / f"{name}.npy", arr)
        else:
            np.save(tmp / "X.npy", np.asarray(X))
        np.save(tmp / "y.npy", np.asarray(block.y))
        meta = {"sparse": sparse, "shape": list(X.shape), "row_offset": int(block.row_offset)}
        (tmp / "meta.json").write_text(json.dumps(meta))
        try:
            os.rename(tmp, entry)
        except OSError:  # another worker won the race: its entry is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _trim_host_cache(root: Path) -> None:
    limit = float(os.environ.get("ASYNC_SPARK_BLOCK_DIR_MB", _DEFAULT_HOST_DIR_MB)) * 2**20
    entries = []
    total = 0
    for meta in root.glob("*/*/meta.json"):
        entry = meta.parent
        size = sum(f.stat().st_size for f in entry.iterdir())
        entries.append((meta.stat().st_mtime, size, entry))
        total += size
    for _, size, entry in sorted(entries):
        if total <= limit:
            break
        shutil.rmtree(entry, ignore_errors=True)
        total -= size


def _load_through_host_cache(source: BlockSource, index: int) -> Block:
    root = host_cache_dir()
    if root is None or not getattr(source, "host_cacheable", True):
        return source.load(index)
    try:
        root = private_directory(root, "host block cache directory", env="ASYNC_SPARK_BLOCK_DIR")
    except UnsafeDirectoryError:
        raise
    except OSError:  # cannot be created (read-only disk...): decode without sharing
        return source.load(index)
    entry = _entry_dir(root, source, index)
    if (entry / "meta.json").is_file():
        try:
            block = _read_entry(entry)
            with _lock:
                _stats["host_hits"] += 1
            return block
        except (OSError, ValueError, KeyError):
            shutil.rmtree(entry, ignore_errors=True)  # a damaged entry: decode again
    block = source.load(index)
    try:
        _write_entry(entry, block)
        _trim_host_cache(root)
    except OSError:
        pass  # a full or read-only disk only costs the sharing, never the task
    return block


def clear_host_cache() -> None:
    """Remove this host's block directory (blocks are decoded again on next use)."""
    root = host_cache_dir()
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


def cache_info() -> dict[str, int]:
    """Counters of this process's cache: hits, misses, evictions, bytes, blocks, limit."""
    with _lock:
        return dict(_stats, blocks=len(_cache), limit=_limit_bytes, pid=os.getpid())


def clear_cache() -> None:
    """Drop every cached block of this process (and reset the counters)."""
    with _lock:
        _cache.clear()
        for k in _stats:
            _stats[k] = 0

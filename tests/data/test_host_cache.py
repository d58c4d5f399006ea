"""The host-level block directory: shared decoded blocks between worker processes."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile

import numpy as np
import pytest
import scipy.sparse as sp

from async_spark.data import blocks
from async_spark.data.blocks import Block, BlockSource


class Counting(BlockSource):
    def __init__(self, sparse: bool, tag: str):
        self.sparse, self.tag, self.loads = sparse, tag, 0

    @property
    def dataset_id(self) -> str:
        return f"counting-{self.sparse}-{self.tag}"

    @property
    def num_blocks(self) -> int:
        return 2

    def load(self, index: int) -> Block:
        self.loads += 1
        rng = np.random.default_rng(index)
        X = (
            sp.random(50, 7, density=0.3, random_state=index, format="csr")
            if self.sparse
            else rng.standard_normal((50, 7))
        )
        return Block(X, rng.integers(0, 2, 50).astype(float), 50 * index)


@pytest.fixture
def host_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ASYNC_SPARK_BLOCK_DIR", str(tmp_path / "blocks"))
    blocks.clear_cache()
    yield tmp_path / "blocks"
    blocks.clear_cache()


@pytest.mark.parametrize("sparse", [True, False])
def test_second_process_reads_the_decoded_block_from_disk(host_dir, sparse):
    src = Counting(sparse, "a")
    first = blocks.get_block(src, 1)
    blocks.clear_cache()  # as if another worker process asked
    second = blocks.get_block(src, 1)
    assert src.loads == 1 and blocks.cache_info()["host_hits"] == 1
    dense = (lambda m: m.toarray()) if sparse else np.asarray
    np.testing.assert_array_equal(dense(first.X), dense(second.X))
    np.testing.assert_array_equal(first.y, second.y)
    assert second.row_offset == 50


def test_a_damaged_entry_is_decoded_again(host_dir):
    src = Counting(True, "b")
    blocks.get_block(src, 0)
    blocks.clear_cache()
    for f in host_dir.glob("*/0/y.npy"):
        f.write_bytes(b"garbage")
    blk = blocks.get_block(src, 0)
    assert src.loads == 2 and blk.rows == 50


def test_off_disables_it_and_the_size_bound_trims(tmp_path, monkeypatch):
    monkeypatch.setenv("ASYNC_SPARK_BLOCK_DIR", "off")
    assert blocks.host_cache_dir() is None
    monkeypatch.setenv("ASYNC_SPARK_BLOCK_DIR", str(tmp_path / "b"))
    monkeypatch.setenv("ASYNC_SPARK_BLOCK_DIR_MB", "0.001")  # ~1 KB: keeps almost nothing
    blocks.clear_cache()
    src = Counting(False, "c")
    blocks.get_block(src, 0)
    blocks.get_block(src, 1)
    assert len(list((tmp_path / "b").glob("*/*/meta.json"))) <= 1


# --- the directory is this user's alone -----------------------------------------------------------


def _foreign(path):
    """Make ``path`` another user's: chown it when root, else pretend to be another uid."""
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
        return contextlib.nullcontext()
    return _another_uid()


@contextlib.contextmanager
def _another_uid():
    with pytest.MonkeyPatch.context() as mp:
        real = os.getuid()
        mp.setattr(os, "getuid", lambda: real + 1)
        yield


def _mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_default_directory_is_created_0700(tmp_path, monkeypatch):
    monkeypatch.delenv("ASYNC_SPARK_BLOCK_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    old = os.umask(0)  # the widest umask: the mode must still be 0700
    try:
        blocks.clear_cache()
        blocks.get_block(Counting(True, "mode"), 0)
    finally:
        os.umask(old)
        blocks.clear_cache()
    root = tmp_path / f"async-spark-blocks-{os.getuid()}"
    assert root.is_dir() and _mode(root) == 0o700


def test_an_own_directory_readable_by_others_is_narrowed(host_dir):
    host_dir.mkdir(mode=0o755)
    os.chmod(host_dir, 0o755)
    blocks.get_block(Counting(True, "narrow"), 0)
    assert _mode(host_dir) == 0o700 and list(host_dir.glob("*/0/meta.json"))


@pytest.mark.parametrize("how", ["other owner", "world-writable", "group-writable", "symlink"])
def test_an_unsafe_directory_is_refused_and_left_untouched(host_dir, tmp_path, how):
    src = Counting(True, "unsafe")
    undo = contextlib.nullcontext()
    if how == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        host_dir.symlink_to(tmp_path / "elsewhere")
        match = "is a symbolic link"
    else:
        host_dir.mkdir(mode=0o700)
        if how == "other owner":
            undo = _foreign(host_dir)
            match = f"owned by uid {os.stat(host_dir).st_uid}, not by this user"
        else:
            mode = 0o777 if how == "world-writable" else 0o770
            os.chmod(host_dir, mode)
            match = rf"writable by group or others \(mode {mode:04o}\)"
    with undo, pytest.raises(blocks.UnsafeDirectoryError, match=match) as err:
        blocks.get_block(src, 0)
    message = str(err.value)
    assert str(host_dir) in message and "ASYNC_SPARK_BLOCK_DIR" in message
    assert len(message.splitlines()) == 1
    assert src.loads == 0 and not list((tmp_path / "elsewhere").glob("*")) + list(
        host_dir.glob("*")
    )


def test_a_directory_that_cannot_be_created_only_costs_the_sharing(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("ASYNC_SPARK_BLOCK_DIR", str(tmp_path / "file" / "blocks"))
    blocks.clear_cache()
    src = Counting(False, "nowhere")
    assert blocks.get_block(src, 1).rows == 50 and src.loads == 1
    blocks.clear_cache()


def test_the_default_staging_directory_is_private_too(tmp_path, monkeypatch):
    from async_spark.data.arrays import default_staging_dir, stage_arrays

    monkeypatch.delenv("ASYNC_SPARK_STAGING_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = default_staging_dir()
    assert root == str(tmp_path / f"async_spark_staging-{os.getuid()}")
    X, y = np.eye(3), np.array([0.0, 1.0, 0.0])
    folder, _ = stage_arrays(X, y)
    assert _mode(root) == 0o700 and os.path.isfile(os.path.join(folder, "meta.json"))
    os.chmod(root, 0o777)
    with pytest.raises(PermissionError, match="ASYNC_SPARK_STAGING_DIR"):
        stage_arrays(X, y)


def test_the_default_log_folder_is_private(tmp_path, monkeypatch):
    from async_spark.cli._common import log_path

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = log_path(None, "train")
    folder = tmp_path / f"async-spark-logs-{os.getuid()}"
    assert path.parent == folder and _mode(folder) == 0o700
    assert log_path(tmp_path / "run", "train") == tmp_path / "run" / "spark.log"
    os.chmod(folder, 0o777)
    with pytest.raises(blocks.UnsafeDirectoryError, match="log folder is writable by group"):
        log_path(None, "train")

"""The host-level block directory: shared decoded blocks between worker processes."""

from __future__ import annotations

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

"""Blocks stay decoded in the reused Python workers: loaded once per worker, then cache hits."""

from __future__ import annotations

import sys
from collections import defaultdict

import numpy as np
import pytest
from pyspark import cloudpickle

from async_spark.data.blocks import Block, BlockSource, get_block

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.spark


class SeededBlocks(BlockSource):
    def __init__(self, P: int, rows: int, d: int, seed: int):
        self.P, self.rows, self.d, self.seed = P, rows, d, seed

    @property
    def dataset_id(self) -> str:
        return f"seeded-{self.P}-{self.rows}-{self.d}-{self.seed}"

    @property
    def num_blocks(self) -> int:
        return self.P

    def load(self, index: int) -> Block:
        rng = np.random.default_rng([self.seed, index])
        X = rng.standard_normal((self.rows, self.d))
        return Block(X, np.sign(X[:, 0]), index * self.rows)


def test_blocks_are_loaded_once_per_worker_and_then_hit(sc):
    from async_spark.data.blocks import cache_info

    source = SeededBlocks(P=2, rows=500, d=20, seed=5)

    def task(it):
        p = next(iter(it))
        block = get_block(source, p)
        info = cache_info()
        return [(p, float(block.X.sum()), info["pid"], info["misses"], info["hits"])]

    rdd = sc.parallelize(range(2), 2)
    out = [sc.runJob(rdd, task, [p])[0] for _ in range(10) for p in (0, 1)]
    expected = {p: float(source.load(p).X.sum()) for p in (0, 1)}
    assert all(abs(s - expected[p]) < 1e-9 for p, s, *_ in out)  # the right block every time
    blocks_per_pid = defaultdict(set)
    misses = defaultdict(list)
    for p, _, pid, miss, _hits in out:
        blocks_per_pid[pid].add(p)
        misses[pid].append(miss)
    # a worker decodes each block it serves once, however many tasks it runs: after its first
    # task, a worker misses at most once more per other block it serves
    for pid, seen in misses.items():
        assert seen[-1] - seen[0] <= len(blocks_per_pid[pid]) - 1
    assert max(h for *_, h in out) > 0

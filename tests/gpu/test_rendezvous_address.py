"""The barrier stage's rendezvous: rank 0's store listens on its task's own address only."""

from __future__ import annotations

import os
import re
import socket
import sys

import pytest
from pyspark import cloudpickle

from async_spark.gpu import BarrierLauncher, ShardSource, shard_rdd

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks unpickle this module's fn

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux /proc/net/tcp"),
]


def _listening(port):
    out = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(name):
            with open(name) as fh:
                for line in fh.read().splitlines()[1:]:
                    fields = line.split()
                    addr, hexport = fields[1].rsplit(":", 1)
                    if int(hexport, 16) == port and fields[3] == "0A":
                        v4 = len(addr) == 8
                        out.append(socket.inet_ntoa(bytes.fromhex(addr)[::-1]) if v4 else addr)
    return out


def _report_store(ctx, shard):
    """Rank 0 says where its store listens (the port is in its 'process group ready' line)."""
    if ctx.rank != 0:
        return None
    line = next(ln for ln in ctx.logs if "process group ready" in ln)
    host, port = re.search(r"master (\S+):(\d+)", line).groups()
    return {"host": host, "listening": _listening(int(port))}


def test_rank0_store_listens_on_the_task_address_only(spark):
    src = ShardSource("builtin", "synthetic", "cnn1d", n_train=16, n_test=4)
    out = BarrierLauncher(spark, 2, timeout=60, retry=False).run(
        _report_store, shard_rdd(spark.sparkContext, src, 2)
    )
    assert out.result["host"] == "127.0.0.1"  # the executor's address (SPARK_LOCAL_IP)
    assert out.result["listening"] == ["127.0.0.1"], out.result

"""What a gradient task costs through Spark against the same gradient computed in this process.

For blocks of ``builtin:synthetic`` data (rcv1-like CSR, d = 10^4, ~50 nonzeros per row) of
increasing size, each measured ``--repeats`` times in interleaved order (so drift of this shared
machine hits every path alike), medians reported:

* **in-process**: the logistic gradient sum of the block (``block_gradient_sum``) on the driver's
  own copy of the block -- the compute floor;
* **worker cache** (the library's data path): a single-partition ``sc.runJob`` whose task finds the
  block in the Python worker's cache (:func:`async_spark.data.blocks.get_block`), computes the same
  gradient and returns it (the model travels in the closure, the gradient back: d floats each
  way). The task times itself, so ``fixed = wall - in-task compute`` is the per-task cost that Spark
  adds; the first task (the cache miss that builds the block) is reported apart;
* **no-op runJob**: the same single-partition job returning a constant -- the floor of any task;
  every task here drains its (one-element) input iterator: PySpark does not reuse a Python worker
  whose task left input unread (it forks a new one, ~0.5 s here, and the block cache is lost);
* **RDD.cache()**: the alternative the library avoids, a cached one-partition RDD holding the
  block's arrays; each task reads (unpickles) the partition from the JVM's block manager and
  computes the gradient.

Targets (issue 3): the fixed per-task cost of the worker-cache path within 20% of a no-op
``runJob``, and its total <= 2x the in-process time for blocks of >= 5*10^7 nonzeros.

Memory: the largest block (5*10^7 nonzeros, ~600 MB of CSR) exists three times (driver, worker
cache, and pickled in the JVM for the ``RDD.cache()`` path, which is why the driver JVM gets
``--driver-memory``); each size's blocks are dropped before the next. ``--cached-max`` (default
10^7 nonzeros) skips the ``RDD.cache()`` path above a size: at 5*10^7 it needs ~600 MB of heap
per copy and drove the 3 GB driver JVM out of memory on this shared machine.

Last line: ``RESULT data_path_overhead_ratio_largest <worker-cache total / in-process>`` at the
largest size.

Usage: python benchmarks/data_path.py [--quick] [--master local[2]] [--sizes 1e5 1e6 ...]
       python benchmarks/data_path.py --smoke   # seconds: one block of 10^4 nonzeros, 3 repeats
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import print_table, spark_session  # noqa: E402

from async_spark.data.blocks import cache_info, clear_cache, get_block  # noqa: E402
from async_spark.data.builtin import synthetic_source  # noqa: E402
from async_spark.models.linear import LinearModel, block_gradient_sum  # noqa: E402

D = 10_000
DENSITY = 0.005  # ~50 nonzeros per row


def cache_task(source: Any, model: LinearModel, theta: np.ndarray) -> Any:
    """Runs in the worker: block from the cache, gradient, timings."""

    def f(it: Any) -> list[Any]:
        for _ in it:  # drain the input: a task that leaves it unread kills its Python worker
            pass
        misses = cache_info()["misses"]
        t0 = time.perf_counter()
        block = get_block(source, 0)
        g = block_gradient_sum(model, block, theta)
        dt = time.perf_counter() - t0
        return [(g, dt, cache_info()["misses"] > misses, os.getpid())]

    return f


def cached_rdd_task(model: LinearModel, theta: np.ndarray) -> Any:
    def f(it: Any) -> list[Any]:
        from async_spark.data.blocks import Block

        ((data, indices, indptr, y, shape),) = list(it)
        X = sp.csr_matrix((data, indices, indptr), shape=shape)
        return [block_gradient_sum(model, Block(X, y, 0), theta)]

    return f


def block_arrays(source: Any) -> tuple[Any, ...]:
    b = source.load(0)
    return (b.X.data, b.X.indices, b.X.indptr, b.y, b.X.shape)


def drop_worker_caches(sc: Any, rdd: Any) -> None:
    def f(it: Any) -> list[int]:
        for _ in it:
            pass
        clear_cache()
        gc.collect()
        return [0]

    for _ in range(2):
        sc.runJob(rdd, f, [0])


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short run (under ~2 minutes)")
    ap.add_argument(
        "--smoke", action="store_true", help="tiny sizes, seconds: checks the script runs"
    )
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--sizes", type=float, nargs="+", default=None, help="nonzeros per block")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--cached-max", type=float, default=1e7, help="largest size for RDD.cache()")
    ap.add_argument("--driver-memory", default="3g")
    args = ap.parse_args(argv)
    if args.smoke:
        args.sizes, args.repeats = args.sizes or [1e4], args.repeats or 3
        args.driver_memory = "1g"
    sizes = [
        int(s) for s in (args.sizes or ([1e5, 1e6, 5e6] if args.quick else [1e5, 1e6, 1e7, 5e7]))
    ]
    repeats = args.repeats or (7 if args.quick else 15)

    spark = spark_session(args.master, "data-path", {"spark.driver.memory": args.driver_memory})
    sc = spark.sparkContext
    model = LinearModel("logistic", D, l2=1e-4)
    theta = np.random.default_rng(0).standard_normal(D + 1) * 0.01
    one = sc.parallelize(range(1), 1)

    def noop(it: Any) -> list[int]:
        for _ in it:  # drained, as every task here (else PySpark does not reuse the worker)
            pass
        return [0]

    rows_out = []
    summary: dict[int, dict[str, float]] = {}
    try:
        for _ in range(2 if args.smoke else 5):  # warm the JVM, the Python worker, imports
            sc.runJob(one, noop, [0])
        for size in sizes:
            # a term drawn twice in a row counts once: ~47.1 distinct nonzeros per row, not 50
            n = max(1, round(size / (DENSITY * D * 0.943)))
            source = synthetic_source(1, n=n, d=D, density=DENSITY, seed=len(summary))
            t0 = time.perf_counter()
            block = source.load(0)
            gen = time.perf_counter() - t0
            nnz = block.X.nnz
            task = cache_task(source, model, theta)
            t0 = time.perf_counter()
            first = sc.runJob(one, task, [0])[0]
            first_wall = time.perf_counter() - t0
            ref = block_gradient_sum(model, block, theta)
            if not np.allclose(first[0], ref, rtol=1e-10, atol=1e-12):
                raise AssertionError("the worker's gradient differs from the in-process one")
            for _ in range(2):
                sc.runJob(one, task, [0])  # warm: every idle worker holds the block

            cached = None
            if size <= args.cached_max:
                # built in the worker (shipping the block from the driver would put it in the
                # task itself), then stored pickled in the block manager by cache()
                cached = (
                    sc.parallelize(range(1), 1).map(lambda _, s=source: block_arrays(s)).cache()
                )
                cached.count()
                ctask = cached_rdd_task(model, theta)
                sc.runJob(cached, ctask, [0])

            t_in, t_spark, t_comp, t_noop, t_cached, misses, pids = [], [], [], [], [], 0, set()
            for _ in range(repeats):
                t0 = time.perf_counter()
                sc.runJob(one, noop, [0])
                t_noop.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                g, dt, miss, pid = sc.runJob(one, task, [0])[0]
                t_spark.append(time.perf_counter() - t0)
                t_comp.append(dt)
                misses += int(miss)
                pids.add(pid)
                t0 = time.perf_counter()
                block_gradient_sum(model, block, theta)
                t_in.append(time.perf_counter() - t0)
                if cached is not None:
                    t0 = time.perf_counter()
                    sc.runJob(cached, ctask, [0])
                    t_cached.append(time.perf_counter() - t0)
            med = statistics.median
            fixed = med([a - b for a, b in zip(t_spark, t_comp, strict=True)])
            s = {
                "nnz": nnz,
                "inproc": med(t_in),
                "spark": med(t_spark),
                "compute": med(t_comp),
                "fixed": fixed,
                "noop": med(t_noop),
                "cached": med(t_cached) if t_cached else float("nan"),
                "first": first_wall,
            }
            summary[size] = s
            rows_out.append(
                [
                    f"{nnz:.2e}",
                    f"{n}",
                    f"{s['inproc'] * 1e3:.1f}",
                    f"{s['spark'] * 1e3:.1f}",
                    f"{s['compute'] * 1e3:.1f}",
                    f"{fixed * 1e3:.1f}",
                    f"{s['noop'] * 1e3:.1f}",
                    f"{fixed / s['noop']:.2f}",
                    f"{s['spark'] / s['inproc']:.2f}",
                    "-" if cached is None else f"{s['cached'] * 1e3:.1f}",
                    f"{first_wall * 1e3:.0f} (gen {gen * 1e3:.0f})",
                ]
            )
            print(
                f"  {nnz:.2e} nnz: in-process {s['inproc'] * 1e3:.1f} ms, through Spark "
                f"{s['spark'] * 1e3:.1f} ms (fixed {fixed * 1e3:.1f}), no-op {s['noop'] * 1e3:.1f}"
                f" ms, RDD.cache() {s['cached'] * 1e3:.1f} ms; cache misses in timed tasks: "
                f"{misses}, worker pids {sorted(pids)}",
                flush=True,
            )
            if cached is not None:
                cached.unpersist(blocking=True)
            del block, cached
            gc.collect()
            drop_worker_caches(sc, one)
    finally:
        spark.stop()

    print()
    print(f"One gradient task, {args.master}, medians of {repeats} (times in ms):")
    print_table(
        [
            "nnz",
            "rows",
            "in-process",
            "via Spark",
            "in-task compute",
            "fixed",
            "no-op runJob",
            "fixed/no-op",
            "Spark/in-proc",
            "RDD.cache()",
            "first task (build)",
        ],
        rows_out,
    )
    largest = summary[sizes[-1]]
    ratio = largest["spark"] / largest["inproc"]
    worst_fixed = max(s["fixed"] / s["noop"] for s in summary.values())
    print()
    print(
        f"fixed per-task cost / no-op runJob: worst {worst_fixed:.2f} "
        f"(target <= 1.20: {'met' if worst_fixed <= 1.2 else 'NOT met'})"
    )
    big = [s for size, s in summary.items() if size >= 5e7]
    if big:
        ok = all(s["spark"] / s["inproc"] <= 2.0 for s in big)
        print(
            f"total / in-process at >= 5e7 nnz: {ratio:.2f} (target <= 2: {'met' if ok else 'NOT met'})"
        )
    else:
        print(f"no block of >= 5e7 nonzeros in this run (quick); largest ratio {ratio:.2f}")
    print(f"RESULT data_path_overhead_ratio_largest {ratio:.3f}")
    return ratio


if __name__ == "__main__":
    main(sys.argv[1:])

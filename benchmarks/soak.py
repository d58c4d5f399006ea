"""Soak: a long asynchronous run must not leak (broadcasts, driver threads, driver memory).

ASAGA with a staleness bound (so results are rejected and stale tasks cancelled too) on 32 blocks
of a small synthetic problem, through Spark, for 20 000 updates (``--quick``: 3 000). A monitor
thread samples, every second: the live broadcasts of the history store, the driver's Python
threads, the resident memory of the driver's Python process and of its JVM; every tenth sample
it also records the driver JVM's used heap after a full GC (``Runtime.gc()``) and the driver's
Python heap after ``gc.collect()``: the bytes ``tracemalloc`` traces (started before the session,
one frame; numpy's buffers included) and ``sys.getallocatedblocks()``.

Growth is measured from the end of a warm-up (the first 10% of updates: JIT, caches and Python
workers settle) to the end. Last line: ``RESULT soak_rss_growth_mb <growth>``, the growth of the
resident memory of the driver (Python process + JVM, whose heap is bounded at 1 GB so that its RSS
plateaus). The two heap figures are printed above it (the finer leak indicators: RSS also moves
with the allocators' caches and the JVM's lazy heap sizing); they are not RESULT lines.

``--transport resident`` soaks the engine's default transport instead (one Spark job of
long-running tasks; versions travel over its sockets, so the "broadcasts" are the history store's
in-process handles, and the copies the transport keeps of the versions its workers hold are
sampled too); the default, ``jobs``, is the one job per task whose broadcasts can leak.

Usage: python benchmarks/soak.py [--quick] [--updates N] [--partitions 32] [--transport jobs]
       python benchmarks/soak.py --smoke   # seconds: 150 updates on 4 blocks (no leak figure)
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import sys
import threading
import time
import tracemalloc

from async_spark.data.dataset import open_dataset
from async_spark.engine import AsyncEngine, build_session
from async_spark.engine.resident import ResidentTransport
from async_spark.engine.spark import SparkTransport
from async_spark.solvers import TrainConfig, train_linear


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def jvm_heap_used_mb(spark) -> float:
    """The driver JVM's used heap after a full garbage collection (the leak indicator)."""
    rt = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
    rt.gc()
    return (rt.totalMemory() - rt.freeMemory()) / 2**20


def python_heap() -> tuple[float, int]:
    """The driver's Python heap after a full collection: traced MB, allocated blocks."""
    gc.collect()
    return tracemalloc.get_traced_memory()[0] / 2**20, sys.getallocatedblocks()


def jvm_pid(spark) -> int:
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--smoke", action="store_true", help="tiny sizes, seconds: checks the script runs"
    )
    ap.add_argument("--updates", type=int, default=None)
    ap.add_argument("--partitions", type=int, default=None, help="default 32 (smoke: 4)")
    ap.add_argument("--transport", choices=("jobs", "resident"), default="jobs")
    args = ap.parse_args(argv)
    updates = args.updates or (150 if args.smoke else 3000 if args.quick else 20000)
    P = args.partitions or (4 if args.smoke else 32)

    tracemalloc.start(1)
    # A bounded driver heap: the JVM grows its heap lazily up to the bound (a quarter of the
    # machine's memory by default), which is growth but not a leak.
    spark = build_session(
        "local[4]",
        app_name="soak",
        conf={"spark.ui.enabled": "false", "spark.driver.memory": "1g"},
    )
    jpid = jvm_pid(spark)
    engines: list[AsyncEngine] = []
    transports: list = []

    def factory(task_fn, **kw):
        if args.transport == "resident":
            transport = ResidentTransport(spark)
        else:
            transport = SparkTransport(spark.sparkContext)
        transports.append(transport)
        engine = AsyncEngine(transport, task_fn, **kw)
        engines.append(engine)
        return engine

    def copies() -> int:  # versions the resident transport keeps for its workers' deltas
        t = transports[-1] if transports else None
        return t.stats["copies_kept"] if isinstance(t, ResidentTransport) else 0

    samples: list[tuple[float, int, int, float, float, int]] = []
    heap: list[tuple[int, float]] = []
    pyheap: list[tuple[int, float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        eng = engines[-1] if engines else None
        samples.append(
            (
                eng.version if eng else 0,
                eng.history.live_handles if eng else 0,
                threading.active_count(),
                rss_mb(os.getpid()),
                rss_mb(jpid),
                copies(),
            )
        )
        if eng is not None and len(samples) % 10 == 0:
            try:
                heap.append((eng.version, jvm_heap_used_mb(spark)))
            except Exception as exc:  # noqa: BLE001 - a failed sample must not end the soak
                print(f"heap sample failed: {exc}", file=sys.stderr)
            pyheap.append((eng.version, *python_heap()))

    def monitor() -> None:
        while not stop.wait(1.0):
            sample()

    data = "builtin:synthetic?n=20000&d=2000&nnz=20&seed=1"
    dataset = open_dataset(data, P, loss="logistic")
    cfg = TrainConfig(
        data=data,
        method="asaga",
        partitions=P,
        tau=2 * P,
        batch_fraction=0.2,
        l2=1e-4,
        max_updates=updates,
        quiet=True,
        eval_every=5.0,
    )
    threads_before = threading.active_count()
    mon = threading.Thread(target=monitor, daemon=True)
    t0 = time.monotonic()
    mon.start()
    try:
        result = train_linear(
            cfg, spark=spark, dataset=dataset, engine_factory=functools.partial(factory)
        )
    finally:
        stop.set()
        mon.join()
    if not samples:  # a short run (--smoke) can end before the monitor's first second
        sample()
    elapsed = time.monotonic() - t0
    eng = engines[-1]
    threads_after = threading.active_count()
    spark.stop()

    warm = [s for s in samples if s[0] >= updates // 10] or samples
    start, end = warm[0], samples[-1]
    warm_heap = [h for v, h in heap if v >= updates // 10] or [h for _, h in heap]
    # Leak = Python RSS growth + growth of the JVM heap that survives a full GC (the JVM's RSS
    # also grows while its heap fills up to its bound before collecting, which is not a leak).
    heap_growth = warm_heap[-1] - warm_heap[0] if len(warm_heap) >= 2 else float("nan")
    warm_py = [p for p in pyheap if p[0] >= updates // 10] or pyheap
    growth = (end[3] + end[4]) - (start[3] + start[4])
    c = result.engine_snapshot["counts"]
    print(f"{args.transport} transport:")
    print(f"{updates} updates, {P} blocks, {elapsed:.0f} s ({updates / elapsed:.1f} updates/s)")
    print(
        f"  results: accepted {c['accepted']}, rejected {c['rejected']}, cancelled "
        f"{c['cancelled']}, failed {c['failed']}; accounting closes: "
        f"{c['dispatched'] == c['accepted'] + c['rejected'] + c['cancelled'] + c['failed'] + c['in_flight']}"
    )
    print(
        f"  live broadcasts: max {max(s[1] for s in samples)} during the run "
        f"(bound: {P} in flight + 1), {eng.history.live_handles} after; "
        f"created {eng.history.created}, destroyed {eng.history.destroyed}"
    )
    print(
        f"  driver threads: {threads_before} before, max {max(s[2] for s in samples)} during, "
        f"{threads_after} after"
    )
    if args.transport == "resident":
        print(
            f"  version copies kept by the resident transport: max "
            f"{max(s[5] for s in samples)} during the run, {copies()} after close"
        )
    print(
        f"  driver RSS (python + JVM): {start[3]:.0f} + {start[4]:.0f} MB after warm-up -> "
        f"{end[3]:.0f} + {end[4]:.0f} MB at the end"
    )
    if len(warm_heap) >= 2:
        print(f"  JVM heap growth after GC: {heap_growth:.1f} MB")
        print(
            f"  driver JVM heap used after GC: {warm_heap[0]:.0f} MB after warm-up -> "
            f"{warm_heap[-1]:.0f} MB at the end (samples: "
            f"{', '.join(f'{h:.0f}' for h in warm_heap)})"
        )
    if len(warm_py) >= 2:
        (v0, mb0, bl0), (v1, mb1, bl1) = warm_py[0], warm_py[-1]
        per = 1024 * (mb1 - mb0) / max(1, v1 - v0)
        print(
            f"  Python heap growth after gc.collect(): {mb1 - mb0:.1f} MB ({per:.2f} KB per update)"
        )
        print(
            f"  driver Python heap after gc.collect() (tracemalloc): {mb0:.1f} MB at update {v0} "
            f"-> {mb1:.1f} MB at update {v1}; allocated blocks {bl0} -> {bl1} (samples: "
            f"{', '.join(f'{p[1]:.1f}' for p in warm_py)})"
        )
    print(f"RESULT soak_rss_growth_mb {growth:.1f}")
    return growth


if __name__ == "__main__":
    main(sys.argv[1:])

"""What the engine costs on top of Spark, measured side by side in one run.

1. Throughput of no-op tasks through the engine (fully asynchronous, one task in flight per block)
   against a bare loop of ``sc.runJob`` single-partition jobs from the same number of driver threads.
2. Driver-side cost per accepted result for a 10^5-dimension model, without Spark: the scheduler
   core's bookkeeping and policy (complete + advance + next_dispatches), and separately the cost of
   publishing a new version (history store + creating its broadcast).
   Also how that bookkeeping scales with the number of blocks (P = 8, 128, 1024; fully
   asynchronous and SSP with s = 2; results complete in a random order).
3. Version publishing alternatives through Spark at 10^5 dimensions: one broadcast per version,
   the model inside the task closure, and a closure that carries only a sparse delta (1% of the
   coordinates; transport cost only — the engine does not publish deltas).

Last line: ``RESULT engine_throughput_ratio <engine jobs/s / bare jobs/s>``.

Usage: python benchmarks/engine_overhead.py [--quick] [--master local[2]] [--threads 4]
       python benchmarks/engine_overhead.py --core-only   # the bookkeeping scaling alone, no Spark
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

import numpy as np

from async_spark.engine import (
    AsyncEngine,
    HistoryStore,
    InlinePublisher,
    Policy,
    SchedulerCore,
    TaskStatus,
    build_session,
    parse_policy,
)
from async_spark.engine.spark import BroadcastPublisher, SparkTransport


def noop_task(block, model, args):
    return block


def model_sum_task(block, model, args):
    """Touches the model so that its transport is really paid for."""
    if isinstance(model, tuple):  # a sparse delta (indices, values)
        return float(model[1].sum())
    return float(model[0])


def bare_throughput(sc, threads: int, seconds: float) -> float:
    """Jobs/s of a bare loop of single-partition runJob calls from `threads` driver threads."""
    rdd = sc.parallelize(range(threads), threads)
    stop = time.monotonic() + seconds
    counts = [0] * threads

    def loop(i: int) -> None:
        f = lambda it, i=i: [i]  # noqa: E731 - the same tiny closure the engine would ship
        while time.monotonic() < stop:
            sc.runJob(rdd, f, [i])
            counts[i] += 1

    start = time.monotonic()
    ts = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts) / (time.monotonic() - start)


def engine_throughput(sc, threads: int, seconds: float, publisher: str, model, task) -> float:
    """Accepted results/s through the engine, publishing a new version after every result."""
    transport = SparkTransport(sc, publisher=publisher)
    n = 0
    with AsyncEngine(
        transport,
        task,
        num_blocks=threads,
        policy=Policy.asynchronous(),
        initial_model=model,
        run_name="overhead",
        keep_trajectory=False,
    ) as eng:
        start = time.monotonic()
        for _ in eng.results():
            n += 1
            eng.publish(model)
            if time.monotonic() - start >= seconds:
                break
        elapsed = time.monotonic() - start
    return n / elapsed


def driver_costs(dim: int, blocks: int, results: int) -> dict[str, float]:
    """Per-result driver cost (ms) of bookkeeping+policy, and of publishing a version."""
    core = SchedulerCore(blocks, Policy.partial_barrier(0.5, tau=8))
    in_flight = list(core.next_dispatches())
    t0 = time.perf_counter()
    for _ in range(results):
        ticket = in_flight.pop(0)
        core.complete(ticket.task_id, TaskStatus.OK, duration=0.01, executor="e")
        core.advance()
        in_flight.extend(core.next_dispatches())
    core_ms = (time.perf_counter() - t0) / results * 1e3

    rng = np.random.default_rng(0)
    w = rng.standard_normal(dim)
    store = HistoryStore(InlinePublisher())
    store.publish(0, w.copy())
    t0 = time.perf_counter()
    models = [w + i for i in range(8)]  # the update rule's work is not the engine's: precompute
    for v in range(1, results + 1):
        store.publish(v, models[v % 8])
    publish_ms = (time.perf_counter() - t0) / results * 1e3
    return {"bookkeeping_policy_ms": core_ms, "publish_store_ms": publish_ms}


def core_scaling(results: int) -> dict[tuple[str, int], float]:
    """Bookkeeping + policy per result (microseconds) by policy and number of blocks."""
    out = {}
    for policy in ("async", "ssp:2"):
        for blocks in (8, 128, 1024):
            core = SchedulerCore(blocks, parse_policy(policy))
            rng = np.random.default_rng(0)
            running = list(core.next_dispatches())
            t0 = time.perf_counter()
            for _ in range(results):
                ticket = running.pop(int(rng.integers(len(running))))
                if core.complete(ticket.task_id, TaskStatus.OK).accepted:
                    core.advance()
                running += core.next_dispatches()
            out[(policy, blocks)] = (time.perf_counter() - t0) / results * 1e6
    return out


def _print_core_scaling(results: int) -> None:
    table = core_scaling(results)
    print("bookkeeping + policy per result vs blocks (no Spark, random completion order):")
    for (policy, blocks), us in table.items():
        print(f"  {policy:6s} P={blocks:<5d} {us:7.1f} us")


def broadcast_create_ms(sc, dim: int, reps: int) -> float:
    pub = BroadcastPublisher(sc)
    w = np.random.default_rng(1).standard_normal(dim)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        h = pub.create(w)
        times.append(time.perf_counter() - t0)
        pub.destroy(h)
    return statistics.median(times) * 1e3


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short run (CI-sized)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--threads", type=int, default=4, help="driver threads = blocks in flight")
    ap.add_argument("--dim", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=None, help="alternating measurement pairs")
    ap.add_argument("--core-only", action="store_true", help="only the bookkeeping scaling")
    args = ap.parse_args(argv)
    if args.core_only:
        _print_core_scaling(5_000 if args.quick else 20_000)
        return float("nan")
    seconds = 3.0 if args.quick else 8.0
    repeats = args.repeats or (3 if args.quick else 5)

    spark = build_session(
        args.master, app_name="engine-overhead", conf={"spark.ui.enabled": "false"}
    )
    sc = spark.sparkContext
    try:
        # warm up the JVM, the Python workers and the code paths
        bare_throughput(sc, args.threads, 2.0)
        engine_throughput(sc, args.threads, 2.0, "inline", np.zeros(1), noop_task)

        bare, eng = [], []
        for _ in range(repeats):  # alternate, so drift of this shared machine hits both alike
            bare.append(bare_throughput(sc, args.threads, seconds))
            eng.append(
                engine_throughput(sc, args.threads, seconds, "inline", np.zeros(1), noop_task)
            )
        b, e = statistics.median(bare), statistics.median(eng)
        # adjacent runs share the machine's momentary load: the ratio of each pair is the figure
        pair_ratios = [x / y for x, y in zip(eng, bare, strict=True)]
        print(f"no-op tasks, {args.threads} driver threads, {args.master}:")
        print(
            f"  bare sc.runJob loop      {b:7.1f} jobs/s   (runs: {', '.join(f'{x:.1f}' for x in bare)})"
        )
        print(
            f"  engine (async, publish)  {e:7.1f} results/s (runs: {', '.join(f'{x:.1f}' for x in eng)})"
        )

        costs = driver_costs(args.dim, 16, 20_000 if not args.quick else 5_000)
        bc_ms = broadcast_create_ms(sc, args.dim, 10 if args.quick else 30)
        print("driver cost per accepted result (no Spark, P=16, barrier:0.5+tau:8):")
        print(f"  bookkeeping + policy     {costs['bookkeeping_policy_ms']:.4f} ms")
        print(f"  history store publish    {costs['publish_store_ms']:.4f} ms (d={args.dim})")
        print(
            f"  creating a broadcast     {bc_ms:.3f} ms (d={args.dim}, when a task first needs it)"
        )
        _print_core_scaling(5_000 if args.quick else 20_000)

        dim = args.dim
        w = np.random.default_rng(2).standard_normal(dim)
        k = max(1, dim // 100)
        delta = (np.arange(k, dtype=np.int64) * 100, np.ones(k))
        alt = {}
        for name, publisher, model in (
            ("broadcast per version", "broadcast", w),
            ("model in the closure", "inline", w),
            ("sparse delta (1%) in closure", "inline", delta),
        ):
            alt[name] = engine_throughput(
                sc, args.threads, seconds, publisher, model, model_sum_task
            )
        print(f"version publishing alternatives, d={dim}, publish after every result:")
        for name, rate in alt.items():
            print(f"  {name:30s} {rate:7.1f} results/s")
    finally:
        spark.stop()
    ratio = statistics.median(pair_ratios)
    print(f"  per-pair ratios engine/bare: {', '.join(f'{r:.3f}' for r in pair_ratios)}")
    print(f"RESULT engine_throughput_ratio {ratio:.3f}")
    return ratio


if __name__ == "__main__":
    main(sys.argv[1:])

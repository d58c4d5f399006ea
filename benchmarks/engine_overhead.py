"""What the engine costs on top of Spark, measured side by side in one run.

0. First, without Spark, what the kernel charges per round trip of a 1 KiB message with another
   process over loopback TCP and over a Unix-domain socket (the resident transport's two ways to
   reach a worker on the driver's machine).

1. Throughput of no-op tasks through the engine (fully asynchronous, one task in flight per block)
   against a bare loop of ``sc.runJob`` single-partition jobs from the same number of driver threads.
2. Driver-side cost per accepted result for a 10^5-dimension model, without Spark: the scheduler
   core's bookkeeping and policy (complete + advance + next_dispatches), and separately the cost of
   publishing a new version (history store + creating its broadcast).
   Also how that bookkeeping scales with the number of blocks (P = 8, 128, 1024; fully
   asynchronous and SSP with s = 2; results complete in a random order).
3. Version publishing alternatives through Spark at 10^5 dimensions: one broadcast per version,
   the model inside the task closure, and a closure that carries only a sparse delta (1% of the
   coordinates; transport cost only — the job transport does not publish deltas).
4. The transports side by side, at d = 100 and d = 10^5: bare ``runJob`` (each job ships and
   returns a d-vector), the job transport (:class:`SparkTransport`, one broadcast per version) and
   the resident transport (:class:`ResidentTransport`; its workers here share the driver's
   machine, so they connect over its local socket, and again with ``local_socket=False``, over
   TCP as executors on other machines do): results/s of a no-op task that returns a
   d-vector, with a new (dense) model version published after every result, so every ticket carries
   the whole model; and the driver's CPU time per result (every thread of the driver process), next
   to the engine's own share measured with an in-process null transport.

5. The resident transport from a **Spark Connect** session (a Connect server of the same master in
   a child process, this process its client, where the transport's server lives), at the same
   dimensions, beside the classic session's resident figure (run after it, on the same machine;
   ``--no-connect`` skips it, as does a missing Connect client package).

Last lines: ``RESULT engine_throughput_ratio <engine jobs/s / bare jobs/s>``,
``RESULT resident_vs_jobs_throughput_d100 <x>``, ``RESULT resident_vs_jobs_throughput_d1e5 <x>``
(resident results/s over job-transport results/s; medians of alternating pairs) and
``RESULT connect_vs_classic_resident_throughput_d100 <x>`` (the Connect session's resident
results/s over the classic session's, medians; nan when skipped).

Usage: python benchmarks/engine_overhead.py [--quick | --smoke] [--master local[2]] [--threads 4]
       python benchmarks/engine_overhead.py --core-only   # the bookkeeping scaling alone, no Spark
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import threading
import time

import numpy as np

from async_spark.engine import (
    AsyncEngine,
    HistoryStore,
    InlinePublisher,
    Outcome,
    Policy,
    ResidentTransport,
    SchedulerCore,
    TaskStatus,
    Transport,
    build_session,
    parse_policy,
)
from async_spark.engine.spark import BroadcastPublisher, SparkTransport
from async_spark.engine.task import TaskReport


def noop_task(block, model, args):
    return block


def model_sum_task(block, model, args):
    """Touches the model so that its transport is really paid for."""
    if isinstance(model, tuple):  # a sparse delta (indices, values)
        return float(model[1].sum())
    return float(model[0])


def vector_task(block, model, args):
    """A no-op that returns a model-sized payload (as a gradient would be)."""
    return model


# The far end of socket_round_trips, in a process of its own (its own interpreter: this module
# may run as __main__ of another program, whose functions a spawned child cannot import).
_ECHO = """
import socket, sys
family, address, size = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
sock = socket.socket(family, socket.SOCK_STREAM)
if family == socket.AF_INET:
    host, port = address.rsplit(":", 1)
    sock.connect((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
else:
    sock.connect(address)
reply = b"r" * size
while sock.recv(1 << 16):
    sock.sendall(reply)
"""


def socket_round_trips(family: int, count: int, size: int = 1024) -> tuple[float, float, float]:
    """Round trips of a ``size``-byte message with a process on this machine over loopback TCP or
    a Unix-domain socket: (round trips/s, user and system CPU microseconds of this side per round
    trip). What the kernel charges the driver for a ticket out and a result in, without Spark."""
    import resource
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        if family == socket.AF_INET:
            server = socket.create_server(("127.0.0.1", 0))
            address = server.getsockname()
        else:
            address = os.path.join(directory, "s")
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(address)
            server.listen()
        where = f"{address[0]}:{address[1]}" if family == socket.AF_INET else address
        child = subprocess.Popen([sys.executable, "-c", _ECHO, str(int(family)), where, str(size)])
        server.settimeout(60)
        sock, _ = server.accept()
        server.close()
        if family == socket.AF_INET:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        message = b"m" * size
        for _ in range(count // 10):  # warm-up
            sock.sendall(message)
            sock.recv(1 << 16)
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for _ in range(count):
            sock.sendall(message)
            got = len(sock.recv(1 << 16))
            while got < size:
                got += len(sock.recv(1 << 16))
        elapsed, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
        sock.close()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return (
        count / elapsed,
        (r1.ru_utime - r0.ru_utime) / count * 1e6,
        (r1.ru_stime - r0.ru_stime) / count * 1e6,
    )


def _print_socket_round_trips(count: int, repeats: int) -> None:
    print("socket round trips of 1 KiB with another process on this machine (no Spark):")
    for family, label in ((socket.AF_INET, "loopback TCP"), (socket.AF_UNIX, "Unix-domain")):
        runs = [socket_round_trips(family, count) for _ in range(repeats)]
        rate, user, system = (statistics.median(r[i] for r in runs) for i in range(3))
        print(
            f"  {label:13s} {rate:9.0f} round trips/s; this side's CPU per round trip: user "
            f"{user:.1f} us, system {system:.1f} us (medians of {repeats})"
        )


def bare_throughput(sc, threads: int, seconds: float, model=None) -> float:
    """Jobs/s of a bare loop of single-partition runJob calls from `threads` driver threads (each
    job ships ``model`` in its closure and returns it, when given)."""
    rdd = sc.parallelize(range(threads), threads)
    stop = time.monotonic() + seconds
    counts = [0] * threads

    def loop(i: int) -> None:
        if model is None:
            f = lambda it, i=i: [i]  # noqa: E731 - the same tiny closure the engine would ship
        else:
            f = lambda it, m=model: [m]  # noqa: E731
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


class NullTransport(Transport):
    """Finishes every task at once, in this thread: what is left is the engine's own cost."""

    def __init__(self) -> None:
        super().__init__()
        self.publisher = InlinePublisher()

    def start(self, num_blocks, slots, run_name, *, task_fn=None) -> None:
        self.task_fn = task_fn

    def submit(self, ticket, call) -> None:
        report = TaskReport(ticket.task_id, call.model_ref.value, 1e-5, 0.0, "null", 0)
        self.outcomes.put(Outcome(ticket, TaskStatus.OK, report, 1e-4))

    def cancel(self, ticket) -> None:
        return None

    def close(self, timeout: float = 30.0) -> None:
        return None


def run_transport(
    make_transport, blocks: int, seconds: float, models: list, timed=None, counts=None
) -> tuple[float, float]:
    """(results/s, driver CPU microseconds per result) through the engine, fully asynchronous, a
    new model version published after every result; the transport's start and the first 2 P
    results (Python workers warming up) are not timed. ``counts`` (a dict) gets the timed
    stretch's change in the transport's counters (tickets, socket writes) and the seconds the
    engine's ``close`` took (``close_seconds``: telling the workers to leave, the job's end)."""
    n = 0
    transport = make_transport()
    with AsyncEngine(
        transport,
        vector_task,
        num_blocks=blocks,
        policy=Policy.asynchronous(),
        initial_model=models[0],
        run_name="overhead",
        keep_trajectory=False,
    ) as eng:
        warm = 2 * blocks
        for i, _ in enumerate(eng.results()):
            eng.publish(models[i % len(models)])
            if i + 1 == warm:
                if timed is not None:
                    timed(True)
                start, cpu = time.monotonic(), time.process_time()
                before = dict(transport.counters())
            elif i >= warm:
                n += 1
                if time.monotonic() - start >= seconds:
                    break
        elapsed, cpu = time.monotonic() - start, time.process_time() - cpu
        if timed is not None:
            timed(False)
        if counts is not None:
            after = transport.counters()
            counts.update({k: after[k] - before.get(k, 0) for k in after})
            closing = time.monotonic()
            eng.close()
            counts["close_seconds"] = time.monotonic() - closing
    return n / elapsed, cpu / n * 1e6


def compare_transports(
    spark, dims: list[int], blocks: int, seconds: float, repeats: int
) -> dict[int, dict[str, list[float]]]:
    """Bare runJob, job transport and resident transport at each dimension, in alternating runs."""
    sc = spark.sparkContext
    out: dict[int, dict[str, list[float]]] = {}
    for dim in dims:
        rng = np.random.default_rng(dim)
        models = [rng.standard_normal(dim) for _ in range(8)]  # every version changes every entry
        runs: dict[str, list[float]] = {k: [] for k in ("bare", "jobs", "resident", "tcp")}
        cpu: dict[str, list[float]] = {"jobs": [], "resident": [], "tcp": [], "engine": []}
        for _ in range(repeats):
            runs["bare"].append(bare_throughput(sc, blocks, seconds, models[0]))
            rate, us = run_transport(lambda: SparkTransport(sc), blocks, seconds, models)
            runs["jobs"].append(rate)
            cpu["jobs"].append(us)
            rate, us = run_transport(lambda: ResidentTransport(spark), blocks, seconds, models)
            runs["resident"].append(rate)
            cpu["resident"].append(us)
            # as on a cluster, where the executors are on other machines: TCP only
            tcp = lambda: ResidentTransport(spark, local_socket=False)  # noqa: E731
            rate, us = run_transport(tcp, blocks, seconds, models)
            runs["tcp"].append(rate)
            cpu["tcp"].append(us)
        _, us = run_transport(NullTransport, blocks, min(seconds, 2.0), models)
        cpu["engine"].append(us)
        out[dim] = {**runs, **{f"cpu_{k}": v for k, v in cpu.items()}}
    return out


def _print_transports(table: dict[int, dict[str, list[float]]], master: str, blocks: int) -> dict:
    print(
        f"transports, {master}, {blocks} blocks, a no-op task returning a d-vector, a new dense "
        "version after every result:"
    )
    ratios = {}
    for dim, t in table.items():
        med = {k: statistics.median(v) for k, v in t.items()}
        pairs = [r / j for r, j in zip(t["resident"], t["jobs"], strict=True)]
        ratios[dim] = statistics.median(pairs)
        print(f"  d={dim}:")
        for name, label in (
            ("bare", "bare sc.runJob (model in and out)"),
            ("jobs", "job transport (broadcast)"),
            ("resident", "resident transport"),
            ("tcp", "resident transport, TCP only"),
        ):
            runs = ", ".join(f"{x:.1f}" for x in t[name])
            print(f"    {label:36s} {med[name]:9.1f} results/s (runs: {runs})")
        print(
            f"    driver CPU per result: resident {med['cpu_resident']:.0f} us (TCP only "
            f"{med['cpu_tcp']:.0f} us), job transport {med['cpu_jobs']:.0f} us, engine alone "
            f"(null transport) {med['cpu_engine']:.0f} us"
        )
        print(
            f"    resident / job transport {ratios[dim]:.1f}x (pairs: "
            f"{', '.join(f'{r:.1f}' for r in pairs)}); resident / bare runJob "
            f"{med['resident'] / med['bare']:.1f}x"
        )
    return ratios


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


def connect_resident(args, table: dict[int, dict[str, list[float]]], seconds, repeats) -> float:
    """The resident transport's results/s from a Spark Connect session of ``args.master``, beside
    the classic session's (``table``); the ratio of the medians at d = 100 (nan if no client)."""
    try:
        import grpc  # noqa: F401 - the Connect client packages (.[connect])
    except ImportError:
        print("Spark Connect: skipped (no client packages: pip install '.[connect]')")
        return float("nan")
    from async_spark.engine.connect import LocalConnectServer, remote_session

    print(f"resident transport from a Spark Connect session ({args.master} server, this client):")
    with LocalConnectServer(args.master, max_seconds=900) as url:
        connect = remote_session(url, app_name="engine-overhead-connect")
        try:
            one = [np.zeros(1)]
            run_transport(lambda: ResidentTransport(connect), args.threads, 0.5, one)  # warm-up
            medians = {}
            for dim in table:
                rng = np.random.default_rng(dim)
                models = [rng.standard_normal(dim) for _ in range(8)]
                runs = [
                    run_transport(lambda: ResidentTransport(connect), args.threads, seconds, models)
                    for _ in range(repeats)
                ]
                rates = [r for r, _ in runs]
                medians[dim] = statistics.median(rates)
                classic = statistics.median(table[dim]["resident"])
                print(
                    f"  d={dim}: Connect {medians[dim]:9.1f} results/s (runs: "
                    f"{', '.join(f'{x:.1f}' for x in rates)}), classic {classic:9.1f} results/s, "
                    f"Connect / classic {medians[dim] / classic:.2f}x; driver CPU per result "
                    f"{statistics.median(u for _, u in runs):.0f} us"
                )
        finally:
            connect.stop()
    return medians[100] / statistics.median(table[100]["resident"])


def resident_runs(
    spark, blocks: int, seconds: float, repeats: int, dim: int = 100
) -> tuple[list, list[tuple[float, float]]]:
    """The no-op resident run at ``dim`` ``repeats`` times after a warm-up run: the models it
    publishes and each run's (results/s, driver CPU microseconds per result)."""
    models = [np.random.default_rng(dim).standard_normal(dim) for _ in range(8)]
    run_transport(lambda: ResidentTransport(spark), blocks, seconds, models)  # warm
    runs = []
    for _ in range(repeats):
        counts: dict[str, int] = {}
        runs.append(
            run_transport(lambda: ResidentTransport(spark), blocks, seconds, models, None, counts)
        )
        if counts.get("ticket_writes"):
            print(
                f"  tickets per socket write: {counts['tickets'] / counts['ticket_writes']:.2f}; "
                f"the engine's close took {counts['close_seconds']:.3f} s"
            )
    return models, runs


def profile_driver(
    spark, blocks: int, seconds: float, dim: int = 100, top: int = 25, repeats: int = 1
) -> None:
    """Where the resident transport's driver CPU goes: a cProfile of the engine's thread (which
    also reads the workers' sockets; the transport's accept and heartbeat threads wake only for
    connections and heartbeats) during the no-op run at ``dim``, after a warm-up run. The
    profiler inflates every call; read the shares, not the absolute times (the unprofiled
    figure is the table's)."""
    import cProfile
    import pstats

    models, runs = resident_runs(spark, blocks, seconds, repeats, dim)
    for rate, us in runs:
        print(f"unprofiled: {rate:.0f} results/s, driver CPU {us:.0f} us per result (d={dim})")
    if repeats > 1:
        print(
            f"unprofiled median of {repeats} runs ({blocks} blocks): driver CPU "
            f"{statistics.median(us for _, us in runs):.0f} us per result"
        )
    profile = cProfile.Profile()

    def timed(begin: bool) -> None:  # profile the timed results only, not start and close
        if begin:
            profile.enable()
        else:
            profile.disable()

    rate, us = run_transport(lambda: ResidentTransport(spark), blocks, seconds, models, timed)
    n = rate * seconds
    print(f"profiled: {rate:.0f} results/s, driver CPU {us:.0f} us per result")
    raw = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    rows = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)  # by own time
    total = sum(v[2] for _, v in rows)
    print(f"own CPU per result by function (top {top}; all functions: {total / n * 1e6:.0f} us):")
    for (path, line, name), (_, ncalls, own, _, _) in rows[:top]:
        where = f"{os.path.basename(path)}:{line}" if line else "builtin"
        print(f"  {own / n * 1e6:7.1f} us  {ncalls / n:6.2f} calls  {name[:40]:40s} {where}")


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short run (CI-sized)")
    ap.add_argument("--smoke", action="store_true", help="seconds: each measurement once, briefly")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--threads", type=int, default=4, help="driver threads = blocks in flight")
    ap.add_argument("--dim", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=None, help="alternating measurement pairs")
    ap.add_argument("--core-only", action="store_true", help="only the bookkeeping scaling")
    ap.add_argument(
        "--profile-driver",
        action="store_true",
        help="only a profile of the resident transport's driver CPU per result at d = 100",
    )
    ap.add_argument(
        "--no-connect", action="store_true", help="skip the Spark Connect session's row"
    )
    ap.add_argument(
        "--pin-driver",
        action="store_true",
        help="(Linux, 2+ cores) the driver's thread on core 0, the JVM and its Python workers on "
        "core 1, as a driver with a machine of its own",
    )
    args = ap.parse_args(argv)
    if args.core_only:
        _print_core_scaling(5_000 if args.quick else 20_000)
        return float("nan")
    if hasattr(socket, "AF_UNIX") and not args.profile_driver:
        _print_socket_round_trips(2_000 if args.smoke else 20_000, 1 if args.smoke else 3)
    seconds = 0.4 if args.smoke else 2.0 if args.quick else 3.0
    repeats = args.repeats or (1 if args.smoke else 3)
    scale = 0.1 if args.smoke else 0.25 if args.quick else 1.0  # of the no-Spark loops

    if args.pin_driver:  # the JVM starts from this thread: it and its workers inherit core 1
        os.sched_setaffinity(0, {1})
    spark = build_session(
        args.master, app_name="engine-overhead", conf={"spark.ui.enabled": "false"}
    )
    if args.pin_driver:
        os.sched_setaffinity(0, {0})  # this thread only; the engine's loop runs in it
        print("driver thread pinned to core 0; the JVM and its Python workers to core 1")
    sc = spark.sparkContext
    if args.profile_driver:
        try:
            profile_driver(spark, args.threads, seconds, repeats=args.repeats or 1)
        finally:
            spark.stop()
        return float("nan")
    try:
        # warm up the JVM, the Python workers and the code paths (the resident job's first
        # launch also starts its Python workers)
        warm = 0.3 if args.smoke else 2.0
        bare_throughput(sc, args.threads, warm)
        engine_throughput(sc, args.threads, warm, "inline", np.zeros(1), noop_task)
        run_transport(lambda: ResidentTransport(spark), args.threads, warm, [np.zeros(1)])

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

        costs = driver_costs(args.dim, 16, int(20_000 * scale))
        bc_ms = broadcast_create_ms(sc, args.dim, 3 if args.smoke else 10 if args.quick else 30)
        print("driver cost per accepted result (no Spark, P=16, barrier:0.5+tau:8):")
        print(f"  bookkeeping + policy     {costs['bookkeeping_policy_ms']:.4f} ms")
        print(f"  history store publish    {costs['publish_store_ms']:.4f} ms (d={args.dim})")
        print(
            f"  creating a broadcast     {bc_ms:.3f} ms (d={args.dim}, when a task first needs it)"
        )
        _print_core_scaling(int(20_000 * scale))

        dim = args.dim
        alt = {}
        w = np.random.default_rng(2).standard_normal(dim)
        k = max(1, dim // 100)
        delta = (np.arange(k, dtype=np.int64) * 100, np.ones(k))
        if not args.smoke:  # the job transport's publishing options (the resident one: below)
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

        table = compare_transports(spark, [100, 100_000], args.threads, seconds, repeats)
        transport_ratios = _print_transports(table, args.master, args.threads)
    finally:
        spark.stop()
    connect_ratio = float("nan")
    if not args.no_connect:
        connect_ratio = connect_resident(args, table, seconds, repeats)
    ratio = statistics.median(pair_ratios)
    print(f"  per-pair ratios engine/bare: {', '.join(f'{r:.3f}' for r in pair_ratios)}")
    print(f"RESULT engine_throughput_ratio {ratio:.3f}")
    print(f"RESULT resident_vs_jobs_throughput_d100 {transport_ratios[100]:.1f}")
    print(f"RESULT resident_vs_jobs_throughput_d1e5 {transport_ratios[100_000]:.1f}")
    print(f"RESULT connect_vs_classic_resident_throughput_d100 {connect_ratio:.2f}")
    return ratio


if __name__ == "__main__":
    main(sys.argv[1:])

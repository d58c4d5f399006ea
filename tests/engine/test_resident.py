"""The resident transport: wire format, handshake, and the engine on real Spark (the shared
local[4,2] session, and a local-cluster[2,1,1024] with two executor processes in its own process).

Run as a script (``python test_resident.py MASTER``) this file is the cluster test's driver.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from async_spark.engine import AsyncEngine, LocalTransport, Policy, StragglerModel, wire
from async_spark.engine.resident import ResidentTransport
from async_spark.engine.resident_conn import (
    LocalServer,
    configured_local_socket,
    stop_listening,
    sweep_orphans,
)
from async_spark.engine.resident_job import ResidentJob
from async_spark.engine.resident_worker import (
    WorkerConfig,
    _dial_local,
    _Worker,
    apply_delta,
    model_delta,
)

# --- task functions (they travel to the Python workers by value) ----------------------------------
D = 64


def block_coefficients(block):
    rng = np.random.default_rng(1000 + block)
    return rng.standard_normal(D), rng.standard_normal(D)


def affine_task(block, model, args):
    """Elementwise only (no reductions, no BLAS): bit-identical on any process."""
    a, c = block_coefficients(block)
    return a * model + c


def echo_task(block, model, args):
    return (model, args)


def sleepy_task(block, model, args):
    time.sleep(0.002)
    return block


def sleepy_engine(transport, policy=None, model=None, **options):
    """Four blocks of a 2 ms no-op task, fully asynchronous unless told."""
    return AsyncEngine(
        transport,
        sleepy_task,
        num_blocks=4,
        policy=policy or Policy.asynchronous(),
        initial_model=model,
        **options,
    )


def sum_of_blocks_run(transport, rounds=8, P=4, sockets=None):
    """A synchronous run: each round, w <- 0.5 w + mean over blocks of (a_b * w + c_b).
    ``sockets`` (a set) gets the socket kinds of the workers connected at the first result."""
    w = np.linspace(-1.0, 1.0, D)
    executors, payloads = set(), {}
    with AsyncEngine(
        transport, affine_task, num_blocks=P, policy=Policy.sync(), initial_model=w, run_name="sum"
    ) as eng:
        for r in eng.results():
            if sockets is not None and not sockets:
                sockets.update(worker["socket"] for worker in transport.workers())
            payloads[r.block] = r.payload
            executors.add(r.executor)
            if len(payloads) == P:
                total = np.zeros(D)
                for b in range(P):  # in block order: the same additions on every transport
                    total = total + payloads[b]
                w = 0.5 * w + total / P
                payloads = {}
                eng.publish(w)
                if eng.version == rounds:
                    break
        assert eng.core.accounting_closes()
    return w, executors


# =================================================================================================
# wire.py
# =================================================================================================
class Args(NamedTuple):
    block_task: int
    old_scalars: np.ndarray | None


def roundtrip(payload, kind="x", fields=None):
    a, b = socket.socketpair()
    try:
        parts = wire.encode_frame(kind, fields or {"n": 1}, payload)
        t = threading.Thread(target=wire.send_frame, args=(a, parts))
        t.start()
        frame = wire.read_frame(b.makefile("rb"))
        t.join()
    finally:
        a.close()
        b.close()
    assert frame.kind == kind and frame.fields == (fields or {"n": 1})
    return frame.payload


def same(x, y):
    """Equal in type and bits, recursively."""
    if isinstance(x, np.ndarray):
        return (
            isinstance(y, np.ndarray)
            and x.shape == y.shape
            and x.dtype.name == y.dtype.name
            and np.ascontiguousarray(x).tobytes() == y.tobytes()
        )
    if isinstance(x, tuple | list):
        return (type(x) is type(y) or (hasattr(x, "_fields") and y._fields == x._fields)) and all(
            same(a, b) for a, b in zip(x, y, strict=True)
        )
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    if isinstance(x, float):
        return isinstance(y, float) and struct.pack("<d", x) == struct.pack("<d", y)
    return type(x) is type(y) and x == y


@pytest.mark.parametrize("dtype", list(wire.DTYPES))
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 4), (2, 0, 3), (1, 2, 3, 2)])
def test_wire_round_trips_every_dtype_and_shape(dtype, shape):
    rng = np.random.default_rng(0)
    arr = np.asarray(rng.standard_normal(shape) * 100).astype(dtype)
    back = roundtrip(arr)
    assert same(arr, back)
    assert back.flags.writeable  # arrays arrive writable (a view of the received body)


def test_wire_round_trips_nesting_scalars_and_layouts():
    x = np.arange(12.0).reshape(3, 4)
    special = np.array([np.nan, -0.0, np.inf, -np.inf, 5e-324])
    payload = (
        None,
        True,
        False,
        -(2**62),
        3.25,
        float("nan"),
        -0.0,
        "naïve ✓",
        [x, x.T, x[:, ::2]],  # Fortran order and strided views travel as C-order copies
        {"w": x.astype(">f8"), "nested": ((np.int32(4), np.float32(0.5), np.bool_(True)),)},
        Args(3, np.arange(3, dtype=np.int64)),
        Args(0, None),
        special,
        [],
        (),
        {},
    )
    back = roundtrip(payload)
    assert same(payload[:8], back[:8])
    assert same([x, np.ascontiguousarray(x.T), np.ascontiguousarray(x[:, ::2])], back[8])
    assert back[9]["w"].dtype == np.dtype("<f8") and np.array_equal(back[9]["w"], x)
    assert back[9]["nested"] == ((4, 0.5, True),)
    assert type(back[9]["nested"][0][0]) is int and type(back[9]["nested"][0][2]) is bool
    nt = back[10]
    assert nt.block_task == 3 and nt.old_scalars.tolist() == [0, 1, 2] and tuple(nt)[0] == 3
    assert back[11] == (0, None) and back[11].old_scalars is None
    assert special.tobytes() == back[12].tobytes()
    assert back[13:] == ([], (), {})


def test_wire_nesting_depth_bound():
    deep = 1.0
    for _ in range(wire.MAX_DEPTH):
        deep = (deep,)
    assert roundtrip(deep) == deep
    with pytest.raises(wire.UnsupportedValue, match="deeper"):
        wire.encode_frame("x", {}, (deep,))


@pytest.mark.parametrize(
    "value, match",
    [
        (np.array([1 + 2j]), "complex128"),
        (np.array(["a"]), "<U1"),
        (np.array([object()]), "object"),
        ({1: 2}, "keys must be str"),
        ({1, 2}, "cannot send a set"),
        (b"bytes", "cannot send a bytes"),
        (np.zeros(2, dtype=np.float16), "float16"),
    ],
)
def test_wire_refuses_values_that_cannot_travel(value, match):
    with pytest.raises(wire.UnsupportedValue, match=match):
        wire.encode_frame("x", {}, value)


def frame_bytes(header: dict, body: bytes = b"", magic=wire.MAGIC, head_len=None, body_len=None):
    head = json.dumps(header).encode()
    prefix = wire.PREFIX.pack(
        magic,
        len(head) if head_len is None else head_len,
        len(body) if body_len is None else body_len,
    )
    return prefix + head + body


BAD_FRAMES = [
    (frame_bytes({"k": "x"}, magic=b"HTTP"), wire.BadMagic, "bad magic"),
    (frame_bytes({"k": "x"}, head_len=wire.MAX_HEADER_BYTES + 1), wire.FrameTooLarge, "header"),
    (frame_bytes({"k": "x"}, body_len=1 << 40), wire.FrameTooLarge, "body of 1099511627776"),
    (frame_bytes({"k": "x", "a": [["complex128", [1]]]}, b"\0" * 16), wire.BadDtype, "complex"),
    (frame_bytes({"k": "x", "a": [["object", [1]]]}, b"\0" * 8), wire.BadDtype, "unknown"),
    (frame_bytes({"k": "x", "a": [["float64", [3]]]}, b"\0" * 16), wire.BadShape, "needs 24"),
    (frame_bytes({"k": "x", "a": [["float64", [1]]]}, b"\0" * 16), wire.BadShape, "take 8"),
    (frame_bytes({"k": "x", "a": [["float64", [-1]]]}, b"\0" * 8), wire.BadShape, "bad shape"),
    (frame_bytes({"k": "x", "a": [["float64", [True]]]}, b"\0" * 8), wire.BadShape, "shape"),
    (
        frame_bytes({"k": "x", "a": [["float64", [1]]]}, b"\0" * 8)[:-3],
        wire.TruncatedFrame,
        "body",
    ),
    (frame_bytes({"k": "x"})[:-2], wire.TruncatedFrame, "header ended"),
    (frame_bytes({"k": "x"})[:7], wire.TruncatedFrame, "prefix ended after 7"),
    (wire.PREFIX.pack(wire.MAGIC, 3, 0) + b"{x}", wire.BadHeader, "not valid JSON"),
    (wire.PREFIX.pack(wire.MAGIC, 2, 0) + b"\xff\xfe", wire.BadHeader, "not valid JSON"),
    (frame_bytes([1, 2]), wire.BadHeader, "JSON object"),
    (frame_bytes({"k": "x", "p": {"a": 0}}), wire.BadHeader, "out of range"),
    (frame_bytes({"k": "x", "p": {"zz": 1}}), wire.BadHeader, "unknown payload node"),
    (
        frame_bytes({"k": "x", "p": {"n": "T", "f": ["__class__"], "v": [1]}}),
        wire.BadHeader,
        "named",
    ),
    (frame_bytes({"k": "x", "p": {"n": "a b", "f": ["x"], "v": [1]}}), wire.BadHeader, "named"),
    (frame_bytes({"k": "x", "p": {"n": "T", "f": ["if"], "v": [1]}}), wire.BadHeader, "named"),
    (
        frame_bytes({"k": "x", "p": {"n": "T", "f": ["x"], "v": [1, 2]}}),
        wire.BadHeader,
        "match",
    ),
    (
        frame_bytes({"k": "x", "p": json.loads('{"t": [' * 40 + "1" + "]}" * 40)}),
        wire.BadHeader,
        "deeper",
    ),
    (
        wire.PREFIX.pack(wire.MAGIC, 20_001, 0) + b"[" * 20_000 + b"1",
        wire.BadHeader,
        "not valid JSON",
    ),
    # exactly one JSON value, as the encoder writes it: nothing before it, nothing after it
    (wire.PREFIX.pack(wire.MAGIC, 12, 0) + b'{"k":"x"}{}x', wire.BadHeader, "extra data"),
    (wire.PREFIX.pack(wire.MAGIC, 10, 0) + b' {"k":"x"}', wire.BadHeader, "not valid JSON"),
    (wire.PREFIX.pack(wire.MAGIC, 0, 0), wire.BadHeader, "not valid JSON"),
]


@pytest.mark.parametrize(
    "header",
    [
        {"k": "ticket", "f": {"id": 7, "b": 0, "v": 3, "m": "full"}, "a": [["float64", [100]]]},
        {"k": 'é\u2028\n"', "f": {"x": [0.1, -2, None, True, False, 1e300, 5e-324, -0.0]}},
        {"k": "x", "f": {"nan": float("nan"), "inf": [float("inf"), float("-inf")]}},
        {"k": "x", "p": {"t": [{"a": 0}, None, {"d": {"": 2**70}}]}},
    ],
)
def test_header_encoding_is_the_json_modules(header):
    """The C encoder made once writes byte for byte what ``json`` writes, and reads back."""
    head = wire._dumps(header)
    assert head == json.dumps(header, separators=(",", ":")).encode()
    assert json.dumps(wire._loads(head)) == json.dumps(header)


@pytest.mark.parametrize("raw, error, match", BAD_FRAMES)
def test_wire_refuses_bad_frames(raw, error, match):
    with pytest.raises(error, match=match):
        wire.read_frame(io.BytesIO(raw))


def read_all(raw: bytes, chunk: int) -> list:
    """Frames read from ``raw`` by a FrameReader over a socket, ``chunk`` bytes per recv."""
    a, b = socket.socketpair()
    try:
        a.sendall(raw)
        a.shutdown(socket.SHUT_WR)
        reader = wire.FrameReader(chunk=chunk)
        frames = []
        while True:
            try:
                frames += reader.read(b)
            except wire.ConnectionClosed:
                return frames
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("chunk", [1, 7, 1 << 16])
def test_frame_reader_splits_and_joins_frames_across_reads(chunk):
    payloads = [np.arange(1000.0), None, (Args(1, np.zeros(3, np.int32)), "s"), np.zeros(0)]
    raw = b"".join(b"".join(wire.encode_frame("x", {"i": i}, p)) for i, p in enumerate(payloads))
    frames = read_all(raw, chunk)
    assert [f.fields["i"] for f in frames] == [0, 1, 2, 3]
    assert all(same(p, f.payload) for p, f in zip(payloads, frames, strict=True))


@pytest.mark.parametrize("raw, error, match", BAD_FRAMES)
def test_frame_reader_refuses_bad_frames(raw, error, match):
    with pytest.raises(error, match=match):
        read_all(raw, 1 << 16)


def test_wire_clean_end_of_stream_and_limit():
    with pytest.raises(wire.ConnectionClosed):
        wire.read_frame(io.BytesIO(b""))
    raw = b"".join(wire.encode_frame("x", {}, np.zeros(100)))
    with pytest.raises(wire.FrameTooLarge):
        wire.read_frame(io.BytesIO(raw), max_body_bytes=799)
    assert wire.read_frame(io.BytesIO(raw), max_body_bytes=800).payload.shape == (100,)


def _handshake_pair(server_secret, client_secret):
    a, b = socket.socketpair()
    errors = {}

    def side(name, handshake, sock, secret):
        try:
            handshake(sock, secret, timeout=5)
        except Exception as exc:  # noqa: BLE001
            errors[name] = exc
        finally:
            sock.close()

    t = threading.Thread(target=side, args=("server", wire.server_handshake, a, server_secret))
    t.start()
    side("client", wire.client_handshake, b, client_secret)
    t.join()
    return errors


def _serve_handshakes(server, secret, done):
    """Accept on ``server`` and answer handshakes with ``secret`` until ``done`` is set; the
    accepted sockets are kept open (in the returned list) so the client's end stays usable."""
    accepted = []

    def loop():
        server.settimeout(0.2)
        while not done.is_set():
            try:
                sock, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            try:
                wire.server_handshake(sock, secret, timeout=5)
            except (wire.WireError, OSError):
                pass
            accepted.append(sock)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread, accepted


@pytest.mark.parametrize("where", ["visible", "missing", "other secret", "none"])
def test_a_worker_dials_the_local_socket_when_it_sees_it_else_tcp(where, caplog):
    """A task on the driver's machine sees the local socket's path and connects there; a task
    that does not (another machine, container or user), or whose handshake there fails, dials
    TCP, so a wrong or stale path never strands a worker."""
    secret = b"s" * 32
    done = threading.Event()
    tcp = socket.create_server(("127.0.0.1", 0))
    local = LocalServer.open(backlog=8)
    assert local is not None and oct(os.stat(os.path.dirname(local.path)).st_mode)[-3:] == "700"
    other = LocalServer.open(backlog=8)
    threads = [
        _serve_handshakes(tcp, secret, done),
        _serve_handshakes(local.server, secret, done),
        _serve_handshakes(other.server, b"o" * 32, done),
    ]
    path = {
        "visible": local.path,
        "missing": local.path + ".gone",
        "other secret": other.path,
        "none": None,
    }[where]
    cfg = WorkerConfig(
        host="127.0.0.1",
        port=tcp.getsockname()[1],
        secret=secret,
        run_id="r",
        num_blocks=1,
        num_tasks=1,
        task_fn=echo_task,
        heartbeat_seconds=1.0,
        silence_seconds=5.0,
        connect_seconds=5.0,
        reconnect_seconds=5.0,
        max_body_bytes=1 << 20,
        max_versions=2,
        local_path=path,
    )
    try:
        sock = _Worker(cfg, [0], 0, 0)._connect()
        assert sock is not None
        expected = socket.AF_UNIX if where == "visible" else socket.AF_INET
        assert sock.family == expected
        if expected == socket.AF_UNIX:  # large buffers: a large model in few hand-offs
            cap = Path("/proc/sys/net/core/wmem_max")
            wanted = min(wire.LOCAL_BUFFER_BYTES, int(cap.read_text()) if cap.exists() else 0)
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) >= wanted
        else:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        sock.close()
        if where == "other secret":
            assert "handshake with the driver failed" in caplog.text
    finally:
        done.set()
        for thread, accepted in threads:
            thread.join(5)
            for a in accepted:
                a.close()
        tcp.close()
        for server in (local, other):
            server.close()
            assert not os.path.exists(os.path.dirname(server.path))


def test_a_killed_drivers_socket_directory_is_swept_by_the_next_one(tmp_path):
    """A driver killed outright leaves its local socket's directory; the next LocalServer.open
    removes it (its pid is gone), and keeps those of running drivers and anything else."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    prefix = LocalServer.PREFIX
    orphan = tmp_path / f"{prefix}{gone.pid}-abc"
    alive = tmp_path / f"{prefix}{os.getppid()}-def"  # pytest's parent: running
    other = tmp_path / f"{prefix}x-ghi"
    for d in (orphan, alive, other):
        d.mkdir()
        (d / LocalServer.FILE).write_text("")
    assert sweep_orphans(prefix, str(tmp_path)) == 1
    assert not orphan.exists() and alive.exists() and other.exists()
    server = LocalServer.open(backlog=1)  # in the real temporary directory: named for its pid
    assert server is not None
    assert os.path.basename(os.path.dirname(server.path)).startswith(f"{prefix}{os.getpid()}-")
    server.close()


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_stop_listening_wakes_a_thread_blocked_in_accept(family, tmp_path):
    """The transport's accept threads wait in ``accept`` with a timeout; closing their listener
    must end them at once, not at the timeout (a plain ``close`` leaves ``accept`` blocked on
    Linux: the end of every run waited for it). Here the timeout is 30 s and the thread must be
    gone within 5."""
    if family == "tcp":
        server = socket.create_server(("127.0.0.1", 0))
    else:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(tmp_path / "s"))
        server.listen()
    server.settimeout(30.0)
    ended = []

    def accept() -> None:
        try:
            server.accept()
        except OSError as exc:
            ended.append(type(exc).__name__)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    time.sleep(0.2)  # blocked in accept
    stop_listening(server)
    thread.join(5.0)
    assert not thread.is_alive() and ended, ended
    assert server.fileno() == -1  # closed


def test_the_local_socket_conf(monkeypatch):
    monkeypatch.delenv("SPARK_ASYNC_SPARK_RESIDENT_LOCALSOCKET", raising=False)
    assert configured_local_socket(None) is True
    for value, expected in [("false", False), (" True ", True), ("", True)]:
        monkeypatch.setenv("SPARK_ASYNC_SPARK_RESIDENT_LOCALSOCKET", value)
        assert configured_local_socket(None) is expected
    monkeypatch.setenv("SPARK_ASYNC_SPARK_RESIDENT_LOCALSOCKET", "maybe")
    with pytest.raises(ValueError, match="localSocket must be true or false, got 'maybe'"):
        configured_local_socket(None)


def test_handshake_proves_the_secret_both_ways():
    assert _handshake_pair(b"s" * 32, b"s" * 32) == {}
    errors = _handshake_pair(b"s" * 32, b"t" * 32)
    assert isinstance(errors["server"], wire.AuthenticationFailed)
    assert isinstance(errors["client"], wire.AuthenticationFailed)


@pytest.mark.parametrize("dtype", list(wire.DTYPES))
def test_delta_is_bit_exact_and_chosen_by_size(dtype):
    rng = np.random.default_rng(3)
    if dtype.startswith("float"):
        base = rng.standard_normal(1000).astype(dtype)
    else:
        base = rng.integers(0, 100, 1000).astype(dtype)
    new = base.copy()
    changed = [3, 500, 999]
    new[changed] = ~new[changed] if dtype == "bool" else new[changed] + 1
    if dtype.startswith("float"):
        # compared as bits: 0.0 -> -0.0 is a change, the same nan is not
        base[10], new[10] = 0.0, -0.0
        base[12] = new[12] = np.nan
        changed = [3, 10, 500, 999]
    delta = model_delta(base, new)
    assert delta is not None and delta[0].tolist() == changed
    out = apply_delta(base, *delta)
    assert out.tobytes() == new.tobytes()
    assert model_delta(base, base.copy())[0].size == 0
    dense = np.roll(base, 1) if dtype != "bool" else ~base
    assert model_delta(base, dense) is None  # most entries changed: the full array is smaller


# =================================================================================================
# on Spark: the shared local[4,2] session
# =================================================================================================
spark_only = pytest.mark.spark


def _register_by_value():
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


@spark_only
@pytest.mark.parametrize("local_socket", [True, False])
def test_sync_run_is_bit_identical_to_local_and_versions_travel_once(spark, local_socket):
    """Over the local socket (the default in local mode) and over TCP alike; the local socket's
    private directory is gone once the run is."""
    _register_by_value()
    local_w, _ = sum_of_blocks_run(LocalTransport())
    transport = ResidentTransport(spark, local_socket=local_socket)
    sockets: set = set()
    resident_w, executors = sum_of_blocks_run(transport, sockets=sockets)
    assert sockets == {"local" if local_socket else "tcp"}
    assert (transport._local is not None) == local_socket
    if local_socket:
        assert not os.path.exists(os.path.dirname(transport._local.path))
    assert resident_w.tobytes() == local_w.tobytes()
    assert transport.num_tasks == 4 and len(executors) == 1  # local mode: the driver's JVM
    # 8 rounds: each version reaches each of the 4 workers once (full or delta)
    assert transport.stats["tickets"] == 32
    assert transport.stats["model_full"] + transport.stats["model_delta"] == 32


@spark_only
def test_a_workers_tickets_of_one_dispatch_travel_in_one_write(spark):
    """6 blocks on 4 resident tasks (2, 2, 1, 1 blocks): each synchronous round's 6 tickets go
    out in 4 socket writes, and the model is bit-identical to the one-process run's."""
    _register_by_value()
    local_w, _ = sum_of_blocks_run(LocalTransport(), P=6)
    transport = ResidentTransport(spark)
    resident_w, _ = sum_of_blocks_run(transport, P=6)
    assert resident_w.tobytes() == local_w.tobytes()
    assert transport.num_tasks == 4
    assert transport.stats["tickets"] == 8 * 6
    assert transport.stats["ticket_writes"] == 8 * 4


@spark_only
def test_results_that_arrived_together_free_their_blocks_in_one_write_per_worker(spark):
    """4 blocks on 1 resident task, fully asynchronous, the update rule (30 ms) slower than the
    worker's 4 tasks (2 ms each, one after the other): while it handles one result, the others
    arrive. The engine takes every result already read before it dispatches, so the blocks they
    freed get their tickets in one write (about 2 writes per 4 tickets; one write per ticket
    when the engine dispatches after every result), each reading the version published after
    the last of them."""
    _register_by_value()
    transport = ResidentTransport(spark, num_tasks=1)
    staleness = []
    with sleepy_engine(transport, model=0.0) as eng:
        for n, r in enumerate(eng.results(), start=1):
            staleness.append(r.staleness)
            time.sleep(0.03)
            eng.publish(float(n))
            if n == 40:
                break
        assert eng.core.accounting_closes()
    stats = transport.stats
    assert stats["ticket_writes"] <= 0.75 * stats["tickets"], stats
    # the results of one batch read one version: their staleness is 0, 1, 2 in arrival order
    assert max(staleness) >= 2 and min(staleness) == 0


@spark_only
def test_async_run_echoes_every_version_exactly_through_deltas(spark):
    _register_by_value()
    transport = ResidentTransport(spark, max_versions=3)
    rng = np.random.default_rng(5)
    w = rng.standard_normal(2000)
    w[:3] = [np.nan, -0.0, np.inf]
    published = {0: w.copy()}
    mismatches = 0
    with AsyncEngine(
        transport,
        echo_task,
        num_blocks=6,
        policy=Policy.asynchronous(),
        initial_model=w.copy(),
        task_args=lambda t: Args(t.block_task, np.full(2, float(t.block))),
        validate_payload=lambda payload: True,  # the model holds nan and inf on purpose
    ) as eng:
        n = 0
        for r in eng.results():
            model, args = r.payload
            mismatches += model.tobytes() != published[r.version].tobytes()
            assert args.block_task >= 0 and args.old_scalars.tolist() == [r.block] * 2
            n += 1
            w = w.copy()
            w[rng.integers(2000, size=3)] = rng.standard_normal(3)  # a sparse change
            if n % 10 == 0:
                w = w + 1.0  # now and then a dense one
            published[eng.publish(w)] = w.copy()
            # the driver copies only what some worker holds: 3 versions for each of 4 workers
            assert transport.stats["copies_kept"] <= 3 * 4
            if n == 200:
                break
        assert eng.core.accounting_closes()
        assert transport.stats["copies_kept"] > 0
    assert mismatches == 0
    assert transport.stats["copies_kept"] == 0  # closing releases them
    assert transport.num_tasks == 4  # 6 blocks on 4 resident tasks (round-robin)
    assert transport.stats["model_delta"] > 50 and transport.stats["model_full"] >= 4
    assert transport.stats["model_held"] > 0  # two blocks of one worker read the same version


def _bad_clients(dial, secret):
    """Connect (``dial()``: a new socket to the server) as attackers and broken peers; return
    what each saw (closed by the server?)."""
    seen = {}

    def attempt(name, send_after_auth=None, secret_used=secret, raw=None):
        with dial() as s:
            try:
                if raw is not None:
                    s.sendall(raw)
                else:
                    wire.client_handshake(s, secret_used, timeout=10)
                    s.sendall(send_after_auth)
                    if name == "truncated":
                        s.shutdown(socket.SHUT_WR)
                s.settimeout(10)
                while s.recv(1 << 16):  # until the server closes it
                    pass
                seen[name] = True
            except wire.AuthenticationFailed:
                seen[name] = True  # the server closed it without proving the secret
            except ConnectionResetError:
                seen[name] = True

    attempt("wrong secret", secret_used=b"x" * 32)
    attempt("not our protocol", raw=b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\0" * 64)
    hello = frame_bytes({"k": "hello", "f": {}})
    attempt("truncated", send_after_auth=hello[:-5])
    attempt("huge", send_after_auth=wire.PREFIX.pack(wire.MAGIC, 10, 1 << 50))
    attempt(
        "dtype", send_after_auth=frame_bytes({"k": "hello", "a": [["complex64", [2]]]}, b"\0" * 16)
    )
    return seen


@spark_only
def test_bad_clients_are_refused_with_a_log_line_while_the_run_goes_on(spark, caplog):
    _register_by_value()
    caplog.set_level(logging.WARNING, logger="async_spark.engine.resident")
    transport = ResidentTransport(spark, heartbeat_seconds=0.3, silence_seconds=3.0)
    seen: dict = {}

    def attack():  # over TCP, then over the local socket
        tcp = _bad_clients(lambda: socket.create_connection(transport.address, 10), secret)
        seen.update({("tcp", name): saw for name, saw in tcp.items()})
        local = _bad_clients(lambda: _dial_local(transport._local.path, 10), secret)
        seen.update({("local", name): saw for name, saw in local.items()})

    with sleepy_engine(transport) as eng:
        secret = transport._secret
        attacker = None
        n = 0
        for _ in eng.results():
            n += 1
            if n == 20:
                attacker = threading.Thread(target=attack)
                attacker.start()
            if attacker is not None and not attacker.is_alive():
                break
        # a peer that authenticates, announces nothing and goes silent is dropped
        with socket.create_connection(transport.address, timeout=10) as s:
            wire.client_handshake(s, transport._secret)
            hello = {"run": transport.run_id, "blocks": [], "executor": "x", "pid": 1}
            wire.send_frame(s, wire.encode_frame("hello", hello))
            s.settimeout(10)
            while s.recv(1 << 16):  # heartbeats, then the close
                pass
        after = 0
        for _ in eng.results():
            after += 1
            if after == 50:
                break
        counts = dict(eng.core.counts)
        assert eng.core.accounting_closes()
    assert seen == {
        (via, name): True
        for via in ("tcp", "local")
        for name in ["wrong secret", "not our protocol", "truncated", "huge", "dtype"]
    }
    assert counts["failed"] == 0 and counts["accepted"] >= n + 50
    text = "\n".join(r.getMessage() for r in caplog.records)
    for needle in (
        "refused connection from 127.0.0.1",
        "refused connection from local socket",
        "closed connection from local socket",
        "authentication failed",
        "bad handshake magic",
        "truncated frame",
        "frame too large: body of 1125899906842624",
        "unknown dtype 'complex64'",
        "silent for",
    ):
        assert needle in text, (needle, text)


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# (before the killed-worker test: after it, the session's slots were seen in another state)
def _hold_one_slot(sc, seconds):
    """A job that holds one of the session's 4 slots for ``seconds``; returns once it runs."""
    group = f"hold-{time.monotonic_ns()}"

    def run():
        sc.setJobGroup(group, "holds a slot")
        sc.parallelize([0], 1).foreach(lambda _: time.sleep(seconds))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    tracker = sc.statusTracker()

    def running() -> bool:
        for job in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job)
            for stage in info.stageIds if info is not None else ():
                stage_info = tracker.getStageInfo(stage)
                if stage_info is not None and stage_info.numActiveTasks > 0:
                    return True
        return False

    deadline = time.monotonic() + 120  # in the full suite all 4 slots were once busy ~60 s
    while not running():
        assert time.monotonic() < deadline, "the slot-holding job did not start"
        time.sleep(0.05)
    return thread


@pytest.mark.parametrize(
    ("grace", "waited", "waiting"), [(0.3, (0.3, 0.9), 1), (None, (1.0, 2.5), 0)]
)
def test_start_waits_start_grace_after_the_first_worker_then_goes_on(grace, waited, waiting):
    # The wait rule alone (no job): block 0's worker connects after 0.1 s, block 1's never. With
    # a grace the run begins 0.3 s later with one block waiting; without, start waits until
    # connect_timeout (1 s) and goes on with the connected one, as before.
    transport = ResidentTransport(object(), connect_timeout=1.0, start_grace=grace)
    transport.num_blocks = 2

    def connect_block_0():
        time.sleep(0.1)
        with transport._lock:
            transport._owners[0] = object()
            transport._lock.notify_all()

    threading.Thread(target=connect_block_0, daemon=True).start()
    t0 = time.monotonic()
    transport._wait_connected()
    took = time.monotonic() - t0
    assert waited[0] <= took < waited[1], took
    assert transport.blocks_waiting_at_start == waiting


@spark_only
def test_closing_before_a_late_worker_connects_cancels_its_task_at_once(spark):
    _register_by_value()
    sum_of_blocks_run(ResidentTransport(spark))
    holder = _hold_one_slot(spark.sparkContext, 8.0)
    transport = ResidentTransport(spark)
    with sleepy_engine(transport) as eng:
        assert transport.blocks_waiting_at_start >= 1  # the held slot (others may be busy too)
        for i, _ in enumerate(eng.results()):
            eng.publish(None)
            if i == 20:
                break
        t0 = time.monotonic()
    closed = time.monotonic() - t0
    holder.join()
    # the 3 connected workers leave when told; the 4th task, still waiting for its slot, is
    # cancelled after 1 s rather than after the 10 s given to workers that can hear "exit"
    assert closed < 5.0, closed
    assert not transport._job.alive()


BIG = 4_000_000  # float64: 32 MB, more than any socket buffer holds


def big_result_task(block, model, args):
    return np.full(BIG, float(block))


@spark_only
def test_closing_while_workers_send_results_larger_than_a_socket_buffer_is_prompt(spark, caplog):
    """Workers blocked sending a big result read their exit only once the driver has taken it:
    close() reads the sockets while it waits, so they leave when told instead of being
    cancelled after 10 s."""
    _register_by_value()
    caplog.set_level(logging.INFO, logger="async_spark.engine.resident")
    transport = ResidentTransport(spark, start_grace=None)  # all 4 connected: all hear "exit"
    eng = AsyncEngine(
        transport,
        big_result_task,
        num_blocks=4,
        policy=Policy.asynchronous(),
        initial_model=np.zeros(4),
        keep_trajectory=False,
    )
    with eng:
        for i, r in enumerate(eng.results()):
            assert r.payload.shape == (BIG,) and r.payload[0] == r.block
            if i == 8:
                break
        t0 = time.monotonic()
    closed = time.monotonic() - t0
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "workers did not leave" not in text and "cancelling the job" not in text, text
    assert closed < 8.0, closed
    assert not transport._job.alive()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("start_grace", -1.0, r"start_grace \(or None\) must be a finite number >= 0"),
        ("start_grace", True, r"start_grace \(or None\) must be a finite number >= 0"),
        ("submit_wait", 0, "submit_wait must be a finite number > 0"),
        ("silence_seconds", float("inf"), "silence_seconds must be a finite number > 0"),
        ("heartbeat_seconds", 20.0, r"silence_seconds \(15.0\) must exceed heartbeat_seconds"),
        ("max_versions", 0, "max_versions must be an integer >= 1"),
        ("num_tasks", 2.5, "num_tasks must be an integer >= 1"),
        ("max_relaunches", -1, "max_relaunches must be an integer >= 0"),
    ],
)
def test_each_option_is_checked_and_named(option, value, message):
    with pytest.raises(ValueError, match=message):
        ResidentTransport(object(), connect_timeout=1.0, **{option: value})


@spark_only
def test_a_killed_worker_and_a_dropped_socket_fail_their_tickets_and_the_run_finishes(spark):
    _register_by_value()
    # start_grace=None: every worker connected before the first ticket (a late one, in a busy
    # suite, would miss the kill's phase); the grace has its own test above
    transport = ResidentTransport(spark, submit_wait=60.0, start_grace=None)
    blocks_after: dict[str, set] = {"kill": set(), "drop": set()}
    with sleepy_engine(transport, max_retries=10, backoff=0.2) as eng:
        n = drops = 0
        failed_by_drop = None
        phase = None
        for r in eng.results():
            n += 1
            if phase is not None:
                blocks_after[phase].add(r.block)
            if n == 30:
                (victim,) = [w for w in transport.workers() if w["blocks"] == [1]]
                os.kill(victim["pid"], signal.SIGKILL)
                phase = "kill"
            if phase == "kill" and len(blocks_after["kill"]) == 4 and r.block != 2:
                # block 2's ticket may have just come back (a 2 ms task): drop until one fails
                failed_by_drop = transport.disconnect(2)
                drops += failed_by_drop is not None  # None: it has not reconnected yet
                if failed_by_drop or drops == 50:
                    phase = "drop"
            if phase == "drop" and len(blocks_after["drop"]) == 4:
                break
            eng.publish(None)
        workers = transport.workers()
        counts = dict(eng.core.counts)
        assert eng.core.accounting_closes()
    seen = (counts, victim, workers, drops)
    assert failed_by_drop == 1, seen  # the dropped socket's ticket in flight
    assert counts["failed"] >= 2, seen  # ... and the killed worker's
    (block1,) = [w for w in workers if w["blocks"] == [1]]
    # Spark's retry of the killed task reconnected
    assert block1["pid"] != victim["pid"] and block1["attempt"] == 1, seen
    (block2,) = [w for w in workers if w["blocks"] == [2]]
    assert block2["attempt"] == 0, seen  # the same task reconnected after its socket was dropped
    assert not _pid_alive(victim["pid"])


def attempt_task(block, model, args):
    """The Spark task attempt running this resident worker (unique within the application)."""
    from pyspark import TaskContext

    time.sleep(0.002)
    return TaskContext.get().taskAttemptId()


@spark_only
def test_the_job_is_launched_again_when_it_fails_and_the_run_goes_on(spark):
    """local[4,2] retries a task once: killing block 1's worker twice fails the whole job (the
    other tasks are cancelled with it); the transport launches it again, and every block is then
    served by a task of the new job until the run ends."""
    _register_by_value()
    transport = ResidentTransport(spark, submit_wait=60.0, start_grace=None, max_relaunches=1)
    killed: list[int] = []
    first_job: set[int] = set()  # task attempts seen before the relaunch
    after: set[int] = set()  # blocks served by the new job's tasks
    with AsyncEngine(
        transport,
        attempt_task,
        num_blocks=4,
        policy=Policy.asynchronous(),
        initial_model=None,
        max_retries=20,
        backoff=0.2,
    ) as eng:
        for n, r in enumerate(eng.results()):
            if transport.launches < 2:
                first_job.add(r.payload)
            elif r.payload not in first_job:
                after.add(r.block)
                if len(after) == 4:
                    break
            owners = [w for w in transport.workers() if w["blocks"] == [1]]
            if n >= 20 and len(killed) < 2 and owners and owners[0]["pid"] not in killed:
                killed.append(owners[0]["pid"])
                os.kill(owners[0]["pid"], signal.SIGKILL)
            assert n < 20_000, (killed, transport.launches, transport.workers())
            eng.publish(None)
        assert eng.core.accounting_closes()
        assert eng.core.counts["failed"] >= 2
    assert len(killed) == 2 and transport.launches == 2, killed
    assert after == {0, 1, 2, 3}


@spark_only
def _announce(transport, blocks, launch, attempt=0, pid=1):
    """A raw peer that authenticates and announces ``blocks`` as a task of ``launch``."""
    s = socket.create_connection(transport.address, timeout=10)
    wire.client_handshake(s, transport._secret)
    hello = {"run": transport.run_id, "blocks": blocks, "executor": "x", "pid": pid}
    hello.update(launch=launch, attempt=attempt)
    wire.send_frame(s, wire.encode_frame("hello", hello))
    return s


def _frames_until_close(sock):
    """The kinds of the frames a peer receives until the driver closes its connection."""
    kinds = []
    stream = sock.makefile("rb")
    try:
        while True:
            kinds.append(wire.read_frame(stream).kind)
    except (wire.WireError, OSError):
        return kinds
    finally:
        stream.close()
        sock.close()


def test_a_superseded_task_and_a_task_of_an_earlier_launch_are_told_to_exit(spark, caplog):
    """Two tasks never take turns at one block: a task whose blocks another announces is told
    to exit (it would otherwise reconnect and take them back), and so is a task of an earlier
    launch of the job or an attempt Spark has retried, which take nothing."""
    _register_by_value()
    caplog.set_level(logging.WARNING, logger="async_spark.engine.resident")
    transport = ResidentTransport(spark, heartbeat_seconds=0.3, silence_seconds=3.0)
    with sleepy_engine(transport) as eng:
        for n, _ in enumerate(eng.results()):
            if n == 20:
                break
        first = _announce(transport, [0], launch=1, attempt=1)
        time.sleep(0.5)
        second = _announce(transport, [0], launch=1, attempt=2, pid=2)
        assert "exit" in _frames_until_close(first)
        stale = _announce(transport, [1], launch=0, pid=3)
        assert _frames_until_close(stale)[:1] == ["exit"]
        retried = _announce(transport, [0], launch=1, attempt=1, pid=4)  # Spark retried it
        assert _frames_until_close(retried)[:1] == ["exit"]
        owners = {w["pid"]: w["blocks"] for w in transport.workers()}
        assert owners.get(2) == [0] and sum(b == [1] for b in owners.values()) == 1, owners
        second.close()
        for n, r in enumerate(eng.results()):  # blocks 1-3 go on; block 0 lost its tasks
            assert r.block != 0 or n < 50
            if n == 200:
                break
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "its blocks were announced again by worker -1.2 on x (pid 2, blocks [0])" in text
    assert "(pid 3, blocks [1]) is from launch 0 of 1" in text
    assert "(pid 4, blocks [0]) is from launch 1 of 1, older than worker -1.2" in text


def test_stragglers_sleep_and_obsolete_stragglers_are_cancelled(spark):
    _register_by_value()
    # a mild straggler: block 0 sleeps 1 x 0.05 s after each task, and says so
    transport = ResidentTransport(spark, start_grace=None)
    with sleepy_engine(
        transport,
        stragglers=StragglerModel("intensity", intensity=1.0),
        straggler_base_seconds=0.05,
    ) as eng:
        results = []
        for r in eng.results():
            results.append(r)
            if len(results) >= 60 and sum(r.block == 0 for r in results) >= 2:
                break
    slept = {r.block: r.sleep_seconds for r in results}
    assert slept[0] == pytest.approx(0.05) and all(slept[b] == 0 for b in (1, 2, 3))
    per_block = [sum(r.block == b for r in results) for b in range(4)]
    assert 2 * per_block[0] < min(per_block[1:])  # it straggles: fewer results

    # a hopeless straggler (30 s) becomes obsolete under tau = 2: cancelled at once, wakes up
    transport = ResidentTransport(spark, start_grace=None)
    start = time.monotonic()
    with sleepy_engine(
        transport,
        Policy.asynchronous(tau=2),
        np.zeros(3),
        stragglers=StragglerModel("intensity", intensity=300.0),
        straggler_base_seconds=0.1,
    ) as eng:
        accepted = []
        for r in eng.results():
            accepted.append(r)
            eng.publish(np.full(3, float(eng.version + 1)))
            if eng.core.counts["cancelled"] >= 2 and len(accepted) >= 40:
                break
    counts = dict(eng.core.counts)
    assert eng.core.accounting_closes() and eng.core.in_flight == 0
    assert time.monotonic() - start < 20  # a 30 s sleep would not let the run end
    assert counts["cancelled"] >= 2 and all(r.block != 0 for r in accepted)


@spark_only
def test_start_names_the_address_when_no_task_connects(spark, monkeypatch):
    with pytest.raises(ValueError, match="definite address"):
        ResidentTransport(spark, host="0.0.0.0").start(2, 2, "x", task_fn=sleepy_task)
    with pytest.raises(ValueError, match="needs the task function"):
        ResidentTransport(spark).start(2, 2, "x")

    def no_job(self):
        self._closing.wait(30)

    monkeypatch.setattr(ResidentJob, "run", no_job)
    transport = ResidentTransport(spark, connect_timeout=1.0)
    with pytest.raises(RuntimeError) as info:
        transport.start(2, 2, "x", task_fn=sleepy_task)
    message = str(info.value)
    assert "\n" not in message and "127.0.0.1:" in message and "spark.driver.host" in message
    assert transport._server is not None and transport._server.fileno() == -1  # closed


# =================================================================================================
# local-cluster: two executor processes (this file as the driver script, in its own process)
# =================================================================================================
def cluster_main(master):
    from async_spark.engine import build_session

    spark = build_session(
        master,
        app_name="async-spark-resident-cluster",
        conf={
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": "512m",
        },
    )
    local_w, _ = sum_of_blocks_run(LocalTransport())
    transport = ResidentTransport(spark, silence_seconds=5.0)
    resident_w, executors = sum_of_blocks_run(transport)
    # a second run stays up; the driver then dies without closing anything
    transport = ResidentTransport(spark, silence_seconds=5.0)
    eng = sleepy_engine(transport)
    eng.start()
    for i, _ in enumerate(eng.results()):
        if i == 20:
            break
    out = {
        "identical": resident_w.tobytes() == local_w.tobytes(),
        "executors": sorted(executors),
        "num_tasks": transport.num_tasks,
        "worker_pids": [w["pid"] for w in transport.workers()],
        # executor identities are host:pid of the executor JVMs
        "executor_pids": sorted({int(e.rsplit(":", 1)[1]) for e in executors}),
    }
    print("RESULT-JSON " + json.dumps(out), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.cluster
def test_local_cluster_results_from_both_executors_and_nothing_left_when_the_driver_dies():
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, str(Path(__file__)), "local-cluster[2,1,1024]"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT-JSON ")]
    assert lines, proc.stderr[-3000:]
    out = json.loads(lines[-1].split(" ", 1)[1])
    assert out["identical"] and out["num_tasks"] == 2
    assert len(out["executors"]) == 2, out  # both executor processes served tickets
    assert len(out["executor_pids"]) == 2 and len(out["worker_pids"]) == 2
    # SIGKILL of the driver: every resident task and executor is gone within 30 s
    deadline = time.monotonic() + 30
    left = out["worker_pids"] + out["executor_pids"]
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = [p for p in left if _pid_alive(p)]
    assert not left, f"still running 30 s after the driver died: {left}"


if __name__ == "__main__":
    cluster_main(sys.argv[1])


def test_pyspark_ml_still_works_in_the_session_after_a_resident_run(spark):
    """A resident run leaves the session as it found it: pyspark.ml's LogisticRegression fits and
    transforms afterwards (SparkSession.addTag made its model's transform fail with "Task not
    serializable")."""
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.linalg import Vectors

    sum_of_blocks_run(ResidentTransport(spark), rounds=2)
    df = spark.createDataFrame(
        [(Vectors.dense([float(i), 1.0]), float(i % 2)) for i in range(20)], ["features", "label"]
    )
    rows = LogisticRegression(maxIter=5).fit(df).transform(df).collect()
    assert len(rows) == 20

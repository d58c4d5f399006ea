"""Rank 0's rendezvous store listens on the given address only, never on every interface."""

from __future__ import annotations

import json
import os
import socket
from datetime import timedelta

import pytest
import torch.distributed as dist

from async_spark.hylo.distributed import launch, tcp_store

TD = timedelta(seconds=20)
pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/net/tcp"), reason="needs Linux /proc/net/tcp"
)


def _listening(port: int) -> list[str]:
    """Local addresses of the sockets in LISTEN state on ``port`` (from /proc/net/tcp{,6})."""
    out = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(name):
            continue
        with open(name) as fh:
            for line in fh.read().splitlines()[1:]:
                fields = line.split()
                addr, hexport = fields[1].rsplit(":", 1)
                if int(hexport, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                    if len(addr) == 8:  # IPv4, little-endian hex
                        out.append(socket.inet_ntoa(bytes.fromhex(addr)[::-1]))
                    else:
                        out.append(f"[{addr}]")
    return out


def _other_local_address() -> str | None:
    """A non-loopback IPv4 address of this machine, if it has one (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


def test_the_server_listens_on_loopback_only_and_serves_clients():
    server = tcp_store("127.0.0.1", 0, 2, is_master=True, timeout=TD)
    port = int(server.port)
    assert port > 0 and _listening(port) == ["127.0.0.1"]
    client = tcp_store("127.0.0.1", port, 2, is_master=False, timeout=TD)
    client.set("greeting", "hello")
    assert server.get("greeting") == b"hello"
    other = _other_local_address()
    if other is not None:  # the machine's other address must not reach the store
        with pytest.raises(OSError), socket.create_connection((other, port), timeout=2):
            pass
    del client, server


def test_a_plain_tcpstore_would_listen_everywhere():
    """Why the helper exists: torch binds its own server to every interface (if a later torch
    binds to ``host_name``, this test says so, and the helper could go)."""
    server = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, timeout=TD, wait_for_workers=False)
    assert _listening(int(server.port)) in (["[00000000000000000000000000000000]"], ["0.0.0.0"])
    del server


def _report_listeners(rank, world, out_dir):
    port = int(os.environ["MASTER_PORT"])
    if rank == 0:
        with open(os.path.join(out_dir, "listen.json"), "w") as fh:
            json.dump(_listening(port), fh)
    dist.barrier()


def test_launch_rendezvous_binds_to_loopback(tmp_path):
    launch(_report_listeners, 2, args=(str(tmp_path),), timeout=60)
    assert json.loads((tmp_path / "listen.json").read_text()) == ["127.0.0.1"]

"""Start W torch processes on this machine with a bounded rendezvous on 127.0.0.1.

Used by :func:`async_spark.hylo.train.train` (``workers > 1``) and by the tests.  Every process
runs ``fn(rank, world_size, *args)`` inside an initialized process group (gloo on CPU, NCCL on
CUDA), and the group is destroyed in a ``finally``.  The launcher waits at most ``timeout``
seconds and terminates the processes it started if they overrun.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["free_port", "launch", "tcp_store"]


def free_port() -> int:
    """An unused TCP port on 127.0.0.1 (bound and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tcp_store(
    host: str, port: int, world_size: int, *, is_master: bool, timeout: timedelta
) -> dist.TCPStore:
    """A c10d ``TCPStore`` whose server (``is_master``) listens on ``host`` only.

    ``TCPStore(host, port, is_master=True)`` -- and every ``init_method="tcp://host:port"`` or
    ``env://`` rendezvous built on it -- listens on all interfaces (``[::]``), whatever ``host``
    says: anyone who can reach the machine could then talk to the store. The server here gets a
    socket already bound to ``host`` and listening (``master_listen_fd``, which the libuv backend
    takes over and closes). ``port`` 0 picks a free port; the store's ``port`` says which.
    Clients (``is_master=False``) connect to ``host:port`` as usual.
    """
    if not is_master:
        return dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(max(128, world_size))
        bound = int(sock.getsockname()[1])
    except BaseException:
        sock.close()
        raise
    fd = sock.detach()
    try:
        return dist.TCPStore(
            host,
            bound,
            world_size,
            is_master=True,
            timeout=timeout,
            wait_for_workers=False,
            master_listen_fd=fd,
            use_libuv=True,
        )
    except BaseException:
        os.close(fd)
        raise


def _entry(
    rank: int,
    fn: Callable[..., Any],
    world_size: int,
    backend: str,
    port: int,
    timeout: float,
    threads: int,
    args: tuple[Any, ...],
) -> None:
    torch.set_num_threads(threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    td = timedelta(seconds=timeout)
    store = tcp_store("127.0.0.1", port, world_size, is_master=rank == 0, timeout=td)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=td)
    try:
        fn(rank, world_size, *args)
        # Every rank is done before rank 0, which hosts the rendezvous store, tears down.
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # Leave without the interpreter's teardown: gloo's threads can still be joinable when
    # Python finalizes, and their C++ destructors then abort the process ("terminate called
    # without an active exception", SIGABRT) although the work is done and written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def launch(
    fn: Callable[..., Any],
    world_size: int,
    args: tuple[Any, ...] = (),
    backend: str = "gloo",
    timeout: float = 120.0,
    threads: int = 1,
) -> None:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` spawned processes.

    Parameters
    ----------
    fn : callable
        A module-level function (it is pickled by reference for ``spawn``).
    world_size : int
        Number of processes (>= 1).
    args : tuple
        Extra arguments, picklable.
    backend : {"gloo", "nccl"}
        ``torch.distributed`` backend.
    timeout : float
        Seconds for the collectives' timeout and for the whole run; on overrun the processes
        are terminated and ``TimeoutError`` is raised.
    threads : int
        ``torch.set_num_threads`` in each process.

    Raises
    ------
    TimeoutError
        When the processes do not finish within ``timeout`` seconds.
    torch.multiprocessing.ProcessRaisedException
        When a process raised.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    port = free_port()
    ctx = mp.start_processes(
        _entry,
        args=(fn, world_size, backend, port, float(timeout), int(threads), tuple(args)),
        nprocs=world_size,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + timeout
    try:
        while not ctx.join(timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{world_size} processes did not finish in {timeout} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
                p.join(5)

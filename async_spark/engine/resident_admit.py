"""The resident transport's listener: it accepts connections, makes each prove the run's secret
and say hello within a bounded time, and hands the connection to the transport.

At most ``max_handshakes`` handshakes run at once (each in a short-lived thread); beyond that a
connection is refused with a log line, so a flood of idle clients cannot hold the driver's
threads. A client that fails the handshake, or sends anything but a valid hello, is closed with
a log line naming its address and the reason; the run goes on.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from .wire import Frame, FrameReader, WireError, configure_socket, server_handshake

log = logging.getLogger("async_spark.engine.resident")

__all__ = ["Admission"]

#: (socket, peer, the hello's kind, its fields, the reader holding what followed it) -> the
#: registered connection; raises a WireError to refuse it
Register = Callable[[socket.socket, str, str, dict[str, Any], FrameReader], Any]


class Admission:
    """Accepts on ``server`` (a listening socket with a timeout; others through
    :meth:`accept_loop`) until ``closing`` is set.

    ``register`` turns a verified hello into a connection; ``early_frames(conn, frames)`` handles
    frames that arrived with the hello; ``spawn(target, name, *args)`` starts a thread the
    transport joins when it closes."""

    def __init__(
        self,
        server: socket.socket,
        secret: bytes,
        *,
        max_frame_bytes: int,
        handshake_timeout: float,
        closing: threading.Event,
        register: Register,
        early_frames: Callable[[Any, list[Frame]], None],
        spawn: Callable[..., threading.Thread],
        max_handshakes: int = 32,
    ) -> None:
        self.server = server
        self._secret = secret
        self.max_frame_bytes = max_frame_bytes
        self.handshake_timeout = handshake_timeout
        self._closing = closing
        self._register = register
        self._early_frames = early_frames
        self._spawn = spawn
        self._handshakes = threading.BoundedSemaphore(max_handshakes)

    def accept_loop(self, server: socket.socket | None = None) -> None:
        """Accept on ``server`` (default: the one given at construction; the transport runs one
        loop per listener, sharing the handshake limit)."""
        server = self.server if server is None else server
        while not self._closing.is_set():
            try:
                sock, addr = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else "local socket"
            if not self._handshakes.acquire(blocking=False):
                log.warning("resident transport: refused %s: too many handshakes at once", peer)
                sock.close()
                continue
            self._spawn(self.admit, f"async-spark-resident-admit-{peer}", sock, peer)

    def admit(self, sock: socket.socket, peer: str) -> None:
        """Handshake and hello (blocking, bounded); then the connection belongs to the reader."""
        reader = FrameReader(self.max_frame_bytes)
        try:
            try:
                configure_socket(sock)
                server_handshake(sock, self._secret, timeout=self.handshake_timeout)
            except (WireError, OSError) as exc:
                log.warning("resident transport: refused connection from %s: %s", peer, exc)
                sock.close()
                return
            finally:
                self._handshakes.release()
            sock.settimeout(self.handshake_timeout)  # the hello must follow at once
            frames: list[Frame] = []
            while not frames:
                frames = reader.read(sock)
            sock.settimeout(None)
            hello, rest = frames[0], frames[1:]
            conn = self._register(sock, peer, hello.kind, hello.fields, reader)
        except (WireError, OSError) as exc:
            if not self._closing.is_set():
                log.warning(
                    "resident transport: closed connection from %s: %s: %s",
                    peer,
                    type(exc).__name__,
                    exc,
                )
            sock.close()
            return
        if rest:
            self._early_frames(conn, rest)

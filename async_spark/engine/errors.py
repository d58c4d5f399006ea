"""The engine's exceptions, in a module of their own.

They are re-exported where they belong to the reader (:mod:`.wire`'s refusals, :mod:`.engine`'s
:class:`EngineError`, :mod:`.resident`'s :class:`SideCallFailed`). Keeping the classes out of
the hot modules leaves those modules plain enough for an ahead-of-time compiler (mypyc cannot
compile a class that derives from ``RuntimeError`` or from two exception types):
``benchmarks/compiled_driver.py`` measures what compiling them would buy.
"""

from __future__ import annotations

__all__ = [
    "AuthenticationFailed",
    "BadDtype",
    "BadHeader",
    "BadMagic",
    "BadShape",
    "ConnectionClosed",
    "EngineError",
    "FrameTooLarge",
    "SideCallFailed",
    "TruncatedFrame",
    "UnsupportedValue",
    "WireError",
]


class EngineError(RuntimeError):
    """The run cannot go on (every block given up, or a transport failure)."""


class SideCallFailed(RuntimeError):
    """A side call (:meth:`.ResidentTransport.side_call`) did not return: its worker was lost,
    the task failed or was cancelled, or the transport closed."""


class WireError(Exception):
    """A frame, a message or a handshake refused: the connection that sent it is closed."""


class BadMagic(WireError):
    pass


class FrameTooLarge(WireError):
    pass


class BadDtype(WireError):
    pass


class BadShape(WireError):
    pass


class TruncatedFrame(WireError):
    pass


class BadHeader(WireError):
    pass


class ConnectionClosed(WireError):
    """The peer closed the stream between two frames."""


class AuthenticationFailed(WireError):
    pass


class UnsupportedValue(WireError, TypeError):
    """A value that cannot travel (raised on the sending side, before anything is sent)."""

"""Framed messages of the resident transport: a fixed prefix, a small JSON header, raw array buffers.

Nothing read from the network is ever unpickled or evaluated. A frame is::

    magic b"ASW1" | header length (uint32, big-endian) | body length (uint64, big-endian)
    | header: UTF-8 JSON object | body: the arrays' bytes, C order, each padded to 8 bytes

The header holds the message kind (``"k"``), its plain fields (``"f"``), the structure of its
payload (``"p"``) and one ``[dtype, shape]`` descriptor per array (``"a"``). A payload is built of
``None``, ``bool``, ``int``, ``float``, ``str``, numpy arrays of an allowed dtype
(:data:`DTYPES`), and tuples, lists, named tuples and ``str``-keyed dicts of those, nested at most
:data:`MAX_DEPTH` deep. Numpy scalars travel as Python numbers; a named tuple arrives as a named
tuple with the same type name and fields (a look-alike class: indexing, unpacking and attribute
access work, ``isinstance`` against the sender's class does not). Arrays arrive writable, in the
wire's little-endian byte order; floats are exact (JSON keeps a float's shortest repr, arrays are
raw bytes).

Every refusal raises a specific :class:`WireError`: :class:`BadMagic`, :class:`FrameTooLarge`
(a length above the limit, checked before anything is allocated), :class:`BadDtype`,
:class:`BadShape` (a shape that does not match the body), :class:`TruncatedFrame`,
:class:`BadHeader`; :class:`ConnectionClosed` is a clean end of stream between frames.

Before any frame, a connection runs :func:`server_handshake` / :func:`client_handshake`: an
HMAC-SHA256 challenge-response in both directions over a per-run random secret, with fixed-size
messages, compared with :func:`hmac.compare_digest`.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import keyword
import math
import os
import socket
import struct
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from .errors import (
    AuthenticationFailed,
    BadDtype,
    BadHeader,
    BadMagic,
    BadShape,
    ConnectionClosed,
    FrameTooLarge,
    TruncatedFrame,
    UnsupportedValue,
    WireError,
)

__all__ = [
    "DTYPES",
    "MAX_DEPTH",
    "MAX_HEADER_BYTES",
    "AuthenticationFailed",
    "BadDtype",
    "BadHeader",
    "BadMagic",
    "BadShape",
    "ConnectionClosed",
    "Frame",
    "FrameReader",
    "FrameTooLarge",
    "TruncatedFrame",
    "UnsupportedValue",
    "WireError",
    "client_handshake",
    "configure_socket",
    "decode_frame",
    "encode_frame",
    "frame_size",
    "read_frame",
    "send_frame",
    "server_handshake",
]

MAGIC = b"ASW1"
PREFIX = struct.Struct("!4sIQ")
MAX_HEADER_BYTES = 1 << 20  # hard limit: headers carry structure and small values only
DEFAULT_MAX_BODY_BYTES = 1 << 30  # default limit of a frame's array bytes (configurable)
MAX_DEPTH = 16  # nested containers in a payload
MAX_ARRAYS = 4096  # arrays in one frame
MAX_NDIM = 32
MAX_NODES = 200_000  # values in one payload's structure
_ALIGN = 8

DTYPES: dict[str, np.dtype] = {
    "float64": np.dtype("<f8"),
    "float32": np.dtype("<f4"),
    "int64": np.dtype("<i8"),
    "int32": np.dtype("<i4"),
    "bool": np.dtype("|b1"),
    "uint8": np.dtype("|u1"),
}
"""The array dtypes that travel (name on the wire -> little-endian numpy dtype)."""

_NAME_OF = {(dt.kind, dt.itemsize): name for name, dt in DTYPES.items()}
_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)
_DECODER = json.JSONDecoder()
# Every result and ticket encodes and decodes one header: CPython's C encoder and scanner, made
# once, spare the json module's per-call setup (a few microseconds of the driver's time per result).
_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]


def _json_dumps(header: dict[str, Any]) -> bytes:
    return _ENCODER.encode(header).encode()


def _c_dumps() -> Any:
    """The C encoder's fast path, or None where this Python has none (or another signature):
    it must write exactly what :data:`_ENCODER` writes."""
    if _C_ENCODER is None:
        return None
    try:
        chunks = _C_ENCODER(
            None,  # no circularity markers (check_circular=False)
            _ENCODER.default,
            json.encoder.encode_basestring_ascii,
            None,
            ":",
            ",",
            False,
            False,
            True,
        )

        def dumps(header: dict[str, Any]) -> bytes:
            return "".join(chunks(header, 0)).encode()

        probe = {"k": "é", "f": {"x": [0.1, -2, None, True, 1e300]}}
        return dumps if dumps(probe) == _json_dumps(probe) else None
    except Exception:  # noqa: BLE001 (any surprise: keep the json module's own path)
        return None


_dumps = _c_dumps() or _json_dumps


def _loads(head: bytes | bytearray) -> Any:
    """The header's JSON value: exactly one value, no surrounding whitespace (as encoded)."""
    text = head.decode()
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        raise ValueError("no JSON value at the start") from None
    if end != len(text):
        raise ValueError(f"extra data after the JSON value at {end}")
    return value


class Frame(NamedTuple):
    kind: str
    fields: dict[str, Any]
    payload: Any


# --- encoding ------------------------------------------------------------------------------------
_ALLOWED = (
    "None, bool, int, float, str, numpy arrays of dtype "
    + "/".join(DTYPES)
    + ", and tuples, lists, named tuples and str-keyed dicts of those"
)


_PLAIN = frozenset({type(None), bool, int, float, str})


def _encode_value(value: Any, arrays: list[np.ndarray], depth: int) -> Any:
    kind = type(value)
    if kind in _PLAIN:
        return value
    if isinstance(value, np.ndarray):  # before the tuple: a model or a payload's arrays
        if len(arrays) >= MAX_ARRAYS:
            raise UnsupportedValue(f"a payload may hold at most {MAX_ARRAYS} arrays")
        arrays.append(_wire_array(value))
        return {"a": len(arrays) - 1}
    if kind is tuple and depth < MAX_DEPTH:
        return {"t": [_encode_value(v, arrays, depth + 1) for v in value]}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic):
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, np.integer):
            return int(value)
        if isinstance(value, np.floating):
            return float(value)
        raise UnsupportedValue(f"cannot send a numpy {value.dtype} scalar; allowed: {_ALLOWED}")
    if depth >= MAX_DEPTH:
        raise UnsupportedValue(f"payload nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, tuple):
        items = [_encode_value(v, arrays, depth + 1) for v in value]
        fields = getattr(type(value), "_fields", None)
        if fields is not None:
            return {"n": type(value).__name__, "f": list(fields), "v": items}
        return {"t": items}
    if isinstance(value, list):
        return {"l": [_encode_value(v, arrays, depth + 1) for v in value]}
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise UnsupportedValue(f"dict keys must be str to travel, got {type(k).__name__}")
            out[k] = _encode_value(v, arrays, depth + 1)
        return {"d": out}
    raise UnsupportedValue(f"cannot send a {type(value).__name__}; allowed: {_ALLOWED}")


def _wire_array(arr: np.ndarray) -> np.ndarray:
    name = _NAME_OF.get((arr.dtype.kind, arr.dtype.itemsize))
    if name is None or arr.dtype.fields is not None:
        raise UnsupportedValue(f"cannot send an array of dtype {arr.dtype}; allowed: {_ALLOWED}")
    if arr.ndim > MAX_NDIM:
        raise UnsupportedValue(f"arrays may have at most {MAX_NDIM} dimensions")
    wire = DTYPES[name]
    if arr.dtype != wire:  # byte order only
        arr = arr.astype(wire)
    # (not np.ascontiguousarray: it turns a 0-d array into a 1-d one)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def encode_frame(kind: str, fields: dict[str, Any] | None = None, payload: Any = None) -> list[Any]:
    """The buffers of one frame (prefix, header, then array bytes and padding), ready to send.

    ``fields`` are plain JSON values written by this package; ``payload`` is any wire value.
    Raises :class:`UnsupportedValue` for a payload that cannot travel.
    """
    arrays: list[np.ndarray] = []
    header: dict[str, Any] = {"k": kind, "f": fields or {}}
    if payload is not None:
        header["p"] = _encode_value(payload, arrays, 0)
    if arrays:
        header["a"] = [[_NAME_OF[(a.dtype.kind, a.dtype.itemsize)], list(a.shape)] for a in arrays]
    head = _dumps(header)
    if len(head) > MAX_HEADER_BYTES:
        raise UnsupportedValue(
            f"message header of {len(head)} bytes exceeds {MAX_HEADER_BYTES}: send large values "
            "as arrays"
        )
    parts: list[Any] = [b"", head]
    body = 0
    for a in arrays:
        if a.nbytes:
            parts.append(a.reshape(-1).view(np.uint8).data)
        pad = -a.nbytes % _ALIGN
        if pad:
            parts.append(b"\0" * pad)
        body += a.nbytes + pad
    parts[0] = PREFIX.pack(MAGIC, len(head), body)
    return parts


# --- decoding ------------------------------------------------------------------------------------
class _Reader(Protocol):
    def readinto(self, buffer: Any, /) -> int | None: ...


def _read_exact(stream: _Reader, n: int, what: str, at_boundary: bool = False) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        try:
            k = stream.readinto(view[got:])
        except (ConnectionError, OSError) as exc:
            if at_boundary and got == 0:
                raise ConnectionClosed(f"connection lost: {exc}") from None
            raise TruncatedFrame(f"truncated frame: connection lost in the {what}: {exc}") from None
        if not k:
            if at_boundary and got == 0:
                raise ConnectionClosed("connection closed by the peer")
            raise TruncatedFrame(f"truncated frame: {what} ended after {got} of {n} bytes")
        got += k
    return buf


def read_frame(stream: Any, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> Frame:
    """Read one frame from a buffered binary stream (e.g. ``sock.makefile("rb")``)."""
    prefix = _read_exact(stream, PREFIX.size, "prefix", at_boundary=True)
    magic, head_len, body_len = PREFIX.unpack(prefix)
    _check_prefix(magic, head_len, body_len, max_body_bytes)
    head = _read_exact(stream, head_len, "header")
    body = _read_exact(stream, body_len, "body") if body_len else bytearray()
    return decode_frame(head, body)


def _check_prefix(magic: bytes, head_len: int, body_len: int, max_body_bytes: int) -> None:
    if magic != MAGIC:
        raise BadMagic(f"bad magic {bytes(magic)!r} (expected {MAGIC!r})")
    if head_len > MAX_HEADER_BYTES:
        raise FrameTooLarge(f"frame too large: header of {head_len} bytes > {MAX_HEADER_BYTES}")
    if body_len > max_body_bytes:
        raise FrameTooLarge(f"frame too large: body of {body_len} bytes > {max_body_bytes}")


def decode_frame(head: bytes | bytearray, body: bytearray) -> Frame:
    """Decode a frame's header and body (arrays are views of ``body``)."""
    try:
        header = _loads(head)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise BadHeader(f"header is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(header, dict) or not isinstance(header.get("k"), str):
        raise BadHeader("header must be a JSON object with a string 'k'")
    fields = header.get("f", {})
    if not isinstance(fields, dict):
        raise BadHeader("header 'f' must be an object")
    arrays = _decode_arrays(header.get("a", []), body)
    payload = None
    if "p" in header:
        counter = [0]
        payload = _decode_value(header["p"], arrays, 0, counter)
    return Frame(header["k"], fields, payload)


def _decode_arrays(descriptors: Any, body: bytearray) -> list[np.ndarray]:
    if not isinstance(descriptors, list) or len(descriptors) > MAX_ARRAYS:
        raise BadHeader(f"header 'a' must be a list of at most {MAX_ARRAYS} array descriptors")
    out = []
    offset = 0
    for desc in descriptors:
        if not (isinstance(desc, list) and len(desc) == 2):
            raise BadHeader("an array descriptor must be [dtype, shape]")
        name, shape = desc
        dtype = DTYPES.get(name) if type(name) is str else None
        if dtype is None:
            raise BadDtype(f"unknown dtype {str(name)[:40]!r}; allowed: {', '.join(DTYPES)}")
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_NDIM
            or not all(type(n) is int and n >= 0 for n in shape)
        ):
            raise BadShape(f"bad shape {str(shape)[:80]}: a list of at most {MAX_NDIM} ints >= 0")
        count = math.prod(shape)
        nbytes = count * dtype.itemsize
        end = offset + nbytes
        if end > len(body):
            raise BadShape(
                f"shape {shape} of {name} needs {nbytes} bytes at offset {offset}; the body has "
                f"{len(body)}"
            )
        if nbytes:
            # (positional arguments, and no reshape of a vector: a result's one array costs half)
            arr = np.frombuffer(body, dtype, count, offset)
            if len(shape) != 1:
                arr = arr.reshape(tuple(shape))
        else:
            arr = np.empty(tuple(shape), dtype=dtype)
        out.append(arr)
        offset = end + (-nbytes % _ALIGN)
    if offset != len(body):
        raise BadShape(f"the arrays described take {offset} bytes but the body has {len(body)}")
    return out


_IDENT_MAX = 64
_namedtuples: collections.OrderedDict[tuple[str, tuple[str, ...]], type] = collections.OrderedDict()


def _namedtuple_class(name: Any, fields: Any) -> type:
    if not (
        isinstance(name, str)
        and _is_name(name)
        and isinstance(fields, list)
        and len(fields) <= 256
        and all(isinstance(f, str) and _is_name(f) and not f.startswith("_") for f in fields)
        and len(set(fields)) == len(fields)
    ):
        raise BadHeader("a named tuple needs an identifier name and distinct identifier fields")
    key = (name, tuple(fields))
    known = _namedtuples.get(key)
    if known is not None:
        _namedtuples.move_to_end(key)
        return known
    made: type = collections.namedtuple(name, fields)  # type: ignore[misc]
    _namedtuples[key] = made
    if len(_namedtuples) > 256:
        _namedtuples.popitem(last=False)
    return made


def _is_name(text: str) -> bool:
    return 0 < len(text) <= _IDENT_MAX and text.isidentifier() and not keyword.iskeyword(text)


def _decode_value(node: Any, arrays: list[np.ndarray], depth: int, counter: list[int]) -> Any:
    counter[0] += 1
    if counter[0] > MAX_NODES:
        raise BadHeader(f"payload has more than {MAX_NODES} values")
    if node is None or isinstance(node, bool | int | float | str):
        return node
    if isinstance(node, dict) and len(node) == 1 and "a" in node:
        index = node["a"]
        if type(index) is not int or not 0 <= index < len(arrays):
            raise BadHeader(f"array reference {str(index)[:20]} out of range")
        return arrays[index]
    if depth >= MAX_DEPTH:
        raise BadHeader(f"payload nested deeper than {MAX_DEPTH} levels")
    if isinstance(node, dict) and len(node) == 1:
        ((tag, inner),) = node.items()
        if tag in ("t", "l") and isinstance(inner, list):
            items = [_decode_value(v, arrays, depth + 1, counter) for v in inner]
            return tuple(items) if tag == "t" else items
        if tag == "d" and isinstance(inner, dict):
            return {k: _decode_value(v, arrays, depth + 1, counter) for k, v in inner.items()}
    if isinstance(node, dict) and set(node) == {"n", "f", "v"} and isinstance(node["v"], list):
        cls = _namedtuple_class(node["n"], node["f"])
        if len(node["v"]) != len(node["f"]):
            raise BadHeader("a named tuple's values do not match its fields")
        return cls(*(_decode_value(v, arrays, depth + 1, counter) for v in node["v"]))
    raise BadHeader(f"unknown payload node {str(node)[:60]}")


class FrameReader:
    """Incremental frames from a socket, for a reader that polls many connections: each
    :meth:`read` makes exactly one ``recv`` (so a socket that select() reported readable never
    blocks it) and returns the frames completed so far. A body is received straight into its own
    buffer (the decoded arrays are views of it)."""

    def __init__(self, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, chunk: int = 1 << 16):
        self.max_body_bytes = max_body_bytes
        self.chunk = chunk
        self._buf = bytearray()
        self._head: bytes | bytearray | None = None  # header of the frame being received
        self._body: bytearray | None = None
        self._got = 0

    def read(self, sock: socket.socket) -> list[Frame]:
        if self._body is not None:
            try:
                n = sock.recv_into(memoryview(self._body)[self._got :])
            except (ConnectionError, OSError) as exc:
                raise TruncatedFrame(
                    f"truncated frame: connection lost in the body: {exc}"
                ) from None
            if not n:
                raise TruncatedFrame(
                    f"truncated frame: body ended after {self._got} of {len(self._body)} bytes"
                )
            self._got += n
            if self._got < len(self._body):
                return []
            assert self._head is not None
            frame = decode_frame(self._head, self._body)
            self._head, self._body = None, None
            return [frame]
        try:
            data = sock.recv(self.chunk)
        except (ConnectionError, OSError) as exc:
            if self._buf:
                raise TruncatedFrame(f"truncated frame: connection lost: {exc}") from None
            raise ConnectionClosed(f"connection lost: {exc}") from None
        if not data:
            if self._buf:
                what = "prefix" if len(self._buf) < PREFIX.size else "header"
                raise TruncatedFrame(f"truncated frame: {what} ended after {len(self._buf)} bytes")
            raise ConnectionClosed("connection closed by the peer")
        self._buf += data
        return self._parse()

    def _parse(self) -> list[Frame]:
        frames = []
        buf = self._buf
        pos, end, size = 0, len(buf), PREFIX.size
        while end - pos >= size:
            magic, head_len, body_len = PREFIX.unpack_from(buf, pos)
            _check_prefix(magic, head_len, body_len, self.max_body_bytes)
            start = pos + size + head_len
            if end < start:
                break
            head = buf[pos + size : start]
            have = end - start
            if have >= body_len:
                pos = start + body_len
                frames.append(decode_frame(head, buf[start:pos]))  # the body: its own copy
                continue
            self._head = head
            self._body = bytearray(body_len)
            self._body[:have] = buf[start:end]
            self._got = have
            pos = end
            break
        if pos:  # consumed bytes go at once, not frame by frame
            del buf[:pos]
        return frames


# --- sockets -------------------------------------------------------------------------------------
_JOIN_BELOW = 1 << 16


def frame_size(parts: Sequence[Any]) -> int:
    """The bytes of a frame that :func:`encode_frame` returned (read off its prefix)."""
    _, head_len, body_len = PREFIX.unpack(parts[0])
    return int(PREFIX.size + head_len + body_len)


def send_frame(sock: socket.socket, parts: Sequence[Any], size: int | None = None) -> None:
    """Send the buffers of :func:`encode_frame` (small frames as one write, large without a copy);
    ``size`` is the frame's length when the caller knows it (:func:`frame_size`)."""
    total = sum(len(p) for p in parts) if size is None else size
    if total <= _JOIN_BELOW:
        sock.sendall(b"".join(parts))
        return
    for p in parts:
        if len(p):
            sock.sendall(p)


LOCAL_BUFFER_BYTES = 4 << 20


def configure_socket(sock: socket.socket) -> None:
    """A connection's options, both sides: on TCP no Nagle delay (a frame goes out at once); on a
    Unix-domain socket 4 MiB buffers (capped by the kernel's ``wmem_max``/``rmem_max``): its
    default, about 208 KiB, splits a large model into many hand-offs between the processes, where
    TCP sizes its own buffers (with the default the local socket fell behind TCP at d = 10^5:
    ``benchmarks/RESULTS.md``, session 35)."""
    if sock.family == getattr(socket, "AF_UNIX", None):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, LOCAL_BUFFER_BYTES)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, LOCAL_BUFFER_BYTES)
    else:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


HANDSHAKE_MAGIC = b"ASH1"
_NONCE = 32
_MAC = hashlib.sha256().digest_size


def _mac(secret: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, role + nonce, hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int, what: str) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise AuthenticationFailed(
                f"handshake: connection closed after {len(buf)} of {n} bytes of the {what}"
            )
        buf += chunk
    return bytes(buf)


def server_handshake(sock: socket.socket, secret: bytes, timeout: float = 10.0) -> None:
    """Challenge the client; it must answer HMAC(secret, challenge) before anything else is read.
    Then prove the secret to the client in turn. Raises :class:`AuthenticationFailed`,
    :class:`BadMagic` or ``TimeoutError``."""
    sock.settimeout(timeout)
    challenge = os.urandom(_NONCE)
    sock.sendall(HANDSHAKE_MAGIC + challenge)
    reply = _recv_exact(sock, len(HANDSHAKE_MAGIC) + _MAC + _NONCE, "client's answer")
    if reply[:4] != HANDSHAKE_MAGIC:
        raise BadMagic(f"bad handshake magic {reply[:4]!r}")
    answer, client_challenge = reply[4 : 4 + _MAC], reply[4 + _MAC :]
    if not hmac.compare_digest(answer, _mac(secret, b"client", challenge)):
        raise AuthenticationFailed("authentication failed: the client does not know the secret")
    sock.sendall(_mac(secret, b"server", client_challenge))
    sock.settimeout(None)


def client_handshake(sock: socket.socket, secret: bytes, timeout: float = 10.0) -> None:
    """Answer the server's challenge and check that the server knows the secret too."""
    sock.settimeout(timeout)
    hello = _recv_exact(sock, len(HANDSHAKE_MAGIC) + _NONCE, "server's challenge")
    if hello[:4] != HANDSHAKE_MAGIC:
        raise BadMagic(f"bad handshake magic {hello[:4]!r}")
    challenge = os.urandom(_NONCE)
    sock.sendall(HANDSHAKE_MAGIC + _mac(secret, b"client", hello[4:]) + challenge)
    proof = _recv_exact(sock, _MAC, "server's proof")
    if not hmac.compare_digest(proof, _mac(secret, b"server", challenge)):
        raise AuthenticationFailed("authentication failed: the server does not know the secret")
    sock.settimeout(None)

"""LIBSVM / svmlight text files as blocks.

Format (one sample per line)::

    <label> <index>:<value> <index>:<value> ... [# comment]

with 1-based, strictly increasing integer indices. Blank lines and lines holding only a comment
are skipped. ``qid:`` tokens (ranking data) are refused with a :class:`DataError`.

How the work is split
---------------------
The driver indexes the files once (:func:`index_libsvm`): a vectorized scan for newlines gives
the byte offset and line number of every data line, from which the byte ranges of P blocks of
(nearly) equal row counts follow. A block is a short list of ``(file, byte_start, byte_end,
first_line)`` segments; a worker memory-maps the file and parses only its bytes.

The parser (:func:`parse_libsvm_bytes`) is vectorized over the byte buffer: tokens, colons and
line numbers are found with numpy array operations, all numbers are converted by one call of
numpy's C text reader, and the structure is checked with array comparisons. Only when something
is wrong does a Python loop walk the tokens to name the offending one.
"""

from __future__ import annotations

import functools
import mmap
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from async_spark.data.blocks import Block, BlockSource
from async_spark.data.errors import DataError, rows_cannot_fill
from async_spark.data.limits import FeatureLimit

__all__ = [
    "LibsvmSource",
    "LibsvmIndex",
    "RawRows",
    "index_libsvm",
    "libsvm_source",
    "list_part_files",
    "parse_libsvm_bytes",
    "parse_libsvm_naive",
]

# Byte classes.
_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 11, 12, 13, 32]] = True
_NL, _HASH, _COLON, _SPACE = 10, 35, 58, 32
_COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".zip", ".lz4", ".snappy")
_CHUNK_BYTES = 16 * 2**20  # parse and index in pieces of about this size (bounded memory)


class RawRows(NamedTuple):
    """Rows parsed from LIBSVM text, before a feature count is fixed.

    ``indices`` are 0-based columns (file index - 1), sorted within each row.
    """

    labels: np.ndarray  # (rows,) float64
    indptr: np.ndarray  # (rows + 1,) int64
    indices: np.ndarray  # (nnz,) int64
    values: np.ndarray  # (nnz,) float64

    @property
    def max_column(self) -> int:
        """Largest 0-based column present, or -1 when there are no entries."""
        return int(self.indices.max()) if self.indices.size else -1


def _token_text(buf: np.ndarray, start: int, end: int) -> str:
    text = bytes(buf[start:end]).decode("utf-8", errors="replace")
    return text if len(text) <= 60 else text[:57] + "..."


def _fail(path: str, line: int, message: str) -> DataError:
    return DataError(f"{path}:{line}: {message}")


def parse_libsvm_bytes(
    data: bytes | bytearray | memoryview | np.ndarray,
    *,
    path: str = "<bytes>",
    first_line: int = 1,
    num_features: int | None = None,
    limit: FeatureLimit | None = None,
) -> RawRows:
    """Parse LIBSVM text into CSR components (vectorized over the bytes).

    Parameters
    ----------
    data : bytes-like or uint8 ndarray
        Whole lines of LIBSVM text (the last line may lack its newline).
    path, first_line : str, int
        File name and 1-based line number of the first line in ``data``; used in error messages.
    num_features : int or None
        When given, every index must satisfy ``1 <= index <= num_features``.
    limit : FeatureLimit or None
        Without ``num_features``: the largest index whose model still fits in memory
        (:mod:`async_spark.data.limits`); a larger one is refused with its line.

    Returns
    -------
    RawRows
        Labels, ``indptr``, 0-based ``indices`` and ``values`` of the data lines.

    Raises
    ------
    DataError
        ``"<path>:<line>: <what>"`` for the first bad token: a missing ``index:value`` colon, a
        non-integer or < 1 index, an index above ``num_features`` (or ``limit``), indices not strictly
        increasing, an unparsable number, a NaN/Inf label or value, a ``qid:`` token.
    """
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    if buf.dtype != np.uint8 or buf.ndim != 1:
        raise TypeError("data must be bytes or a 1-D uint8 array")
    empty = RawRows(
        np.zeros(0), np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
    )
    if buf.size == 0:
        return empty
    newlines = np.flatnonzero(buf == _NL)

    def line_of(pos: int | np.ndarray) -> np.ndarray:
        return first_line + np.searchsorted(newlines, pos, side="left")

    # Comments: blank out every byte from a '#' to the end of its line.
    hashes = np.flatnonzero(buf == _HASH)
    if hashes.size:
        buf = buf.copy()
        hash_line = np.searchsorted(newlines, hashes, side="left")
        first_hash = hashes[np.concatenate([[True], hash_line[1:] != hash_line[:-1]])]
        line_end = np.append(newlines, buf.size)[np.searchsorted(newlines, first_hash)]
        mask = np.zeros(buf.size + 1, dtype=np.int32)
        np.add.at(mask, first_hash, 1)
        np.add.at(mask, line_end, -1)
        buf[np.cumsum(mask[:-1]) > 0] = _SPACE

    ws = buf <= _SPACE  # all whitespace bytes are <= 32, all other valid ones above
    if np.count_nonzero(buf < 9) or np.count_nonzero((buf > 13) & (buf < _SPACE)):
        pos = int(np.flatnonzero((buf < 9) | ((buf > 13) & (buf < _SPACE)))[0])
        raise _fail(path, int(line_of(pos)), f"control byte {int(buf[pos])} in text")
    not_ws = ~ws
    starts = np.flatnonzero(not_ws & np.concatenate([[True], ws[:-1]]))
    if starts.size == 0:
        return empty
    ends = np.flatnonzero(not_ws & np.concatenate([ws[1:], [True]])) + 1
    tok_line = np.searchsorted(newlines, starts, side="left")
    is_label = np.concatenate([[True], tok_line[1:] != tok_line[:-1]])
    is_feat = ~is_label
    n_rows = int(is_label.sum())
    n_tok = starts.size

    def fail_token(t: int, message: str) -> DataError:
        tok = _token_text(buf, int(starts[t]), int(ends[t]))
        return _fail(path, int(line_of(starts[t])), f"{message} (token {tok!r})")

    # Structure: a label has no colon; a feature token has exactly one, not at either end.
    colons = np.flatnonzero(buf == _COLON)
    colon_tok = np.searchsorted(starts, colons, side="right") - 1
    n_colons = np.bincount(colon_tok, minlength=n_tok)
    bad = np.flatnonzero((is_label & (n_colons != 0)) | (is_feat & (n_colons != 1)))
    if bad.size:
        t = int(bad[0])
        if is_label[t]:
            tok = _token_text(buf, int(starts[t]), int(ends[t]))
            if tok.startswith("qid:"):
                raise fail_token(t, "qid tokens (ranking data) are not supported")
            raise fail_token(t, "line must start with a label, found 'index:value'")
        raise fail_token(t, "expected 'index:value'")
    feat_tok = np.flatnonzero(is_feat)
    colon_pos = np.empty(n_tok, dtype=np.int64)
    colon_pos[colon_tok] = colons
    fc = colon_pos[feat_tok]
    fs = starts[feat_tok]
    fe = ends[feat_tok]
    # A non-empty index and value (the index's integrality is checked after conversion).
    bad = np.flatnonzero((fc == fs) | (fc == fe - 1))
    if bad.size:
        t = int(feat_tok[bad[0]])
        tok = _token_text(buf, int(starts[t]), int(ends[t]))
        if tok.startswith("qid:"):
            raise fail_token(t, "qid tokens (ranking data) are not supported")
        raise fail_token(t, "index and value must be non-empty")

    # Numbers: one C-level conversion of the whole buffer with ':' turned into a separator.
    text = buf.copy()
    text[colons] = _SPACE
    expected = n_tok + feat_tok.size
    numbers: np.ndarray | None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            numbers = np.fromstring(text.tobytes(), dtype=np.float64, sep=" ")
    except (ValueError, DeprecationWarning):
        numbers = None
    if numbers is None or numbers.size != expected:
        _raise_first_unparsable(buf, starts, ends, colon_pos, is_label, fail_token)
        raise _fail(path, first_line, "could not parse numbers in this block")  # pragma: no cover
    per_tok = np.where(is_label, 1, 2)
    first_num = np.cumsum(per_tok) - per_tok
    labels = numbers[first_num[is_label]]
    idx_num = numbers[first_num[feat_tok]]
    values = numbers[first_num[feat_tok] + 1]

    bad = np.flatnonzero(~np.isfinite(labels))
    if bad.size:
        raise fail_token(int(np.flatnonzero(is_label)[bad[0]]), "label is NaN or infinite")
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise fail_token(int(feat_tok[bad[0]]), "value is NaN or infinite")
    bad = np.flatnonzero((idx_num != np.floor(idx_num)) | ~(np.abs(idx_num) < 2**62))
    if bad.size:
        raise fail_token(int(feat_tok[bad[0]]), "index must be a positive integer")
    indices = idx_num.astype(np.int64)
    bad = np.flatnonzero(indices < 1)
    if bad.size:
        raise fail_token(
            int(feat_tok[bad[0]]),
            "feature index must be >= 1 (indices are 1-based: scikit-learn's dump_svmlight_file "
            "writes them so with zero_based=False)",
        )
    if num_features is not None:
        bad = np.flatnonzero(indices > num_features)
        if bad.size:
            raise fail_token(
                int(feat_tok[bad[0]]),
                f"feature index {indices[bad[0]]} out of range [1, {num_features}]",
            )
    elif limit is not None:
        bad = np.flatnonzero(indices > limit.max_features)
        if bad.size:
            raise fail_token(
                int(feat_tok[bad[0]]), limit.message(f"feature index {indices[bad[0]]}")
            )
    row_of_tok = np.cumsum(is_label) - 1
    feat_row = row_of_tok[feat_tok]
    if indices.size > 1:
        same_row = feat_row[1:] == feat_row[:-1]
        bad = np.flatnonzero(same_row & (indices[1:] <= indices[:-1]))
        if bad.size:
            raise fail_token(
                int(feat_tok[bad[0] + 1]), "feature indices must be strictly increasing in a line"
            )
    counts = np.bincount(feat_row, minlength=n_rows)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return RawRows(labels, indptr, indices - 1, values)


def _raise_first_unparsable(buf, starts, ends, colon_pos, is_label, fail_token) -> None:  # type: ignore[no-untyped-def]
    """Slow path: find the first token whose number(s) do not parse and raise for it."""

    def parses(text: bytes) -> bool:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                return np.fromstring(text, dtype=np.float64, sep=" ").size == 1
        except (ValueError, DeprecationWarning):
            return False

    for t in range(starts.size):
        s, e = int(starts[t]), int(ends[t])
        if is_label[t]:
            if not parses(bytes(buf[s:e])):
                raise fail_token(t, "label is not a number")
        else:
            c = int(colon_pos[t])
            if bytes(buf[s:c]) == b"qid":
                raise fail_token(t, "qid tokens (ranking data) are not supported")
            if not parses(bytes(buf[s:c])):
                raise fail_token(t, "index must be a positive integer")
            if not parses(bytes(buf[c + 1 : e])):
                raise fail_token(t, "value is not a number")


def parse_libsvm_naive(data: bytes, *, num_features: int | None = None) -> RawRows:
    """Reference parser: a Python loop per line and token (for tests and speed comparison)."""
    labels: list[float] = []
    indptr = [0]
    indices: list[int] = []
    values: list[float] = []
    for line in data.decode().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        tokens = line.split()
        labels.append(float(tokens[0]))
        for tok in tokens[1:]:
            i, v = tok.split(":")
            j = int(i)
            if j < 1 or (num_features is not None and j > num_features):
                raise DataError(f"feature index {j} out of range")
            indices.append(j - 1)
            values.append(float(v))
        indptr.append(len(indices))
    return RawRows(
        np.asarray(labels, dtype=np.float64),
        np.asarray(indptr, dtype=np.int64),
        np.asarray(indices, dtype=np.int64),
        np.asarray(values, dtype=np.float64),
    )


# --- files and the driver-side index -----------------------------------------------------------


def list_part_files(path: str, *, suffix: str | None = None) -> list[str]:
    """The data files of ``path``: the file itself, or a directory's sorted part files.

    Hidden files and Spark/Hadoop markers (names starting with ``.`` or ``_``, such as
    ``_SUCCESS`` and ``.crc`` files) are skipped. With ``suffix``, only names ending with it.
    """
    if path.startswith("file://"):
        path = path[len("file://") :]
    if "://" in path:
        raise DataError(
            f"{path}: only local paths are supported (the path must be visible to every executor,"
            " e.g. a shared file system)"
        )
    if os.path.isdir(path):
        names = sorted(
            n
            for n in os.listdir(path)
            if not n.startswith((".", "_"))
            and os.path.isfile(os.path.join(path, n))
            and (suffix is None or n.endswith(suffix))
        )
        if not names:
            raise DataError(f"{path}: directory holds no data files")
        return [os.path.join(path, n) for n in names]
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file or directory")
    return [path]


@dataclass(frozen=True)
class _FileIndex:
    path: str
    size: int
    mtime_ns: int
    row_starts: np.ndarray  # byte offset of each data line
    row_lines: np.ndarray  # 1-based line number of each data line


def _index_file(path: str) -> _FileIndex:
    st = os.stat(path)
    if path.endswith(_COMPRESSED):
        raise DataError(f"{path}: compressed files are not supported; decompress it first")
    if st.st_size == 0:
        z = np.zeros(0, np.int64)
        return _FileIndex(path, 0, st.st_mtime_ns, z, z)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        buf = np.frombuffer(mm, dtype=np.uint8)
        try:
            nl_parts = []
            for lo in range(0, buf.size, _CHUNK_BYTES):
                nl_parts.append(np.flatnonzero(buf[lo : lo + _CHUNK_BYTES] == _NL) + lo)
            newlines = np.concatenate(nl_parts)
            line_starts = np.concatenate([[0], newlines + 1])
            line_starts = line_starts[line_starts < buf.size]
            first = buf[line_starts]
            data = ~(_WS[first] | (first == _HASH))
            # Lines starting with other whitespace: data iff something is left after the comment.
            odd = np.flatnonzero(_WS[first] & (first != _NL))
            for i in odd:
                s = int(line_starts[i])
                e = int(line_starts[i + 1]) if i + 1 < line_starts.size else buf.size
                data[i] = bool(bytes(buf[s:e]).split(b"#", 1)[0].strip())
            rows = np.flatnonzero(data)
            result = _FileIndex(
                path, int(st.st_size), st.st_mtime_ns, line_starts[rows].astype(np.int64), rows + 1
            )
        finally:
            del buf
    return result


@dataclass(frozen=True)
class LibsvmIndex:
    """Driver-side index of LIBSVM files: data rows per file and the block segments."""

    files: tuple[tuple[str, int, int], ...]  # (path, size, mtime_ns)
    segments: tuple[tuple[tuple[int, int, int, int, int], ...], ...]
    # per block: (file index, byte start, byte end, first line, rows)

    @property
    def rows_per_block(self) -> tuple[int, ...]:
        return tuple(sum(s[4] for s in block) for block in self.segments)


def index_libsvm(path: str | Sequence[str], num_blocks: int) -> LibsvmIndex:
    """Index LIBSVM file(s) and cut them into ``num_blocks`` row ranges of near-equal size.

    Block ``p`` holds global rows ``[r_p, r_{p+1})`` with the boundaries of
    ``numpy.array_split`` (the first ``n mod P`` blocks get one extra row).

    Raises
    ------
    DataError
        No data rows at all, a compressed file, a missing path, or fewer rows than blocks.
    """
    paths = list_part_files(path) if isinstance(path, str) else list(path)
    if not isinstance(num_blocks, int | np.integer) or num_blocks < 1:
        raise ValueError(f"num_blocks must be an integer >= 1, got {num_blocks!r}")
    idx = [_index_file(p) for p in paths]
    counts = np.array([len(f.row_starts) for f in idx], dtype=np.int64)
    n = int(counts.sum())
    if n == 0:
        raise DataError(f"{', '.join(paths)}: empty input (no data lines)")
    if n < num_blocks:
        raise rows_cannot_fill(paths[0], n, num_blocks)
    bounds = np.array([len(a) for a in np.array_split(np.arange(n), num_blocks)])
    bounds = np.concatenate([[0], np.cumsum(bounds)])
    file_first = np.concatenate([[0], np.cumsum(counts)])
    segments = []
    for p in range(num_blocks):
        lo, hi = int(bounds[p]), int(bounds[p + 1])
        segs = []
        for fi, f in enumerate(idx):
            a = max(lo, int(file_first[fi])) - int(file_first[fi])
            b = min(hi, int(file_first[fi + 1])) - int(file_first[fi])
            if a >= b:
                continue
            start = int(f.row_starts[a])
            end = int(f.row_starts[b]) if b < len(f.row_starts) else f.size
            segs.append((fi, start, end, int(f.row_lines[a]), b - a))
        segments.append(tuple(segs))
    return LibsvmIndex(tuple((f.path, f.size, f.mtime_ns) for f in idx), tuple(segments))


def _parse_range(
    path: str,
    start: int,
    end: int,
    first_line: int,
    num_features: int | None,
    limit: FeatureLimit | None = None,
) -> RawRows:
    """Parse bytes ``[start, end)`` of ``path`` in line-aligned chunks of bounded size."""
    parts: list[RawRows] = []
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        buf = np.frombuffer(mm, dtype=np.uint8)
        try:
            pos, line = start, first_line
            while pos < end:
                stop = min(end, pos + _CHUNK_BYTES)
                if stop < end:
                    nl = np.flatnonzero(buf[stop:end] == _NL)
                    stop = stop + int(nl[0]) + 1 if nl.size else end
                chunk = np.array(buf[pos:stop])  # copy: the parser may modify it
                parts.append(
                    parse_libsvm_bytes(
                        chunk, path=path, first_line=line, num_features=num_features, limit=limit
                    )
                )
                line += int(np.count_nonzero(chunk == _NL))
                pos = stop
        finally:
            del buf
    if len(parts) == 1:
        return parts[0]
    offsets = np.cumsum([0] + [p.indices.size for p in parts[:-1]])
    return RawRows(
        np.concatenate([p.labels for p in parts]),
        np.concatenate([[0]] + [p.indptr[1:] + o for p, o in zip(parts, offsets, strict=True)]),
        np.concatenate([p.indices for p in parts]),
        np.concatenate([p.values for p in parts]),
    )


@dataclass(frozen=True)
class LibsvmSource(BlockSource):
    """Blocks of LIBSVM file(s): each worker parses only its block's byte ranges.

    Holds plain values only (paths, sizes, byte offsets), so it pickles small. With
    ``num_features=None`` a block's width is its largest index (used by the driver's scan to
    infer the feature count), and an index above ``limit`` is refused with its line;
    :func:`libsvm_source` returns a source with the count fixed.
    """

    files: tuple[tuple[str, int, int], ...]
    segments: tuple[tuple[tuple[int, int, int, int, int], ...], ...]
    num_features: int | None = None
    dense: bool = False
    limit: FeatureLimit | None = None

    @functools.cached_property
    def dataset_id(self) -> str:  # hashed once per instance (asked on every task)
        import hashlib

        key = repr(("libsvm", self.files, self.segments, self.num_features, self.dense))
        return "libsvm-" + hashlib.blake2b(key.encode(), digest_size=12).hexdigest()

    @property
    def num_blocks(self) -> int:
        return len(self.segments)

    def row_offset(self, index: int) -> int:
        return sum(s[4] for blk in self.segments[:index] for s in blk)

    def load_raw(self, index: int) -> RawRows:
        """Parse block ``index`` into CSR components (no feature count needed)."""
        parts = []
        for fi, start, end, first_line, rows in self.segments[index]:
            path, size, _ = self.files[fi]
            actual = os.stat(path).st_size
            if actual != size:
                raise DataError(
                    f"{path}: file changed since it was indexed ({size} -> {actual} bytes)"
                )
            raw = _parse_range(path, start, end, first_line, self.num_features, self.limit)
            if raw.labels.size != rows:
                raise DataError(
                    f"{path}:{first_line}: expected {rows} rows in this block, parsed"
                    f" {raw.labels.size} (file changed since it was indexed?)"
                )
            parts.append(raw)
        if len(parts) == 1:
            return parts[0]
        offsets = np.cumsum([0] + [p.indices.size for p in parts[:-1]])
        return RawRows(
            np.concatenate([p.labels for p in parts]),
            np.concatenate([[0]] + [p.indptr[1:] + o for p, o in zip(parts, offsets, strict=True)]),
            np.concatenate([p.indices for p in parts]),
            np.concatenate([p.values for p in parts]),
        )

    def load(self, index: int) -> Block:
        raw = self.load_raw(index)
        d = self.num_features if self.num_features is not None else raw.max_column + 1
        X = sp.csr_matrix(
            (raw.values, raw.indices.astype(np.int32 if d < 2**31 else np.int64), raw.indptr),
            shape=(raw.labels.size, d),
        )
        X.has_sorted_indices = True
        return Block(X.toarray() if self.dense else X, raw.labels, self.row_offset(index))


def libsvm_source(
    path: str | Sequence[str],
    num_blocks: int,
    *,
    num_features: int | None = None,
    dense: bool = False,
    limit: FeatureLimit | None = None,
) -> LibsvmSource:
    """Index ``path`` and return its block source (feature count possibly still unknown).

    Use :func:`async_spark.data.open_dataset` for the full path (scan, inference of the feature
    count, label checks, descriptor).
    """
    if num_features is not None and (
        not isinstance(num_features, int | np.integer) or num_features < 1
    ):
        raise ValueError(f"num_features must be an integer >= 1 or None, got {num_features!r}")
    index = index_libsvm(path, num_blocks)
    return LibsvmSource(
        index.files,
        index.segments,
        None if num_features is None else int(num_features),
        bool(dense),
        limit,
    )

"""Append-only records stored column-wise: a long run's per-result history in bounded bytes.

A run on the resident transport makes hundreds to thousands of updates a second, and keeps one
record of each (the engine's trajectory, the solver's trace). As Python tuples and dicts those
cost 150-300 bytes a record (``benchmarks/soak.py --transport resident``: the driver's Python heap
grew 0.37 KB per update, 63 MB over 200 000 updates); here each field is one machine number in an
:class:`array.array` (8 bytes; a bool 1), strings are interned, and ``None`` has a sentinel.
Records are rebuilt as tuples when read, with the same values and types they were appended with.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["Columns"]

_NONE_INT = -(2**63)  # the sentinel of None in an integer column


class Columns:
    """Rows of fixed fields, one typed column each.

    ``kinds``: one letter per field: ``f`` float, ``i`` integer, ``n`` integer or None, ``b``
    bool, ``s`` str (interned).
    """

    _CODES = {"f": "d", "i": "q", "n": "q", "b": "b", "s": "l"}

    def __init__(self, kinds: str, rows: Iterable[tuple[Any, ...]] = ()) -> None:
        if not kinds or any(k not in self._CODES for k in kinds):
            raise ValueError(f"kinds must be letters of {''.join(self._CODES)}, got {kinds!r}")
        self.kinds = kinds
        self._columns = [array(self._CODES[k]) for k in kinds]
        self._strings: list[str] = []
        self._index: dict[str, int] = {}
        self.extend(rows)

    def append(self, row: tuple[Any, ...]) -> None:
        if len(row) != len(self.kinds):
            raise ValueError(f"a row needs {len(self.kinds)} fields, got {len(row)}")
        done = 0
        try:
            for column, kind, value in zip(self._columns, self.kinds, row, strict=True):
                if kind == "n":
                    value = _NONE_INT if value is None else value
                elif kind == "s":
                    value = self._intern(value)
                column.append(value)
                done += 1
        except (TypeError, OverflowError):
            for column in self._columns[:done]:  # a refused row leaves no partial record
                column.pop()
            raise

    def extend(self, rows: Iterable[tuple[Any, ...]]) -> None:
        for row in rows:
            self.append(row)

    def _intern(self, text: str) -> int:
        index = self._index.get(text)
        if index is None:
            index = self._index[text] = len(self._strings)
            self._strings.append(text)
        return index

    def __len__(self) -> int:
        return len(self._columns[0])

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        decoded = [
            self._decode(column, kind)
            for column, kind in zip(self._columns, self.kinds, strict=True)
        ]
        return zip(*decoded, strict=True)

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        n = len(self)
        if not -n <= i < n:
            raise IndexError("record index out of range")
        i %= n
        return tuple(
            self._decode(column[i : i + 1], kind)[0]
            for column, kind in zip(self._columns, self.kinds, strict=True)
        )

    def _decode(self, column: array, kind: str) -> list[Any]:
        if kind == "n":
            return [None if v == _NONE_INT else v for v in column]
        if kind == "b":
            return [bool(v) for v in column]
        if kind == "s":
            strings = self._strings
            return [strings[v] for v in column]
        return column.tolist()

    @property
    def nbytes(self) -> int:
        """Bytes the columns hold (not counting the interned strings)."""
        return sum(c.itemsize * len(c) for c in self._columns)

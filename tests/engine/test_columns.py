"""Column-wise records: every value comes back as it went in, in a fraction of a tuple's bytes."""

from __future__ import annotations

import math
import tracemalloc

import pytest

from async_spark.engine.columns import Columns

ROWS = [
    (0.5, 1, 2, None, math.nan, True, "exec-1"),
    (1.25, 2**40, 0, 3, 0.125, False, "exec-2"),
    (2.0, -5, 1, 0, -0.0, True, "exec-1"),
    (math.inf, 0, 2**62, -1, 1e308, False, ""),
]


def test_rows_come_back_with_their_values_and_types():
    cols = Columns("fiinfbs", ROWS)
    assert len(cols) == 4
    assert math.isnan(cols[0][4])  # NaN != NaN: compare the others by value
    assert list(cols)[1:] == ROWS[1:] and cols[0][:4] + cols[0][5:] == ROWS[0][:4] + ROWS[0][5:]
    for i, row in enumerate(ROWS[1:], start=1):
        assert cols[i] == row and cols[i - 4] == row
        assert [type(v) for v in cols[i]] == [type(v) for v in row]
    assert math.copysign(1.0, cols[2][4]) == -1.0  # -0.0 stays negative
    with pytest.raises(IndexError):
        cols[4]
    cols.append(ROWS[0])
    assert list(cols)[-1][:4] == ROWS[0][:4] and len(cols) == 5


def test_bad_rows_and_kinds_are_refused():
    with pytest.raises(ValueError, match="kinds must be letters"):
        Columns("fx")
    cols = Columns("fi")
    with pytest.raises(ValueError, match="a row needs 2 fields"):
        cols.append((1.0,))
    with pytest.raises(TypeError):
        cols.append((1.0, "not an int"))
    assert len(cols) == 0 and list(cols) == []  # no half-appended row


def test_a_long_history_costs_about_its_machine_numbers():
    # a tuple per record (the engine's trajectory before) took ~150 bytes; columns ~41
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cols = Columns("fiiibs")
        for i in range(50_000):
            cols.append((i * 1e-3, 1000 + i, 3, i % 8, True, "127.0.0.1:4242"))
        per_record = (tracemalloc.get_traced_memory()[0] - before) / len(cols)
    finally:
        tracemalloc.stop()
    assert per_record < 50, per_record
    assert cols.nbytes == 50_000 * (5 * 8 + 1)

"""Errors raised for bad input data."""

from __future__ import annotations

__all__ = ["DataError"]


class DataError(ValueError):
    """Input data that cannot be used: malformed, out of range, non-finite or inconsistent.

    The message always names where the problem is: the file and 1-based line number (text
    formats), the file and column (Parquet), or the array (in-memory input).
    """

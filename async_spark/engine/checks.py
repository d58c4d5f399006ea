"""The engine's option checks: one ``ValueError`` that names the option and its allowed range."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["check_int", "check_number"]


def check_number(name: str, value: Any, *, low: float = 0.0, strict: bool = False) -> float:
    """``value`` as a finite float ``>= low`` (``> low`` when ``strict``); bools are refused."""
    if isinstance(value, bool):
        ok = False
    else:
        try:
            v = float(value)
        except (TypeError, ValueError):
            v = math.nan
        ok = math.isfinite(v) and (v > low if strict else v >= low)
    if not ok:
        bound = f"> {low:g}" if strict else f">= {low:g}"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return v


def check_int(name: str, value: Any, low: int) -> int:
    """``value`` as an int ``>= low``; bools are refused."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value

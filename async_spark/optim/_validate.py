"""Shared validation for the update rules, parameter choices and the theory code.

Every check raises one :class:`ValueError` whose message names the parameter and the accepted
range, e.g. ``"beta must be in [0, 1), got 1.2"``. Hyperparameters of the update rules may be a
float or a callable of the step count; :func:`check_hyper` validates a float at once and
:func:`resolve` validates a schedule's value at the step where it is used.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "Hyper",
    "Check",
    "check_finite",
    "check_positive",
    "check_nonnegative",
    "check_momentum",
    "check_curvature",
    "check_choice",
    "check_hyper",
    "resolve",
    "check_interval",
    "as_float_array",
    "check_fraction",
    "check_problem_size",
]

#: A hyperparameter: a number, or a callable ``step -> number`` (a schedule).
Hyper = float | Callable[[int], float]
#: A scalar check: ``check(name, value) -> float`` that raises ``ValueError``.
Check = Callable[[str, Any], float]


def _as_float(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}") from None
    if not math.isfinite(out):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return out


def check_finite(name: str, value: Any) -> float:
    """Return ``value`` as a finite float, else raise ``ValueError`` naming ``name``."""
    return _as_float(name, value)


def check_positive(name: str, value: Any) -> float:
    """``value`` in (0, inf)."""
    out = _as_float(name, value)
    if out <= 0.0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return out


def check_nonnegative(name: str, value: Any) -> float:
    """``value`` in [0, inf)."""
    out = _as_float(name, value)
    if out < 0.0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return out


def check_momentum(name: str, value: Any) -> float:
    """A momentum parameter: ``value`` in [0, 1)."""
    out = _as_float(name, value)
    if not 0.0 <= out < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return out


def check_interval(name: str, value: Any, lo: float, hi: float) -> float:
    """``value`` in the closed interval [lo, hi]."""
    out = _as_float(name, value)
    if not lo <= out <= hi:
        raise ValueError(f"{name} must be in [{lo!r}, {hi!r}], got {value!r}")
    return out


def check_curvature(mu: Any, L: Any) -> tuple[float, float]:
    """Strong convexity and smoothness constants: ``0 < mu <= L < inf``."""
    m = check_positive("mu", mu)
    ll = check_positive("L", L)
    if ll < m:
        raise ValueError(f"L must be >= mu (L >= {m!r}), got L={L!r}")
    return m, ll


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """``value`` one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def check_hyper(name: str, value: Any, check: Check) -> Hyper:
    """Validate a hyperparameter that may be a schedule.

    A number is checked now and returned as a float; a callable is returned as is and checked by
    :func:`resolve` at every step where it is evaluated.
    """
    if callable(value):
        return value  # type: ignore[no-any-return]
    return check(name, value)


def resolve(name: str, value: Hyper, step: int, check: Check) -> float:
    """The value of hyperparameter ``value`` at ``step``, validated with ``check``."""
    if callable(value):
        return check(f"{name}({step})", value(step))
    return float(value)


def as_float_array(name: str, value: Any) -> np.ndarray:
    """A finite floating array (float32 stays float32; integers become float64)."""
    arr = np.asarray(value)
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    return arr


def check_fraction(value: Any, name: str = "batch_fraction") -> float:
    """A sampling fraction in (0, 1]."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    try:
        b = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be in (0, 1], got {value!r}") from None
    if not (math.isfinite(b) and 0.0 < b <= 1.0):
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return b


def _is_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | np.integer)


def check_problem_size(n: Any, num_blocks: Any) -> tuple[int, int]:
    """``n`` rows (an integer >= 1) split into ``num_blocks`` blocks (an integer in [1, n])."""
    if not _is_int(n) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if not _is_int(num_blocks) or not 1 <= num_blocks <= n:
        raise ValueError(f"num_blocks must be an integer in [1, n={n}], got {num_blocks!r}")
    return int(n), int(num_blocks)

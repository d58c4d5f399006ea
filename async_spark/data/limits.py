"""How large a model the data may ask for: refused before anything of that size is allocated.

The linear models keep a dense float64 parameter vector of ``K (d + 1)`` entries (K outputs: 1,
or the number of classes for softmax), whatever the layout of the data; the driver holds several
copies of it (model versions, optimizer state, gradients) and every task one more. So a feature
index or dimension whose model alone would not fit a fraction of the memory is refused while the
data is read, with the file and line that asked for it, instead of ending in a ``MemoryError``
(or the machine's OOM killer) once the run starts.

The limit is :data:`MODEL_MEMORY_FRACTION` of this machine's physical memory, or the byte count
in the environment variable :data:`LIMIT_ENV` (``ASYNC_SPARK_MAX_MODEL_BYTES``: an integer, or a
number with a ``k``/``m``/``g``/``t`` suffix in binary units, e.g. ``64g``).
"""

from __future__ import annotations

import os
from typing import NamedTuple

__all__ = [
    "LIMIT_ENV",
    "MODEL_MEMORY_FRACTION",
    "FeatureLimit",
    "feature_limit",
    "max_model_bytes",
]

LIMIT_ENV = "ASYNC_SPARK_MAX_MODEL_BYTES"
MODEL_MEMORY_FRACTION = 1 / 8
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def _physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not POSIX: assume a small machine
        return 8 * 2**30


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def max_model_bytes() -> tuple[int, str]:
    """The largest model in bytes, and where that number comes from (for messages).

    Raises
    ------
    ValueError
        ``ASYNC_SPARK_MAX_MODEL_BYTES`` is set but is not a positive size.
    """
    raw = os.environ.get(LIMIT_ENV, "").strip()
    if raw:
        number, unit = raw.rstrip("kKmMgGtTbB"), raw[len(raw.rstrip("kKmMgGtTbB")) :]
        unit = unit.lower().rstrip("b")
        try:
            value = float(number) * _UNITS[unit]
        except (ValueError, KeyError):
            value = float("nan")
        if not value >= 1:
            raise ValueError(f"{LIMIT_ENV} must be a size in bytes such as 4g, got {raw!r}")
        return int(value), f"{_gib(value)} ({LIMIT_ENV})"
    total = _physical_memory()
    value = int(total * MODEL_MEMORY_FRACTION)
    share = round(1 / MODEL_MEMORY_FRACTION)
    return value, f"{_gib(value)}, 1/{share} of this machine's {_gib(total)} (set {LIMIT_ENV})"


class FeatureLimit(NamedTuple):
    """The largest feature count d for K outputs, and a sentence explaining it."""

    max_features: int
    reason: str

    def message(self, what: str) -> str:
        """``what`` (e.g. "feature index 99999999999") refused against this limit, one line."""
        return f"{what} is above the limit of {self.max_features} features: {self.reason}"


def feature_limit(outputs: int = 1) -> FeatureLimit:
    """The largest d whose dense float64 model of ``outputs (d + 1)`` entries fits the limit."""
    nbytes, source = max_model_bytes()
    outputs = max(1, int(outputs))
    d_max = max(1, nbytes // (8 * outputs) - 1)
    shape = "d + 1" if outputs == 1 else f"{outputs} x (d + 1)"
    return FeatureLimit(d_max, f"the model ({shape} float64) must fit in {source}")

"""Which model versions each resident worker holds, as the driver sees it, and how the next one
travels: nothing (``held``), a bit-exact sparse delta against the newest version the worker holds
(``delta``, when smaller), or the whole model (``full``).

The driver mirrors each worker's store (the same rule as :mod:`.resident_worker`'s: the newest
``max_versions``, least recently used out first) in the connection's ``held`` ordered dict, and
keeps one copy of every version some worker holds that a delta could be computed against: the
base of a delta must be what the worker holds even if the caller later changes its array in place.
A copy is kept while at least one worker holds its version (reference counted).

Not thread-safe on its own: the resident transport calls it under its lock, except
:meth:`VersionLedger.part`'s delta, which is computed outside it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from .resident_worker import model_delta
from .wire import DTYPES

__all__ = ["DELTA_MIN_SIZE", "VersionLedger"]

_DELTA_DTYPES = frozenset(DTYPES.values())
DELTA_MIN_SIZE = 1024  # smaller models always travel in full (a delta would save little)

Held = OrderedDict  # version -> None, oldest first: one worker's versions


class VersionLedger:
    """The driver copies that deltas are computed against, and the tickets' model counts."""

    def __init__(self, max_versions: int) -> None:
        self.max_versions = max_versions
        self._copies: dict[int, Any] = {}  # version -> driver copy, while a worker holds it
        self._refs: dict[int, int] = {}  # version -> workers holding it
        self.counts = {"full": 0, "delta": 0, "held": 0}  # tickets by how their model went

    @property
    def copies_kept(self) -> int:
        """Versions copied on the driver (small models are tracked but not copied)."""
        return sum(1 for copy in self._copies.values() if copy is not None)

    def base(self, held: Held[int, None], version: int) -> tuple[bool, int | None, Any]:
        """(whether the worker holds ``version``, its newest version, the copy of that one):
        the part read under the transport's lock."""
        if version in held:
            return True, None, None
        if not held:
            return False, None, None
        newest = next(reversed(held))
        return False, newest, self._copies.get(newest)

    @staticmethod
    def part(
        model: Any, base_version: int | None, base: Any, delta: Callable[..., Any] = model_delta
    ) -> tuple[str, int | None, Any]:
        """How a version the worker does not hold travels: ``("delta", base_version, delta)``
        when the model is a large enough array of a wire dtype, a copy of the worker's newest
        version exists with its shape and dtype and the delta is smaller; else ``("full", None,
        model)``."""
        if (
            base_version is not None
            and isinstance(model, np.ndarray)
            and model.dtype in _DELTA_DTYPES
            and model.size >= DELTA_MIN_SIZE
            and isinstance(base, np.ndarray)
            and base.shape == model.shape
            and base.dtype == model.dtype
        ):
            d = delta(base, model)
            if d is not None:
                return "delta", base_version, d
        return "full", None, model

    def hold(
        self, held: Held[int, None], version: int, model: Any, mode: str, live: bool = True
    ) -> None:
        """Count a ticket whose model went as ``mode`` and, while its worker's connection is
        ``live``, record that the worker now holds ``version`` (its oldest versions beyond
        ``max_versions`` dropped, as the worker does)."""
        self.counts[mode] += 1
        if not live:
            return
        if mode == "held":
            held.move_to_end(version)
            return
        held[version] = None
        if version not in self._copies:
            self._copies[version] = (
                np.array(model, copy=True)
                if isinstance(model, np.ndarray) and model.size >= DELTA_MIN_SIZE
                else None
            )
        self._refs[version] = self._refs.get(version, 0) + 1
        while len(held) > self.max_versions:
            old, _ = held.popitem(last=False)
            self._unref(old)

    def release(self, held: Held[int, None]) -> None:
        """A worker is gone: its versions no longer keep their copies."""
        for version in held:
            self._unref(version)
        held.clear()

    def clear(self) -> None:
        self._copies.clear()
        self._refs.clear()

    def _unref(self, version: int) -> None:
        left = self._refs[version] - 1
        if left <= 0:
            del self._refs[version]
            self._copies.pop(version, None)
        else:
            self._refs[version] = left

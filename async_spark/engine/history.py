"""History store: model versions as refcounted handles (Spark broadcasts on a cluster).

ASYNC's broadcaster ships each model version once and lets a task read an *older* version by index.
Here every version the driver publishes is kept as a plain array; its shipping handle (a broadcast)
is created lazily, the first time a task needs that version — in an asynchronous run many versions
are never read by any task — and destroyed as soon as no task in flight holds it, unless it is the
current version or pinned by an algorithm that must read it again. The number of live handles is
therefore bounded by (tasks in flight + pinned + 1) over a run of any length.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Protocol

__all__ = ["HistoryStore", "InlineRef", "Publisher", "InlinePublisher"]


class Publisher(Protocol):
    """Turns a model into a handle that a task closure can carry; ``handle.value`` is the model."""

    def create(self, model: Any) -> Any: ...

    def destroy(self, handle: Any) -> None: ...


class InlineRef:
    """A handle that carries the model itself (inside the task closure)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self) -> tuple:
        return (InlineRef, (self.value,))


class InlinePublisher:
    """Ships the model inside every task closure (good for small models and in-process runs)."""

    def create(self, model: Any) -> InlineRef:
        return InlineRef(model)

    def destroy(self, handle: Any) -> None:
        return None


class HistoryStore:
    """Versioned models with refcounted, lazily created shipping handles.

    Parameters
    ----------
    publisher : Publisher
        Creates and destroys handles (e.g. Spark broadcasts).
    """

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher
        self._lock = threading.Lock()
        self._models: dict[int, Any] = {}
        self._handles: dict[int, Any] = {}
        self._refs: Counter[int] = Counter()
        self._pins: Counter[int] = Counter()
        self.current: int | None = None
        self.created = 0
        self.destroyed = 0

    def publish(self, version: int, model: Any) -> None:
        """Make ``model`` the current version; older unreferenced versions are dropped."""
        with self._lock:
            if self.current is not None and version <= self.current:
                raise ValueError(f"version {version} is not newer than current {self.current}")
            previous = self.current
            self._models[version] = model
            self.current = version
            if previous is not None:
                self._collect_locked(previous)

    def model(self, version: int) -> Any:
        """The driver's copy of a version still held (current, pinned or in use)."""
        with self._lock:
            if version not in self._models:
                raise KeyError(f"version {version} is no longer held (pin it to keep it)")
            return self._models[version]

    def acquire(self, version: int) -> Any:
        """A handle to ``version`` for one task; pair with :meth:`release`."""
        with self._lock:
            if version not in self._models:
                raise KeyError(f"version {version} is no longer held")
            handle = self._handles.get(version)
            if handle is None:
                handle = self._publisher.create(self._models[version])
                self._handles[version] = handle
                self.created += 1
            self._refs[version] = self._refs.get(version, 0) + 1
            return handle

    def release(self, version: int) -> None:
        with self._lock:
            refs = self._refs.get(version, 0)
            if refs <= 0:
                raise ValueError(f"release of version {version} without acquire")
            self._refs[version] = refs - 1
            if refs == 1:
                self._collect_locked(version)

    def pin(self, version: int) -> None:
        """Keep ``version`` (model and handle) until :meth:`unpin`."""
        with self._lock:
            if version not in self._models:
                raise KeyError(f"version {version} is no longer held")
            self._pins[version] += 1

    def unpin(self, version: int) -> None:
        with self._lock:
            if self._pins[version] <= 0:
                raise ValueError(f"unpin of version {version} that is not pinned")
            self._pins[version] -= 1
            self._collect_locked(version)

    def _collect_locked(self, version: int) -> None:
        # (dict.get: a Counter's missing key costs a Python-level __missing__ call)
        if version == self.current or self._refs.get(version, 0) > 0 or self._pins.get(version, 0):
            return
        self._refs.pop(version, None)
        self._pins.pop(version, None)
        self._models.pop(version, None)
        handle = self._handles.pop(version, None)
        if handle is not None:
            self._publisher.destroy(handle)
            self.destroyed += 1

    @property
    def live_handles(self) -> int:
        with self._lock:
            return len(self._handles)

    @property
    def held_versions(self) -> list[int]:
        with self._lock:
            return sorted(self._models)

    def close(self) -> None:
        """Destroy every handle and forget every version."""
        with self._lock:
            for handle in self._handles.values():
                self._publisher.destroy(handle)
                self.destroyed += 1
            self._handles.clear()
            self._models.clear()
            self._refs.clear()
            self._pins.clear()
            self.current = None

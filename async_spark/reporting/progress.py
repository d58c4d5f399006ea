"""A progress bar for training runs, in a terminal and in a Jupyter notebook.

The bar counts updates when the run has ``--max-updates`` and seconds of training when it only
has a ``--time-budget`` (the updates then show beside it). It uses tqdm: the widget bar in a
notebook kernel when ``ipywidgets`` is installed, text on stderr otherwise. Off a terminal (a
log file of a ``spark-submit`` job) it redraws at most every few seconds so logs stay readable.

A bar costs one comparison per update between redraws; the text it shows (staleness, rejected
results) is computed only when it redraws.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["TrainingProgress", "in_notebook"]

TERMINAL_REFRESH = 0.25  # seconds between redraws on a terminal or in a notebook
LOG_REFRESH = 5.0  # ... and in a log file, where every redraw is a new line


def in_notebook() -> bool:
    """True inside a Jupyter kernel (the only place tqdm's widget bar can render)."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()  # type: ignore[attr-defined]
    except Exception:
        return False
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def _bar_class(file: TextIO) -> Any:
    """The tqdm class for where the bar is seen, or :class:`_LogLines` off a terminal."""
    if in_notebook():
        try:
            import ipywidgets  # noqa: F401
            from tqdm.notebook import tqdm as notebook_tqdm

            return notebook_tqdm
        except ImportError:
            pass  # a text bar in the cell's stderr, which notebooks redraw on "\r"
    elif not getattr(file, "isatty", lambda: False)():
        return _LogLines
    from tqdm.std import tqdm

    return tqdm


class _LogLines:
    """The bar's interface as one line per redraw: a log file keeps every state readable."""

    def __init__(
        self, *, total: float | None, initial: float, desc: str, unit: str, file: TextIO, **_: Any
    ) -> None:
        self.total, self.n, self.desc, self.unit, self.file = total, initial, desc, unit, file
        self.postfix: dict[str, Any] = {}
        self._t0 = time.monotonic()

    def set_postfix(self, postfix: dict[str, Any], refresh: bool = False) -> None:
        self.postfix = dict(postfix)

    def refresh(self) -> None:
        done = f"{self.n:g}/{self.total:g}" if self.total is not None else f"{self.n:g}"
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        extra = " ".join(f"{k}={v}" for k, v in self.postfix.items())
        elapsed = time.monotonic() - self._t0
        self.file.write(f"{self.desc}: {done}{self.unit}{share} [{elapsed:.0f}s] {extra}\n")
        self.file.flush()

    def close(self) -> None:
        pass


class TrainingProgress:
    """A bar over updates (``max_updates``) or training seconds (``time_budget``).

    Parameters
    ----------
    name : str
        Shown at the left of the bar (the run's name).
    max_updates, time_budget : optional
        What ends the run; the first one given sets the bar's total.
    initial_updates, initial_seconds : resumed runs start the bar where they stopped.
    file : TextIO, optional
        Where a text bar goes (default stderr).
    clock : callable, optional
        Wall clock for throttling redraws (tests inject one).
    """

    def __init__(
        self,
        name: str,
        *,
        max_updates: int | None = None,
        time_budget: float | None = None,
        initial_updates: int = 0,
        initial_seconds: float = 0.0,
        file: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        out = sys.stderr if file is None else file
        bar_cls = _bar_class(out)
        in_place = bar_cls is not _LogLines
        self.by_updates = max_updates is not None or time_budget is None
        self._clock = clock
        self._interval = TERMINAL_REFRESH if in_place else LOG_REFRESH
        self._in_place = in_place
        self._next_draw = 0.0
        self.updates = initial_updates
        self.seconds = initial_seconds
        total: float | None
        initial: float
        if self.by_updates:
            total, unit, initial = max_updates, " upd", initial_updates
        else:
            total, unit, initial = time_budget, " s", round(initial_seconds, 1)
        self.bar = bar_cls(
            total=total,
            initial=initial,
            desc=name,
            unit=unit,
            file=None if bar_cls.__module__ == "tqdm.notebook" else out,
            dynamic_ncols=True,
            mininterval=0,  # redraws are throttled here, on the caller's clock
            leave=True,
            bar_format=None
            if self.by_updates
            else "{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.0f} s [{elapsed}{postfix}]",
        )
        self.closed = False

    def update(
        self, updates: int, seconds: float, details: Callable[[], dict[str, Any]] | None = None
    ) -> None:
        """Record progress; ``details()`` (text beside the bar) is called only on a redraw."""
        self.updates, self.seconds = updates, seconds
        now = self._clock()
        if now < self._next_draw or self.closed:
            return
        self._next_draw = now + self._interval
        self._draw(details)

    def _draw(self, details: Callable[[], dict[str, Any]] | None, refresh: bool = True) -> None:
        position = self.updates if self.by_updates else round(self.seconds, 1)
        total = self.bar.total
        if total is not None:
            position = min(position, total)
        self.bar.n = position
        postfix: dict[str, Any] = {}
        if not self.by_updates:
            postfix["updates"] = self.updates
        if self.seconds > 0 and not (self.by_updates and self._in_place):
            postfix["upd/s"] = f"{self.updates / self.seconds:.1f}"  # tqdm shows its own rate
        if details is not None:
            postfix.update(details())
        self.bar.set_postfix(postfix, refresh=False)
        if refresh:
            self.bar.refresh()

    def close(self, details: Callable[[], dict[str, Any]] | None = None) -> None:
        """Draw the final state and release the bar (idempotent)."""
        if self.closed:
            return
        self._draw(details, refresh=not self._in_place)  # tqdm's close() draws the last state
        self.bar.close()
        self.closed = True

    def __enter__(self) -> TrainingProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

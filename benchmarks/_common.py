"""Helpers shared by the benchmark scripts (not a benchmark itself).

- :func:`median_range` and :func:`format_median_range`: a figure that varies across runs, as its
  median with the [min, max] of the runs;
- :func:`spark_session`: a session on 127.0.0.1 with the UI off, through
  :func:`async_spark.engine.build_session`;
- :func:`print_table`: fixed-width tables;
- :func:`executor_pids` and :class:`Throttle`: find this application's executor JVMs (the
  ``CoarseGrainedExecutorBackend`` processes of a ``local-cluster`` or standalone cluster on this
  machine) and slow one of them, with its Python workers, by a SIGSTOP/SIGCONT duty cycle run
  from a driver thread; every stopped process is continued again when the throttle ends.
"""

from __future__ import annotations

import math
import os
import signal
import statistics
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any


def median_range(values: Iterable[float | None]) -> tuple[float, float, float, int]:
    """``(median, min, max, n)`` of the finite numbers among ``values``.

    ``None``, nan and infinities (a run without the figure, e.g. no common target) are left out,
    and ``n`` counts the numbers kept; with none kept the answer is ``(nan, nan, nan, 0)``.
    """
    kept = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not kept:
        return math.nan, math.nan, math.nan, 0
    return statistics.median(kept), min(kept), max(kept), len(kept)


def format_median_range(values: Iterable[float | None], spec: str = ".2f") -> str:
    """``"median [min, max]"`` of ``values`` (see :func:`median_range`), each number formatted
    with ``spec``; one value alone prints plainly, ``-`` when there is none, and
    ``" (k of N runs)"`` is appended when runs without the figure were left out."""
    values = list(values)
    med, lo, hi, n = median_range(values)
    if n == 0:
        return "-"
    text = format(med, spec) if len(values) == 1 else f"{med:{spec}} [{lo:{spec}}, {hi:{spec}}]"
    return text if n == len(values) else f"{text} ({n} of {len(values)} runs)"


def spark_session(master: str, app_name: str, conf: dict[str, str] | None = None) -> Any:
    """A SparkSession bound to 127.0.0.1 with the UI off (``conf`` adds or overrides)."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from async_spark.engine import build_session

    settings = {
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }
    settings.update(conf or {})
    return build_session(master, app_name=app_name, conf=settings)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print ``rows`` under ``headers`` in aligned columns (floats as given, pre-formatted)."""
    text = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in text) for i in range(len(headers))]
    for j, r in enumerate(text):
        print(
            "  "
            + "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
        if j == 0:
            print("  " + "  ".join("-" * w for w in widths))


# --- processes -----------------------------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) for every process we can read."""
    out: dict[int, tuple[int, str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        out[int(name)] = (ppid, cmd)
    return out


def descendants(root: int, table: dict[int, tuple[int, str]] | None = None) -> list[int]:
    """``root`` and every process below it."""
    table = _proc_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def executor_pids(app_id: str) -> dict[str, int]:
    """Executor id -> pid of this application's executor JVMs (below this Python process).

    Only processes descending from this process and naming ``app_id`` on their command line are
    returned, so another user's Spark on the same machine is never touched.
    """
    table = _proc_table()
    mine = set(descendants(os.getpid(), table))
    out: dict[str, int] = {}
    for pid, (_, cmd) in table.items():
        if pid in mine and "CoarseGrainedExecutorBackend" in cmd and app_id in cmd:
            args = cmd.split()
            if "--executor-id" in args:
                out[args[args.index("--executor-id") + 1]] = pid
    return out


class Throttle:
    """Stop and continue a process tree in a duty cycle, from a driver-side thread.

    Every ``period`` seconds the tree of ``root`` (the executor JVM, its pyspark daemon and Python
    workers; re-read each second, since workers come and go) gets SIGSTOP, stays stopped for
    ``(1 - duty) * period`` and gets SIGCONT: the machine runs at ``duty`` of its speed. ``stop()``
    (also on ``__exit__``) always sends SIGCONT to the whole tree, twice.
    """

    def __init__(self, root: int, duty: float = 0.5, period: float = 0.1) -> None:
        if not 0.0 < duty < 1.0:
            raise ValueError(f"duty must be in (0, 1), got {duty!r}")
        self.root, self.duty, self.period = root, duty, period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="throttle", daemon=True)
        self._tree: list[int] = [root]
        self._seen: set[int] = {root}
        self.cycles = 0

    def _signal(self, pids: Iterable[int], sig: int) -> None:
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def _run(self) -> None:
        refreshed = 0.0
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if now - refreshed > 1.0:
                    self._tree = descendants(self.root)
                    self._seen.update(self._tree)
                    refreshed = now
                self._signal(self._tree, signal.SIGSTOP)
                self._stop.wait((1.0 - self.duty) * self.period)
                self._signal(self._tree, signal.SIGCONT)
                self.cycles += 1
                self._stop.wait(self.duty * self.period)
        finally:
            self._signal(self._tree, signal.SIGCONT)

    def start(self) -> Throttle:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for _ in range(2):
            self._signal(self._seen | set(descendants(self.root)), signal.SIGCONT)

    def __enter__(self) -> Throttle:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

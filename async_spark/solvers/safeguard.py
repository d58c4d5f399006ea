r"""The step safeguard: lower the step when the loss the tasks measure rises.

Every task reports the losses of its sampled rows at the parameters it read (from the margins its
gradient needs, so at no extra pass over the data). The driver groups consecutive results into
windows of ``window`` results and estimates the objective of each window as the mean sampled
loss plus the penalty at the parameters when the window closes. A window whose estimate stands
above the lowest of the ``recent`` windows before it (since the last change) by more than both

- ``z`` standard errors of the difference (the sampled losses' own spread: noise is not a rise;
  with ``z = 5`` and four reference windows, a run on a plateau sees a false alarm about once in
  a million windows — the best of *all* past windows would drift down with the run's length and
  make every long run fire),
- and ``rise`` relative (a rise too small to matter is not acted on),

means the step is too large for this run — more staleness than the default step assumed, a
curvature the bound missed, an explicit ``--step`` that does not fit the data. The step is then
multiplied by ``factor`` and the rule rebuilt with it (the rule's state — SAGA's table, the
momentum — carries over), and the windows restart after ``grace`` results, so that results
computed before the change are not held against the new step. Each change is recorded, and the
run's summary lists them (``step_safeguard``).

The divergence guard of :mod:`.loop` remains the backstop for a run that explodes within one
window.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["StepSafeguard", "WindowEstimate"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WindowEstimate:
    """One window's objective estimate and its standard error."""

    value: float
    stderr: float

    @staticmethod
    def of(stats: np.ndarray, penalty: float) -> WindowEstimate:
        total, squares, count = (float(v) for v in stats)
        mean = total / count
        var = max(squares / count - mean * mean, 0.0)
        return WindowEstimate(mean + penalty, math.sqrt(var / count))

    def rose_above(self, best: WindowEstimate, z: float, rise: float) -> bool:
        noise = z * math.hypot(self.stderr, best.stderr)
        return self.value - best.value > max(noise, rise * abs(best.value))


@dataclass
class StepSafeguard:
    """Watches the tasks' sampled losses and lowers the step when they rise.

    Parameters
    ----------
    gamma : float
        The run's step now.
    rebuild : callable
        ``rebuild(gamma) -> rule``: the run's rule with another step.
    penalty : callable
        ``penalty(theta) -> float``: the penalty added to the sampled loss.
    window : int >= 1
        Results per window (default of the run: twice the number of blocks, at least 8).
    z, rise, recent, factor, grace, max_changes : see the module docstring.
    """

    gamma: float
    rebuild: Callable[[float], Any]
    penalty: Callable[[np.ndarray], float]
    window: int
    z: float = 5.0
    rise: float = 0.01
    recent: int = 4
    factor: float = 0.5
    grace: int = 0
    max_changes: int = 20
    log_level: int = logging.WARNING  # of the line each change logs (INFO for quiet runs)
    changes: list[dict[str, float]] = field(default_factory=list)
    _stats: np.ndarray = field(default_factory=lambda: np.zeros(3))
    _seen: int = 0
    _skip: int = 0
    _recent: deque[WindowEstimate] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"window must be an integer >= 1, got {self.window!r}")
        if not 0 < self.factor < 1:
            raise ValueError(f"factor must be in (0, 1), got {self.factor!r}")
        if self.recent < 1:
            raise ValueError(f"recent must be an integer >= 1, got {self.recent!r}")
        self._recent = deque(maxlen=self.recent)

    def observe(self, stats: Any, theta: np.ndarray, update: int, seconds: float) -> Any | None:
        """Count one result's ``[loss sum, sum of squares, rows]``; returns the rebuilt rule
        when the step was lowered, else None."""
        if self._skip > 0:
            self._skip -= 1
            return None
        self._stats += np.asarray(stats, dtype=np.float64)
        self._seen += 1
        if self._seen < self.window:
            return None
        if self._stats[2] <= 0:  # empty samples: no estimate
            self._reset()
            return None
        now = WindowEstimate.of(self._stats, self.penalty(theta))
        self._reset()
        best = min(self._recent, key=lambda e: e.value, default=None)
        self._recent.append(now)
        if best is None or not now.rose_above(best, self.z, self.rise):
            return None
        if len(self.changes) >= self.max_changes:
            return None
        lowered = self.gamma * self.factor
        self.changes.append(
            {
                "update": update,
                "seconds": seconds,
                "from": self.gamma,
                "to": lowered,
                "window_objective": now.value,
                "best_objective": best.value,
            }
        )
        log.log(
            self.log_level,
            "step lowered from %.3g to %.3g at update %d: the tasks' sampled objective rose "
            "from %.6g to %.6g",
            self.gamma,
            lowered,
            update,
            best.value,
            now.value,
        )
        self.gamma = lowered
        self._recent.clear()
        self._skip = self.grace
        return self.rebuild(lowered)

    def restore(self, saved: dict[str, Any]) -> Any | None:
        """Continue from a checkpoint's :meth:`summary`: its step and its changes; returns the
        rule rebuilt with that step when it was lowered, else None."""
        self.changes = [dict(c) for c in saved.get("lowered", [])]
        final = float(saved.get("final_step", self.gamma))
        if final == self.gamma:
            return None
        self.gamma = final
        return self.rebuild(final)

    def _reset(self) -> None:
        self._stats = np.zeros(3)
        self._seen = 0

    def summary(self) -> dict[str, Any]:
        return {"final_step": self.gamma, "lowered": list(self.changes)}

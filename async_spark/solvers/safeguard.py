r"""The step safeguard: search for the largest step the run tolerates, lower it when the loss the
tasks measure rises.

Every task reports the losses of its sampled rows at the parameters it read (from the margins its
gradient needs, so at no extra pass over the data). The driver groups consecutive results into
windows of ``window`` results and estimates the objective of each window as the mean sampled
loss plus the penalty at the parameters when the window closes. A window whose estimate stands
above one of the ``recent`` windows before it (since the last change) by more than both

- ``z`` standard errors of the difference (the sampled losses' own spread: noise is not a rise;
  with ``z = 5`` and four reference windows, a run on a plateau sees a false alarm
  about once in a million windows — the best of *all* past windows would drift down with the
  run's length and make every long run fire),
- and ``rise`` relative (a rise too small to matter is not acted on),

where the two windows are compared on the blocks both heard from, each block's mean weighted by
its rows (with one stratum, ``block_rows=()``, the plain means): a window is not judged by which
blocks happened to answer in it. Where each block is fitted well on its own, the blocks' losses
differ by more than ``rise``; on ``benchmarks/peers.py``'s rcv1-like-2e4 (2*10^4 x 10^4 sparse,
two blocks of whole-block ASGD results) the plain means of windows went up and down by about
1 % with the blocks' turns, and read as rises they halved ASGD's step twenty times in a row.

**Executors that pause** (``shared``, ``confirm``; the run: every method but the momentum
ones). With ``shared`` and more than one block, a rise counts only where the two windows share
at least two blocks and it
survives leaving out the block that rose most: a model pulled between blocks raises one block's
loss while it lowers another's, a step too large raises them all. And it counts only when
``confirm`` windows in a row rise (the run: 2 when asynchronous): when a paused executor
resumes, its results arrive in a burst, computed at versions from before the pause. With one of
two executors stopped half of every 0.1 s (``benchmarks/block_weights.py``'s throttle) the fast
block's loss went up and down by 15 % with the pauses while the objective fell steadily, and the
test without these two conditions halved ASGD's default step five to twenty times within two
seconds.

**Momentum methods** keep neither condition: their rise is their function-value restart, which
reacts to any rise, and asynchronous AAG's swings between the blocks are what it damps (on
rcv1-like-2e4, default AAG ended at 2e-4 to 2e-3 with the eager test, 2e-3 to 6e-3 without).
An asynchronous momentum method's test is ``exact`` too: its noise scale counts the finite
population correction, so that results over whole blocks (exact losses) leave the ``rise``
floor alone as the scale. On breast cancer, whose rows' losses are heavy-tailed, five standard
errors of the rows' spread were 60 % of the objective, and default AAG swung between 1e-6 and
1e-2 above the optimum (0.6 under a throttled executor) without one restart.

Such a rise means the step is too large for this run — more staleness than the default step assumed, a
curvature the bound missed, an explicit ``--step`` that does not fit the data. The step is then
multiplied by ``factor`` and the rule rebuilt with it (the rule's state — SAGA's table —
carries over; after a rise the loop asks the family, which drops a momentum method's momentum:
``Family.after_rise``), and the windows restart after ``grace`` results, so that results
computed before the change are not held against the new step. Each change is recorded, and the
run's summary lists them (``step_safeguard``).

**The search upward** (``search=True``: a run whose step came from the data, ``--step auto``,
for the SGD and SAGA families and the synchronous momentum methods; a momentum rule rebuilt
with a raised step retunes its momentum too, :func:`~.momentum.raised_momentum`). The default
step comes from bounds that hold everywhere: for the logistic loss the curvature bound
:math:`\ell'' \le 1/4` is tight only at margin 0, and once most rows are classified with
some margin the step the run tolerates is often 8-30x larger (``benchmarks/step_search.py``).
One window's sampled losses are too noisy to tell a faster fall from noise, so the search
pools ``patience`` windows, and at least ``pool_rows`` sampled rows (the run: as many as the
dataset has, whatever the number of blocks), into one estimate, and

- when a pooled estimate falls below the previous one by more than ``z_fall`` standard errors
  of the difference, the step is multiplied by ``grow`` (at most ``max_raises`` times);
- when it has not after ``max_pool * patience`` windows (a sequential test), the search ends
  and the step goes back by ``factor`` (the step before the last raise): a plateau above the
  optimum is what a SAGA step slightly too large looks like;
- the first rise ends it too, with the lowering above.

This is the "bold driver" of Vogl et al. (Biol. Cybern. 59, 1988) and Battiti (Complex Systems
3, 1989) on the sampled objective: an exponential search for the largest step the run
tolerates, at the cost of the windows spent finding it. It is a heuristic, not a theorem: a
step it leaves too large is caught by the rise test and the divergence guard. An explicit
``--step`` is the user's: it is only lowered.

**Halving on plateaus** (``decay=True``: an automatic step of a method that a constant step
leaves in a noise ball: SGD, ASGD, DC-ASGD and the momentum methods, not SAGA, whose
variance-reduced updates converge at a constant step). Once the search has ended, the same
pooled test goes on: a pooled estimate clearly below the previous one means the run still
progresses at this step; ``max_pool * patience`` windows (and ``max_pool * pool_rows`` rows)
without one mean it has reached the ball of this step, which is then halved, and the next
plateau is given twice as many windows. Only this test counts the finite population correction
(``sample_fraction``): a result over a whole block carries the block's exact loss, and a slow
fall of it is progress; the search's raises need a fall clear on the rows' spread.
Halving the step as the phases double in length is the epoch schedule of Hazan & Kale ("Beyond
the regret minimization barrier: optimal algorithms for stochastic strongly-convex
optimization", JMLR 15, 2014), which attains the optimal O(1/T) rate for strongly convex
stochastic problems; here a phase ends when the sampled losses stop falling instead of at a
count fixed in advance.

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
    def of(stats: np.ndarray, penalty: float, weights: np.ndarray | None = None) -> WindowEstimate:
        """From ``[loss sum, sum of squares, rows]`` per stratum (one row per block, or a single
        row): the stratified mean — each block's mean sampled loss weighted by its share of the
        rows, over the blocks that reported — and its standard error on the rows' own spread."""
        stats = np.atleast_2d(np.asarray(stats, dtype=np.float64))
        present = stats[:, 2] > 0
        w = np.ones(len(stats)) if weights is None else np.asarray(weights, dtype=np.float64)
        w = w[present] / w[present].sum()
        total, squares, count = stats[present].T
        mean = total / count
        var = np.maximum(squares / count - mean * mean, 0.0)
        stderr = math.sqrt(float(w * w @ (var / count)))
        return WindowEstimate(float(w @ mean) + penalty, stderr)

    def corrected(self, unsampled: float) -> WindowEstimate:
        """The same estimate with its variance scaled by ``unsampled``, the share of a block a
        result's sample leaves out (the finite population correction: 0 for results over whole
        blocks, whose losses are no sample)."""
        return WindowEstimate(self.value, self.stderr * math.sqrt(unsampled))

    def fell_below(self, best: WindowEstimate, z: float) -> bool:
        return best.value - self.value > z * math.hypot(self.stderr, best.stderr)

    def rose_above(self, best: WindowEstimate, z: float, rise: float) -> bool:
        noise = z * math.hypot(self.stderr, best.stderr)
        return self.value - best.value > max(noise, rise * abs(best.value))


@dataclass(frozen=True)
class _Window:
    """A closed window's ``[loss sum, sum of squares, rows]`` per stratum and the penalty at the
    parameters when it closed: what the rise test compares, block by block."""

    stats: np.ndarray
    penalty: float

    def on(self, common: np.ndarray, weights: np.ndarray) -> WindowEstimate:
        return WindowEstimate.of(self.stats[common], self.penalty, weights[common])


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
    search : bool
        Raise the step while the run keeps improving, until the first rise (an automatic step);
        False only lowers it (an explicit step).
    decay : bool
        Once the search has ended, halve the step on each plateau (see the module docstring).
    z, rise, recent, confirm, shared, exact, factor, grace, max_changes, grow, patience,
    max_raises : see the module docstring.
    sample_fraction : float in [0, 1]
        The share of its block each result's losses come from (the run's batch fraction; 0: a
        small sample of a large population). The rows are drawn without replacement (Bernoulli),
        so the plateau test's sampling variance is scaled by ``1 - sample_fraction`` (Cochran,
        "Sampling Techniques", 3rd ed., 1977, eq. 2.9): results over whole blocks carry exact
        block losses, and a slow fall is progress. The rise test and the search's raises keep
        the rows' spread as their scale (see :meth:`_largest_rise`, :meth:`_pooled_test`).
    """

    gamma: float
    rebuild: Callable[[float], Any]
    penalty: Callable[[np.ndarray], float]
    window: int
    z: float = 5.0
    z_fall: float = 1.5
    rise: float = 0.01
    recent: int = 4
    confirm: int = 1  # windows in a row that must rise before the step is lowered
    shared: bool = True  # a rise must be shared by the blocks (see the module docstring)
    exact: bool = False  # the rise test's noise with the finite population correction
    factor: float = 0.5
    grace: int = 0
    max_changes: int = 20
    search: bool = False
    decay: bool = False
    grow: float = 2.0
    patience: int = 3
    max_raises: int = 6
    max_pool: int = 4  # x patience: the most windows the search pools before it calls a stall
    pool_rows: float = 0.0  # and the fewest sampled rows a pooled estimate takes (the run: N)
    log_level: int = logging.WARNING  # of the line each change logs (INFO for quiet runs)
    #: rows of each block: the strata of every estimate (see :meth:`observe`); () one stratum
    block_rows: tuple[int, ...] = ()
    sample_fraction: float = 0.0
    changes: list[dict[str, Any]] = field(default_factory=list)
    _stats: np.ndarray = field(init=False, repr=False)
    _seen: int = 0
    _skip: int = 0
    _rising: int = 0  # windows in a row that rose (see ``confirm``)
    # the pooled test: its windows' stats, their number, its reference estimate, and the most
    # windows it may take before it calls a stall or a plateau
    _pool: np.ndarray = field(init=False, repr=False)
    _pooled: int = field(default=0, init=False)
    _before: WindowEstimate | None = field(default=None, init=False)
    _limit: int = field(default=0, init=False)
    _recent: deque[_Window] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"window must be an integer >= 1, got {self.window!r}")
        if not 0 < self.factor < 1:
            raise ValueError(f"factor must be in (0, 1), got {self.factor!r}")
        if self.recent < 1:
            raise ValueError(f"recent must be an integer >= 1, got {self.recent!r}")
        if self.confirm < 1:
            raise ValueError(f"confirm must be an integer >= 1, got {self.confirm!r}")
        if not self.grow > 1:
            raise ValueError(f"grow must be > 1, got {self.grow!r}")
        if self.patience < 1:
            raise ValueError(f"patience must be an integer >= 1, got {self.patience!r}")
        self._recent = deque(maxlen=self.recent)
        self._limit = self.max_pool * self.patience
        if not 0.0 <= self.sample_fraction <= 1.0:
            raise ValueError(f"sample_fraction must be in [0, 1], got {self.sample_fraction!r}")
        self._unsampled = 1.0 - float(self.sample_fraction)
        self._weights = np.asarray(self.block_rows or (1,), dtype=np.float64)
        if self._weights.min() <= 0:
            raise ValueError(f"block_rows must be positive row counts, got {self.block_rows!r}")
        self._stats = self._zeros()
        self._pool = self._zeros()

    def _zeros(self) -> np.ndarray:
        return np.zeros((len(self._weights), 3))

    def _complete(self, stats: np.ndarray) -> bool:
        return bool(np.all(stats[:, 2] > 0))

    def _estimate(self, stats: np.ndarray, theta: np.ndarray) -> WindowEstimate:
        return WindowEstimate.of(stats, self.penalty(theta), self._weights)

    def observe(
        self, stats: Any, theta: np.ndarray, update: int, seconds: float, block: int = 0
    ) -> Any | None:
        """Count one result's ``[loss sum, sum of squares, rows]`` from ``block``; returns the
        rebuilt rule when the step changed, else None.

        A window's rise test compares its results' sampled losses, mostly fresh ones at
        parameters close to the current, with a recent window's on the blocks both hold
        (:meth:`_largest_rise`). The pooled test (the search's raises, the
        plateaus) is stratified by block: asynchronous results arrive in proportion to the
        blocks' speeds, not their sizes, and in a plain mean a straggler's rows all but vanish,
        so the mean falls as the run fits the fast blocks while the objective may rise; a pooled
        estimate weighs each block's mean by its rows and decides only once every block is in
        the pool."""
        if self._skip > 0:
            self._skip -= 1
            return None
        self._stats[block if len(self._weights) > 1 else 0] += np.asarray(stats, dtype=np.float64)
        self._seen += 1
        if self._seen < self.window:
            return None
        if not np.any(self._stats[:, 2] > 0):  # empty samples: no estimate
            self._reset()
            return None
        window = self._stats
        closed = _Window(window, self.penalty(theta))
        self._reset()
        rise = self._largest_rise(closed)
        self._recent.append(closed)
        rose = rise is not None and rise[0].rose_above(rise[1], self.z, self.rise)
        self._rising = self._rising + 1 if rose else 0
        if rise is not None and self._rising >= self.confirm:
            self.search = False  # the first rise ends the search upward
            now, best = rise
            lowered = self._lower(self.gamma * self.factor, update, seconds, now, best, "rose")
            if lowered is not None:
                return lowered
        if self.search or self.decay:
            return self._pooled_test(window, update, seconds, theta)
        return None

    def _largest_rise(self, closed: _Window) -> tuple[WindowEstimate, WindowEstimate] | None:
        """The closed window's estimate and the recent window's it rose most above, both on the
        blocks the two windows share; None when no recent window shares one (with ``shared``:
        two, and a rise that survives the block that rose most left out)."""
        present = closed.stats[:, 2] > 0
        largest = None
        blockwise = self.shared and len(self._weights) > 1
        for ref in self._recent:
            common = present & (ref.stats[:, 2] > 0)
            if common.sum() < (2 if blockwise else 1):
                continue
            if blockwise and not self._shared_rise(closed, ref, common):
                continue
            # the rows' spread, without the finite population correction: between windows,
            # stale asynchronous results move even exact whole-block losses by a few percent
            # with no trend, and the rows' spread is the scale below which that is not acted on
            # (unless ``exact``: an asynchronous momentum method's restart)
            pair = closed.on(common, self._weights), ref.on(common, self._weights)
            if self.exact:
                pair = pair[0].corrected(self._unsampled), pair[1].corrected(self._unsampled)
            if (
                largest is None
                or pair[0].value - pair[1].value > largest[0].value - largest[1].value
            ):
                largest = pair
        return largest

    def _shared_rise(self, closed: _Window, ref: _Window, common: np.ndarray) -> bool:
        """Whether the objective on the ``common`` blocks rose from ``ref`` to ``closed`` with
        the block that rose most left out: one block's rise, another's fall is a tug of war."""
        blocks = np.flatnonzero(common)
        means = [w.stats[blocks, 0] / w.stats[blocks, 2] for w in (closed, ref)]
        others = common.copy()
        others[blocks[np.argmax(means[0] - means[1])]] = False
        return closed.on(others, self._weights).value > ref.on(others, self._weights).value

    def _pooled_test(
        self, window: np.ndarray, update: int, seconds: float, theta: np.ndarray
    ) -> Any | None:
        """One step of the pooled test (the search upward, then the halving on plateaus): one
        window's sampled losses are too noisy to tell a faster fall from noise."""
        self._pool = self._pool + window
        self._pooled += 1
        if self._pooled < self.patience or self._pool[:, 2].sum() < self.pool_rows:
            return None
        if not self._complete(self._pool) and self._pooled < self._limit:
            return None  # a block missing from the pool: no decision on the others alone
        pooled = self._estimate(self._pool, theta)
        before = self._before
        # a raise needs a fall clear on the rows' scale (near the optimum a full batch's exact
        # loss still falls by 1e-9, which is progress but no reason for a larger step); a
        # plateau needs no fall at all on the scale of the sampled losses, with the finite
        # population correction (whole blocks: exact losses, and a slow fall is progress)
        scale = 1.0 if self.search else self._unsampled
        if before is None or pooled.corrected(scale).fell_below(
            before.corrected(scale), self.z_fall
        ):
            # a reference, or progress at this step: the next estimate starts afresh
            self._before, self._pool, self._pooled = pooled, self._zeros(), 0
            if before is None or not self.search:
                return None
            if self._raises() >= self.max_raises:
                self.search = False
                return None
            return self._change(self.gamma * self.grow, "raised", update, seconds, pooled, before)
        limit_rows = self._limit / self.patience * self.pool_rows
        if self._pooled < self._limit or self._pool[:, 2].sum() < limit_rows:
            return None  # not clear yet: pool more windows (a sequential test)
        self._before, self._pool, self._pooled = pooled, self._zeros(), 0
        if self.search:
            # no clear progress at this step: the search ends, back to the step before the last
            # raise (a plateau above the optimum is what a SAGA step slightly too large looks like)
            self.search = False
            if not self._raises():
                return None
            return self._lower(self.gamma / self.grow, update, seconds, pooled, before, "stalled")
        # decaying: this step's noise ball; the next phase is twice as long
        lowered = self._lower(self.gamma * self.factor, update, seconds, pooled, before, "plateau")
        if lowered is not None:
            self._limit *= 2
        return lowered

    def _lower(
        self,
        gamma: float,
        update: int,
        seconds: float,
        now: WindowEstimate,
        best: WindowEstimate,
        why: str,
    ) -> Any | None:
        if len(self.changes) - self._raises() >= self.max_changes:
            return None
        return self._change(gamma, "lowered", update, seconds, now, best, why)

    def _raises(self) -> int:
        return sum(1 for c in self.changes if c.get("kind") == "raised")

    def _change(
        self,
        gamma: float,
        kind: str,
        update: int,
        seconds: float,
        now: WindowEstimate,
        best: WindowEstimate,
        why: str = "fell",
    ) -> Any:
        self.changes.append(
            {
                "kind": kind,
                "why": why,
                "update": update,
                "seconds": seconds,
                "from": self.gamma,
                "to": gamma,
                "window_objective": now.value,
                "best_objective": best.value,
            }
        )
        if why == "rose":
            log.log(
                self.log_level,
                "step lowered from %.3g to %.3g at update %d: the tasks' sampled objective "
                "rose from %.6g to %.6g",
                self.gamma,
                gamma,
                update,
                best.value,
                now.value,
            )
        else:  # the search is expected behaviour: not a warning
            log.info("step %s from %.3g to %.3g at update %d", kind, self.gamma, gamma, update)
        self.gamma = gamma
        self._recent.clear()
        self._rising = 0
        self._pool, self._pooled = self._zeros(), 0
        if why == "rose":  # the windows before a rise are no reference for the lowered step
            self._before = None
        self._skip = self.grace
        return self.rebuild(gamma)

    def restore(self, saved: dict[str, Any]) -> Any | None:
        """Continue from a checkpoint's :meth:`summary`: its step, its changes and whether the
        search upward goes on; returns the rule rebuilt with that step when it changed, else
        None."""
        # "lowered": the list of a checkpoint written before the search upward existed
        self.changes = [
            {"kind": "lowered", **c} for c in saved.get("changes", saved.get("lowered", []))
        ]
        self.search = self.search and bool(saved.get("searching", True))
        self._limit = int(saved.get("plateau_windows", self._limit))
        pooled = saved.get("pooled_test", {})
        stats = np.asarray(pooled.get("stats", []), dtype=np.float64)
        if stats.shape == self._pool.shape:
            self._pool, self._pooled = stats, int(pooled.get("windows", 0))
        else:  # a checkpoint of before the strata (one row of three): the pool starts again
            self._pool, self._pooled = self._zeros(), 0
        ref = pooled.get("reference")
        self._before = None if ref is None else WindowEstimate(float(ref[0]), float(ref[1]))
        # the open window and the rise test's references (absent in a checkpoint written
        # before they were kept: the window starts again)
        window = saved.get("window", {})
        stats = np.asarray(window.get("stats", []), dtype=np.float64)
        if stats.shape == self._stats.shape:
            self._stats, self._seen = stats, int(window.get("results", 0))
            self._skip = int(window.get("skip", 0))
            self._rising = int(window.get("rising", 0))
        for ref in saved.get("recent", []):  # a checkpoint of before the blockwise test: pairs
            stats = np.asarray(ref.get("stats", []) if isinstance(ref, dict) else [], np.float64)
            if stats.shape == self._stats.shape:
                self._recent.append(_Window(stats, float(ref["penalty"])))
        final = float(saved.get("final_step", self.gamma))
        if final == self.gamma:
            return None
        self.gamma = final
        return self.rebuild(final)

    def _reset(self) -> None:
        self._stats = self._zeros()
        self._seen = 0

    def summary(self) -> dict[str, Any]:
        """The safeguard's record and state: what :meth:`restore` continues from, so that a
        resumed run takes the same decisions at the same updates as one never interrupted."""
        return {
            "final_step": self.gamma,
            "searching": self.search,
            "plateau_windows": self._limit,
            "window": {
                "stats": self._stats.tolist(),
                "results": self._seen,
                "skip": self._skip,
                "rising": self._rising,
            },
            "recent": [{"stats": w.stats.tolist(), "penalty": w.penalty} for w in self._recent],
            "pooled_test": {
                "stats": self._pool.tolist(),
                "windows": self._pooled,
                "reference": None
                if self._before is None
                else [self._before.value, self._before.stderr],
            },
            "raised": self._raises(),
            "lowered": len(self.changes) - self._raises(),
            "changes": list(self.changes),
        }

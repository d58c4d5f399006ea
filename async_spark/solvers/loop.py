"""The driver loop of a linear run: results -> message -> update -> publish -> record -> stop?

The same loop runs every method (the family in :mod:`.methods` makes the messages) on every
transport (the engine hands it accepted results, whichever way the tasks ran).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from async_spark.engine.engine import EngineError, TaskResult

from .methods import Family
from .recording import Recorder
from .safeguard import StepSafeguard

__all__ = ["BlockShares", "Current", "Limits", "LoopEnd", "Messages", "run_updates"]

DIVERGENCE_FACTOR = 1e4  # gradient norm growth over the first updates that means divergence
EARLY_UPDATES = 10  # updates whose gradient norms set the scale divergence is measured against
SHARE_HORIZON_PER_BLOCK = 32  # BlockShares' horizon, in results per block


@dataclass
class Current:
    """The driver's parameters, rule state and rule now (read at dispatch, replaced at each
    update; the rule when the step safeguard changes the step)."""

    theta: np.ndarray
    state: Any
    rule: Any = None


class Limits(NamedTuple):
    """When the loop stops (any that is set)."""

    max_updates: int | None
    time_budget: float | None
    stop: threading.Event | None


class LoopEnd(NamedTuple):
    updates: int
    stopped_by: str
    wall: float


class BlockShares:
    """Each block's share of the recent asynchronous results, and the weight that makes every
    block count alike: ``1 / (live blocks * share)``, at most the number of live blocks.

    Applied one result at a time, a block's gradient counts as often as its block answers, so
    asynchronous SGD and momentum head for the minimizer of the blocks' losses weighted by their
    speeds, not of the objective, whatever the step (how far that is: ``benchmarks/conditioning.py
    --block-shares``; docs/steps.md, "Block weights"). Weighting a result by the inverse of its
    block's share makes the expected update the objective's gradient again: the correction of
    Horvitz & Thompson (J. Amer. Stat. Assoc. 47, 1952) for a sample drawn with unequal
    probabilities. The shares are exponentially weighted counts over about ``horizon`` results
    (a block's speed may change: a throttled executor), starting equal; the cap bounds the step
    a rare straggler's result takes.
    """

    def __init__(self, num_blocks: int, horizon: int) -> None:
        if num_blocks < 1 or horizon < 1:
            raise ValueError(f"need num_blocks >= 1 and horizon >= 1, got {num_blocks}, {horizon}")
        self.decay = 1.0 - 1.0 / horizon
        self.counts = np.full(num_blocks, horizon / num_blocks)
        self.low = math.inf  # the range of the weights applied
        self.high = 0.0

    def weight(self, block: int, live_blocks: int) -> float:
        """The weight of ``block``'s result arriving now (then counted in the shares)."""
        counts = self.counts
        live = max(1, live_blocks)
        counts *= self.decay
        # counted half before and half after its weight: a block's count is lowest just before
        # its own result and highest just after, and either end alone biases its weight by
        # about 1/horizon (the midpoint cancels that to first order)
        counts[block] += 0.5
        w = min(float(live), float(counts.sum()) / (live * float(counts[block])))
        counts[block] += 0.5
        self.low, self.high = min(self.low, w), max(self.high, w)
        return w

    def summary(self) -> dict[str, Any]:
        total = float(self.counts.sum())
        return {
            "shares": [round(float(c) / total, 4) for c in self.counts],
            "weight_range": None if self.high == 0.0 else [round(self.low, 4), round(self.high, 4)],
        }


class Messages:
    """Results -> the rule's messages.

    Keeps the memo of each block's task in flight (at most one per block, so this stays bounded
    whatever happens to the tasks) and, for synchronous methods, buffers a round's messages until
    every live block has answered, then combines them in block order (so a seeded round does not
    depend on the order its results arrived in). An asynchronous message of a family that weighs
    blocks (``family.weighs_blocks``) is weighted by :class:`BlockShares`.
    """

    def __init__(
        self, family: Family, synchronous: bool, num_blocks: int = 1, weigh_blocks: bool = True
    ) -> None:
        self.family = family
        self.synchronous = synchronous
        self._memos: dict[int, tuple[int, Any]] = {}
        self._round: list[tuple[int, Any]] = []
        self.shares: BlockShares | None = None
        if weigh_blocks and not synchronous and family.weighs_blocks and num_blocks > 1:
            self.shares = BlockShares(num_blocks, SHARE_HORIZON_PER_BLOCK * num_blocks)

    def dispatched(self, block: int, task_id: int, memo: Any) -> None:
        self._memos[block] = (task_id, memo)

    def accept(self, result: TaskResult, live_blocks: int) -> Any:
        """The message to apply now, or None while a synchronous round is incomplete."""
        task_id, memo = self._memos.pop(result.block, (result.task_id, None))
        assert task_id == result.task_id, "one task in flight per block"
        msg = self.family.message(result, memo)
        if not self.synchronous:
            if self.shares is not None:
                msg = self.family.weighted(msg, self.shares.weight(result.block, live_blocks))
            return msg
        self._round.append((result.block, msg))
        if len(self._round) < live_blocks:
            return None
        self._round.sort(key=lambda item: item[0])
        combined = self.family.combine([m for _, m in self._round])
        self._round = []
        return combined


class _DivergenceGuard:
    """Stops a run whose gradients grow far above those of its first updates."""

    def __init__(self, gamma: float) -> None:
        self.gamma = gamma
        self.early = 0.0
        self.seen = 0

    def check(self, signal: np.ndarray, update: int) -> None:
        norm = float(np.linalg.norm(signal))
        if self.seen < EARLY_UPDATES:  # this run's (or this resumed segment's) first updates
            self.early = max(self.early, norm)
            self.seen += 1
        elif norm > DIVERGENCE_FACTOR * max(self.early, 1e-300):
            raise FloatingPointError(
                f"the run diverged at update {update}: the gradient norm grew "
                f"{norm / self.early:.1e}x above its first updates; the step {self.gamma:g} "
                "is too large for this data; try a smaller --step (the last checkpoint, "
                "if any, is kept)"
            )

    def check_finite(self, theta: np.ndarray, update: int) -> None:
        if not np.all(np.isfinite(theta)):
            raise FloatingPointError(
                f"the parameters became non-finite at update {update}: the step "
                f"{self.gamma:g} is too large for this data; try a smaller --step"
            )


def _lost_blocks_message(engine: Any) -> str:
    return (
        f"block(s) {engine.core.given_up_blocks()} given up (failed more than {engine.core.max_retries} times in a row, "
        "or quarantined for invalid results); this method evaluates its objective on every "
        f"block, so the run cannot go on without them; last error:\n{engine.last_error}"
    )


def _results(engine: Any, gamma: float) -> Iterator[TaskResult]:
    """The engine's results; when every block was quarantined for non-finite results, the run
    diverged: say so (a FloatingPointError that suggests a smaller step)."""
    try:
        yield from engine.results()
    except EngineError as exc:
        if engine.core.invalid and engine.core.live_blocks == 0:
            raise FloatingPointError(
                f"every block returned non-finite gradients: the run diverged; the step {gamma:g} "
                "is too large for this data; try a smaller --step"
            ) from exc
        raise


def run_updates(
    engine: Any,
    current: Current,
    messages: Messages,
    recorder: Recorder,
    *,
    gamma: float,
    updates: int,
    limits: Limits,
    checkpoint: Callable[[int], None],
    on_update: Callable[[int, float], None] | None = None,
    safeguard: StepSafeguard | None = None,
) -> LoopEnd:
    """Apply accepted results until a limit, the target or ``limits.stop`` ends the run.

    A task's payload is ``(the method's payload, its sampled losses' stats)``; the stats go to
    ``safeguard``, which may hand back the rule with another step. ``checkpoint(updates)`` is
    called when the recorder says one is due; ``on_update(updates, seconds)`` after every update
    (a progress bar).
    """
    family = messages.family
    guard = _DivergenceGuard(gamma)
    stopped_by = "max_updates"
    if limits.max_updates is not None and updates >= limits.max_updates:
        return LoopEnd(updates, stopped_by, engine.elapsed())  # resumed at its end: nothing to do
    for result in _results(engine, gamma):
        payload, losses = result.payload
        if not family.reads_losses:
            result = result._replace(payload=payload)
        if safeguard is not None:
            rebuilt = safeguard.observe(
                losses, current.theta, updates, engine.elapsed(), result.block
            )
            if rebuilt is not None:  # the step changed
                current.rule = rebuilt
                guard.gamma = safeguard.gamma
                if safeguard.changes[-1]["why"] == "rose":
                    current.theta, current.state = family.after_rise(
                        rebuilt, current.theta, current.state
                    )
        if family.needs_every_block and engine.core.live_blocks < engine.core.num_blocks:
            raise EngineError(_lost_blocks_message(engine))
        msg = messages.accept(result, engine.live_blocks)
        if msg is None:
            continue
        guard.check(family.signal(msg), updates + 1)
        theta, state = current.rule.update(msg, current.state, current.theta)
        guard.check_finite(theta, updates + 1)
        current.theta, current.state = theta, state
        engine.publish(theta)
        updates += 1
        now = engine.elapsed()
        block = None if messages.synchronous else result.block
        iterate, exact = family.iterate(theta, state), family.exact(theta, state)
        recorder.update(now, engine.version, msg.staleness, block, iterate, exact)
        if on_update is not None:
            on_update(updates, now)
        if recorder.checkpoint_due(updates, now):
            checkpoint(updates)
        if limits.max_updates is not None and updates >= limits.max_updates:
            stopped_by = "max_updates"
            break
        if limits.time_budget is not None and now >= limits.time_budget:
            stopped_by = "time_budget"
            break
        reason = recorder.stop_reason()
        if reason is not None:
            stopped_by = reason
            break
        if family.converged(state):
            stopped_by = "converged"
            break
        if limits.stop is not None and limits.stop.is_set():
            stopped_by = "interrupted"
            break
    return LoopEnd(updates, stopped_by, engine.elapsed())

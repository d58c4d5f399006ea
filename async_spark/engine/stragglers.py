"""Straggler models for experiments (ASYNC's, plus a slow executor), seeded and applied in the task.

The driver decides each task's delay at dispatch time from ``(seed, block, block_task)`` so a run is
reproducible, and the task sleeps inside the executor, where a real straggler would be slow. Delays
are multiples of the *mean task time* — the mean executor-side compute time of the task function,
measured during a warm-up of undelayed tasks (ASYNC measured it over its first updates).

Models
------
- ``none``.
- ``intensity:C`` — one block (block 0) sleeps ``C x mean`` in every task (ASYNC, C in {0.3, 0.6, 1}).
- ``cloud`` — 25% of the blocks straggle; each of their tasks sleeps ``U(1.5, 2.5) x mean`` with
  probability 0.8 and ``U(2.5, 10) x mean`` with probability 0.2 (ASYNC's cloud model).
- ``slow-executor:F`` — every task that lands on one executor takes ``F`` times its compute time
  (real clusters have slow machines, not slow partitions). The slow executor is the first one seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "STRAGGLER_KINDS",
    "Delay",
    "StragglerModel",
    "UnknownStragglerModel",
    "parse_stragglers",
]

#: The straggler models by name.
STRAGGLER_KINDS = ("none", "intensity", "cloud", "slow-executor")


class UnknownStragglerModel(ValueError):
    """A straggler text that names no model; ``kind`` is the name it gave."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Delay:
    """What a task is told to do beyond its work (plain values: travels in the closure)."""

    sleep_seconds: float = 0.0
    slow_executor: str | None = None
    slow_factor: float = 1.0

    def extra_seconds(self, executor: str, compute_seconds: float) -> float:
        """Seconds the task sleeps after computing, on the given executor."""
        extra = self.sleep_seconds
        if self.slow_executor is not None and executor == self.slow_executor:
            extra += (self.slow_factor - 1.0) * compute_seconds
        return extra


NO_DELAY = Delay()


@dataclass(frozen=True)
class StragglerModel:
    """A seeded straggler model; :meth:`delay` is called on the driver for every dispatch.

    Parameters
    ----------
    kind : {"none", "intensity", "cloud", "slow-executor"}
    intensity : float
        C for ``intensity`` (>= 0); F for ``slow-executor`` (>= 1).
    fraction : float
        Fraction of straggling blocks in the cloud model (0.25 in ASYNC).
    seed : int
    """

    kind: str = "none"
    intensity: float = 0.0
    fraction: float = 0.25
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in STRAGGLER_KINDS:
            raise ValueError(f"stragglers must be one of {STRAGGLER_KINDS}, got {self.kind!r}")
        if self.kind == "intensity" and not self.intensity >= 0:
            raise ValueError(f"straggler intensity C must be >= 0, got {self.intensity!r}")
        if self.kind == "slow-executor" and not self.intensity >= 1:
            raise ValueError(f"slow-executor factor F must be >= 1, got {self.intensity!r}")
        if not 0 < self.fraction <= 1:
            raise ValueError(f"straggler fraction must be in (0, 1], got {self.fraction!r}")

    @property
    def active(self) -> bool:
        return self.kind != "none" and not (self.kind == "intensity" and self.intensity == 0)

    def straggling_blocks(self, num_blocks: int) -> frozenset[int]:
        """Blocks that straggle (cloud: a seeded choice of round(fraction * P), at least one)."""
        if self.kind == "intensity":
            return frozenset({0})
        if self.kind == "cloud":
            k = max(1, int(round(self.fraction * num_blocks)))
            rng = np.random.default_rng([self.seed, 7919])
            return frozenset(int(b) for b in rng.choice(num_blocks, size=k, replace=False))
        return frozenset()

    def delay(
        self,
        block: int,
        block_task: int,
        num_blocks: int,
        mean_task_seconds: float | None,
        slow_executor: str | None = None,
    ) -> Delay:
        """The delay of one task. Without a measured mean (warm-up) there is none."""
        if not self.active:
            return NO_DELAY
        if self.kind == "slow-executor":
            if slow_executor is None:
                return NO_DELAY
            return Delay(slow_executor=slow_executor, slow_factor=float(self.intensity))
        if mean_task_seconds is None or block not in self.straggling_blocks(num_blocks):
            return NO_DELAY
        if self.kind == "intensity":
            return Delay(sleep_seconds=self.intensity * mean_task_seconds)
        rng = np.random.default_rng([self.seed, block, block_task])
        if rng.random() < 0.8:
            factor = rng.uniform(1.5, 2.5)
        else:
            factor = rng.uniform(2.5, 10.0)
        return Delay(sleep_seconds=float(factor * mean_task_seconds))

    def __str__(self) -> str:
        if self.kind == "intensity":
            return f"intensity:{self.intensity:g}"
        if self.kind == "slow-executor":
            return f"slow-executor:{self.intensity:g}"
        return self.kind


def parse_stragglers(text: str | None, seed: int = 0) -> StragglerModel:
    """Parse ``none``, ``intensity:C``, ``cloud`` or ``slow-executor:F``."""
    if text is None or text.strip().lower() in ("", "none"):
        return StragglerModel("none", seed=seed)
    name, _, value = text.strip().lower().partition(":")
    try:
        if name == "intensity":
            return StragglerModel("intensity", intensity=float(value), seed=seed)
        if name == "cloud" and not value:
            return StragglerModel("cloud", seed=seed)
        if name == "slow-executor":
            return StragglerModel("slow-executor", intensity=float(value or 3.0), seed=seed)
    except ValueError as exc:
        raise ValueError(f"bad straggler model {text!r}: {exc}") from None
    raise UnknownStragglerModel(
        f"unknown straggler model {text!r}; allowed: none, intensity:C (C>=0), cloud, "
        "slow-executor:F (F>=1)",
        kind=name,
    )

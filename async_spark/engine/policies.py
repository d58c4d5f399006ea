"""Scheduling policies: when idle blocks get new work and which results are accepted.

A :class:`Policy` is a conjunction of small rules; every rule is pure (no Spark, no clock):

- :class:`PartialBarrier` (ASYNC) — dispatch a new round once at least ⌈β·P⌉ of the P live blocks
  are idle; β = 1 is the bulk-synchronous barrier, ⌈β·P⌉ = 1 is fully asynchronous.
- :class:`StalenessBound` (ASYNC) — reject a result whose staleness exceeds τ; a task whose staleness
  already exceeds τ while it runs is obsolete and may be cancelled.
- :class:`StaleSynchronous` (SSP, Ho et al. 2013) — hold back a block that has finished more than
  ``s`` tasks beyond the slowest live block.

Named policies: ``sync`` (β = 1), ``async`` (no rule), ``barrier:B``, ``tau:N``, ``ssp:S``, and
combinations joined with ``+`` (``barrier:0.7+tau:8``). See :func:`parse_policy`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "PartialBarrier",
    "Policy",
    "PolicyError",
    "StaleSynchronous",
    "StalenessBound",
    "parse_policy",
]


class PolicyError(ValueError):
    """A policy parameter outside its allowed range, or a policy that could never dispatch.

    ``field`` names the parameter ("beta", "tau", "ssp"; None for a combination)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class BlockClocks(Protocol):
    """``clocks[block]``: a block's finished-task count (a list, or the core's O(1) view)."""

    def __getitem__(self, block: int, /) -> int: ...


@dataclass(frozen=True)
class PartialBarrier:
    """Dispatch once ``ceil(beta * live)`` blocks are idle. ``beta`` in (0, 1]."""

    beta: float

    def __post_init__(self) -> None:
        if not (isinstance(self.beta, int | float) and 0.0 < float(self.beta) <= 1.0):
            raise PolicyError(
                f"beta (partial barrier) must be in (0, 1], got {self.beta!r}", "beta"
            )

    def required_idle(self, live_blocks: int) -> int:
        return max(1, math.ceil(self.beta * live_blocks - 1e-12))

    def __str__(self) -> str:
        return "sync" if self.beta == 1.0 else f"barrier:{self.beta:g}"


@dataclass(frozen=True)
class StalenessBound:
    """Accept a result only if its staleness is at most ``tau`` (an integer >= 0)."""

    tau: int

    def __post_init__(self) -> None:
        if isinstance(self.tau, bool) or not isinstance(self.tau, int) or self.tau < 0:
            raise PolicyError(
                f"tau (staleness bound) must be an integer >= 0, got {self.tau!r}", "tau"
            )

    def __str__(self) -> str:
        return f"tau:{self.tau}"


@dataclass(frozen=True)
class StaleSynchronous:
    """Stale synchronous parallel: a block may run ahead of the slowest by at most ``s`` tasks."""

    s: int

    def __post_init__(self) -> None:
        if isinstance(self.s, bool) or not isinstance(self.s, int) or self.s < 0:
            raise PolicyError(f"ssp slack s must be an integer >= 0, got {self.s!r}", "ssp")

    def __str__(self) -> str:
        return f"ssp:{self.s}"


Rule = PartialBarrier | StalenessBound | StaleSynchronous


@dataclass(frozen=True)
class Policy:
    """A conjunction of at most one rule of each kind.

    Parameters
    ----------
    barrier : PartialBarrier or None
        None dispatches every idle block at once (fully asynchronous).
    staleness : StalenessBound or None
        None accepts any staleness.
    ssp : StaleSynchronous or None
    """

    barrier: PartialBarrier | None = None
    staleness: StalenessBound | None = None
    ssp: StaleSynchronous | None = None
    rules: tuple[Rule, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rules = tuple(r for r in (self.barrier, self.staleness, self.ssp) if r is not None)
        object.__setattr__(self, "rules", rules)

    # --- named constructors -------------------------------------------------------------------
    @classmethod
    def sync(cls) -> Policy:
        """Bulk-synchronous: every round waits for all live blocks."""
        return cls(barrier=PartialBarrier(1.0))

    @classmethod
    def asynchronous(cls, tau: int | None = None) -> Policy:
        """Fully asynchronous, with an optional staleness bound."""
        return cls(staleness=None if tau is None else StalenessBound(tau))

    @classmethod
    def partial_barrier(cls, beta: float, tau: int | None = None) -> Policy:
        """ASYNC's partial barrier β with an optional staleness bound τ."""
        return cls(
            barrier=PartialBarrier(beta), staleness=None if tau is None else StalenessBound(tau)
        )

    @classmethod
    def stale_synchronous(cls, s: int) -> Policy:
        return cls(ssp=StaleSynchronous(s))

    # --- properties ---------------------------------------------------------------------------
    @property
    def synchronous(self) -> bool:
        """True for the bulk-synchronous barrier (β = 1): every round holds one version."""
        return self.barrier is not None and self.barrier.beta == 1.0

    @property
    def uses_clocks(self) -> bool:
        """Whether dispatch compares the blocks' clocks (SSP)."""
        return self.ssp is not None

    @property
    def can_obsolete(self) -> bool:
        """Whether a running task can become obsolete (a staleness bound) and be cancelled."""
        return self.staleness is not None

    @property
    def tau(self) -> int | None:
        return None if self.staleness is None else self.staleness.tau

    def __str__(self) -> str:
        return "+".join(str(r) for r in self.rules) or "async"

    # --- validation ---------------------------------------------------------------------------
    def validate(self, num_blocks: int, max_in_flight: int | None = None) -> None:
        """Refuse a configuration that could never dispatch or never accept, before anything runs."""
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise PolicyError(f"num_blocks must be an integer >= 1, got {num_blocks!r}")
        if max_in_flight is not None:
            if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int):
                raise PolicyError(f"max_in_flight must be an integer >= 1, got {max_in_flight!r}")
            if not 1 <= max_in_flight <= num_blocks:
                raise PolicyError(
                    f"max_in_flight must be in [1, num_blocks={num_blocks}], got {max_in_flight}"
                )
            if self.barrier is not None:
                need = self.barrier.required_idle(num_blocks)
                if need > max_in_flight:
                    raise PolicyError(
                        f"barrier beta={self.barrier.beta:g} waits for {need} idle blocks but at "
                        f"most max_in_flight={max_in_flight} can run: it would never dispatch a "
                        f"full round; use beta <= {max_in_flight / num_blocks:g}"
                    )

    # --- decisions (pure) ---------------------------------------------------------------------
    def select(
        self,
        ready: Sequence[int],
        live_blocks: int,
        running: int,
        clocks: BlockClocks,
        slowest_clock: int,
        max_in_flight: int,
        idle_count: int | None = None,
    ) -> list[int]:
        """Blocks to dispatch now.

        Parameters
        ----------
        ready : block ids that are idle (or due for a retry), in preferred order
        live_blocks : number of blocks not given up
        running : tasks in flight
        clocks : finished-task count per block (SSP; read for the ready blocks only)
        slowest_clock : the smallest finished-task count of a block not given up (SSP)
        max_in_flight : cap on tasks in flight
        idle_count : idle blocks for the barrier, when ``ready`` leaves out idle blocks that SSP
            holds back (:meth:`clock_limit`); ``len(ready)`` if None
        """
        if not ready:
            return []
        idle = len(ready) if idle_count is None else idle_count
        if self.barrier is not None and idle < self.barrier.required_idle(live_blocks):
            return []
        chosen = list(ready)
        if self.ssp is not None:
            chosen = [b for b in chosen if clocks[b] - slowest_clock <= self.ssp.s]
        room = max(0, max_in_flight - running)
        return chosen[:room]

    def accepts(self, staleness: int) -> bool:
        """Whether a result with this staleness may be applied."""
        return self.staleness is None or staleness <= self.staleness.tau

    def clock_limit(self, slowest_clock: int) -> int | None:
        """The largest finished-task count a block may have to be dispatched (SSP), or None."""
        return None if self.ssp is None else slowest_clock + self.ssp.s

    def obsolete(self, staleness_so_far: int) -> bool:
        """Whether a task still running can no longer produce an acceptable result."""
        return self.staleness is not None and staleness_so_far > self.staleness.tau


def parse_policy(text: str) -> Policy:
    """Parse ``sync``, ``async``, ``barrier:B``, ``tau:N``, ``ssp:S`` and ``+`` combinations."""
    if not isinstance(text, str) or not text.strip():
        raise PolicyError(
            "policy must be a non-empty string such as 'sync', 'async', 'barrier:0.7'"
        )
    barrier: PartialBarrier | None = None
    staleness: StalenessBound | None = None
    ssp: StaleSynchronous | None = None
    for part in text.strip().lower().split("+"):
        name, _, value = part.strip().partition(":")
        try:
            if name == "sync" and not value:
                barrier = PartialBarrier(1.0)
            elif name == "async" and not value:
                pass
            elif name in ("barrier", "beta"):
                barrier = PartialBarrier(float(value))
            elif name == "tau":
                staleness = StalenessBound(int(value))
            elif name == "ssp":
                ssp = StaleSynchronous(int(value))
            else:
                raise PolicyError(
                    f"unknown policy part {part!r}; allowed: sync, async, barrier:B (0<B<=1), "
                    "tau:N (N>=0), ssp:S (S>=0), joined with '+'"
                )
        except ValueError as exc:
            if isinstance(exc, PolicyError):
                raise
            raise PolicyError(f"bad value in policy part {part!r}: {exc}") from None
    return Policy(barrier=barrier, staleness=staleness, ssp=ssp)

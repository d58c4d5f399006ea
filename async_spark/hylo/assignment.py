"""Assignment of layers to ranks for the inverse computation.

Each inverse update, the owner of a layer builds its m' x m' kernel (cost ~ m'^2 (d_in + d_out))
and inverts it (~ m'^3), then broadcasts the inverse.  The original HyLo code gives each rank a
contiguous block of layers, which leaves ranks idle when layers are few or unequal (ResNet-50:
54 layers on 64 GPUs).  :func:`greedy_assignment` is the longest-processing-time-first rule
(Graham, 1969): layers by decreasing cost, each to the least-loaded rank, whose makespan is within
4/3 of the optimum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["inverse_cost", "greedy_assignment", "contiguous_assignment", "makespan"]


def inverse_cost(rows: int, d_in: int, d_out: int) -> float:
    """Flop estimate of one layer's inverse update: ``m'^2 (d_in + d_out) + m'^3``.

    Parameters
    ----------
    rows : int
        m', the number of gathered rows.
    d_in, d_out : int
        Layer input (with bias column) and output sizes.
    """
    m = float(rows)
    return m * m * (d_in + d_out) + m**3


def _check(costs: Sequence[float], world_size: int) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
    for c in costs:
        if not math.isfinite(float(c)) or float(c) < 0:
            raise ValueError(f"costs must be finite and >= 0, got {c!r}")


def greedy_assignment(costs: Sequence[float], world_size: int) -> list[int]:
    """Assign each layer to a rank, balancing the summed cost (LPT greedy).

    Parameters
    ----------
    costs : sequence of float
        Estimated cost per layer (e.g. :func:`inverse_cost`).
    world_size : int
        Number of ranks.

    Returns
    -------
    list of int
        ``owner[i]`` is the rank of layer ``i``.  Deterministic (ties go to the lower layer index
        and the lower rank), so every rank computes the same assignment.
    """
    _check(costs, world_size)
    order = sorted(range(len(costs)), key=lambda i: (-float(costs[i]), i))
    loads = [0.0] * world_size
    owner = [0] * len(costs)
    for i in order:
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        owner[i] = rank
        loads[rank] += float(costs[i])
    return owner


def contiguous_assignment(n_layers: int, world_size: int) -> list[int]:
    """The original HyLo rule: contiguous blocks of ``ceil(L / P)`` layers per rank."""
    _check([], world_size)
    if n_layers < 0:
        raise ValueError(f"n_layers must be >= 0, got {n_layers}")
    block = max(1, math.ceil(n_layers / world_size))
    return [min(i // block, world_size - 1) for i in range(n_layers)]


def makespan(costs: Sequence[float], owner: Sequence[int], world_size: int) -> float:
    """The largest per-rank summed cost of an assignment."""
    loads = [0.0] * world_size
    for c, r in zip(costs, owner, strict=True):
        loads[r] += float(c)
    return max(loads) if loads else 0.0

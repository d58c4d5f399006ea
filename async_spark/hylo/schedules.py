"""Schedules of HyLo: damping decay, learning-rate warm-up, and the hybrid KID/KIS switch.

From the public scripts of HyLo (Mu et al., SC22): damping starts at lambda_0 and, after a warm-up,
decays geometrically towards lambda_target at each inverse update,

    lambda <- (1 - alpha) lambda + alpha lambda_target,   alpha = 2 log10(lambda_0 / lambda_target) / N,

the learning rate ramps up linearly over the warm-up epochs and then decays in steps, and the
hybrid method uses KID (accurate) in "critical regimes" where gradient norms change fast -- the
first epochs and right after a learning-rate decay -- and KIS (cheap) elsewhere.  The scripts encode
the regimes as epoch windows (:class:`EpochWindowRule`); :class:`GradNormChangeRule` decides from the
paper's signal itself, the relative change of each layer's gradient norm between inverse updates.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "GeometricDamping",
    "warmup_multistep",
    "SwitchRule",
    "EpochWindowRule",
    "GradNormChangeRule",
]


def _positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def _nonneg_int(name: str, value: object, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class GeometricDamping:
    """Damping that is ``start`` during warm-up, then decays geometrically towards ``target``.

    Parameters
    ----------
    start : float
        lambda_0 > 0.
    target : float
        lambda_target > 0 (may exceed ``start``: the schedule then grows towards it).
    warmup_steps : int
        Steps at constant ``start``.
    decay_updates : int
        N of the paper: alpha = 2 log10(start/target) / N, clipped to [0, 1].
    update_every : int
        Steps between inverse updates (the decay is applied once per inverse update).

    Notes
    -----
    At step t >= warmup_steps, after j = floor((t - warmup_steps) / update_every) + 1 updates,
    lambda_t = target + (start - target) (1 - alpha)^j, the closed form of the paper's recursion.
    """

    start: float
    target: float
    warmup_steps: int = 0
    decay_updates: int = 100
    update_every: int = 1

    def __post_init__(self) -> None:
        _positive("start", self.start)
        _positive("target", self.target)
        _nonneg_int("warmup_steps", self.warmup_steps)
        _nonneg_int("decay_updates", self.decay_updates, 1)
        _nonneg_int("update_every", self.update_every, 1)

    @property
    def alpha(self) -> float:
        """The per-update decay rate, ``2 |log10(start/target)| / N`` clipped to [0, 1]."""
        return min(1.0, 2.0 * abs(math.log10(self.start / self.target)) / self.decay_updates)

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return float(self.start)
        j = (step - self.warmup_steps) // self.update_every + 1
        return float(self.target + (self.start - self.target) * (1.0 - self.alpha) ** j)


def warmup_multistep(
    warmup_steps: int, milestones: Sequence[int] = (), gamma: float = 0.1
) -> Callable[[int], float]:
    """Learning-rate multiplier for ``torch.optim.lr_scheduler.LambdaLR``.

    Linear warm-up ``(t + 1) / warmup_steps`` for ``t < warmup_steps``, then ``gamma ** k`` where
    k is the number of milestones ``<= t`` (HyLo's scripts: 5 warm-up epochs, step decays).
    """
    _nonneg_int("warmup_steps", warmup_steps)
    if not 0 < float(gamma) <= 1:
        raise ValueError(f"gamma must be in (0, 1], got {gamma!r}")
    stones = sorted(int(m) for m in milestones)

    def multiplier(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return float(gamma) ** sum(1 for m in stones if step >= m)

    return multiplier


class SwitchRule(Protocol):
    """Chooses ``"kid"`` or ``"kis"`` for a layer at an inverse update."""

    def choose(self, layer: str, epoch: int, grad_norm: float) -> str: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class EpochWindowRule:
    """KID inside the given epoch windows ``[start, stop)``, KIS elsewhere (HyLo's scripts).

    Parameters
    ----------
    windows : sequence of (int, int)
        Half-open epoch ranges, e.g. ``((0, 10), (35, 40))`` for ResNet-32.
    """

    def __init__(self, windows: Sequence[tuple[int, int]] = ((0, 10),)) -> None:
        checked = []
        for w in windows:
            if (
                not isinstance(w, (tuple, list))
                or len(w) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in w)
                or not 0 <= w[0] <= w[1]
            ):
                raise ValueError(
                    f"windows must be pairs (start, stop) with 0 <= start <= stop, got {w!r}"
                )
            checked.append((int(w[0]), int(w[1])))
        self.windows = tuple(checked)

    def choose(self, layer: str, epoch: int, grad_norm: float) -> str:
        return "kid" if any(a <= epoch < b for a, b in self.windows) else "kis"

    def state_dict(self) -> dict[str, Any]:
        return {"windows": [list(w) for w in self.windows]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.windows = tuple((int(a), int(b)) for a, b in state["windows"])


class GradNormChangeRule:
    """KID where a layer's gradient norm changes fast, KIS elsewhere.

    At each inverse update the rule receives the mean gradient norm of the layer over the steps
    since the previous update, and picks KID when ``|norm - previous| / previous > threshold``
    (and at the first update, when there is no history: training starts in a critical regime).

    Parameters
    ----------
    threshold : float
        Relative change above which a layer is in a critical regime (> 0).
    """

    def __init__(self, threshold: float = 0.1) -> None:
        self.threshold = _positive("threshold", threshold)
        self.previous: dict[str, float] = {}
        self.last_change: dict[str, float] = {}

    def choose(self, layer: str, epoch: int, grad_norm: float) -> str:
        prev = self.previous.get(layer)
        self.previous[layer] = float(grad_norm)
        if prev is None or prev <= 0.0 or not math.isfinite(prev):
            self.last_change[layer] = math.inf
            return "kid"
        change = abs(float(grad_norm) - prev) / prev
        self.last_change[layer] = change
        return "kid" if change > self.threshold else "kis"

    def state_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "previous": dict(self.previous)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.threshold = float(state["threshold"])
        self.previous = {str(k): float(v) for k, v in state["previous"].items()}

"""The training summary of an asynchronous linear model: the trajectory and the run's counters."""

from __future__ import annotations

from typing import Any

__all__ = ["AsyncTrainingSummary"]


class AsyncTrainingSummary:
    """What a fit recorded (available as ``model.summary`` on the fitted model, not after load).

    Attributes
    ----------
    trajectory : list of dict
        ``{"seconds", "updates", "objective"}`` per snapshot, in time order: the objective of
        the *training problem* (standardized features when ``standardization`` is on, penalty
        included) at snapshots taken every ``evalEvery`` seconds and evaluated after training.
    objectiveHistory : list of float
        The objective values of :attr:`trajectory` (the name pyspark.ml uses).
    totalUpdates : int
        Model updates applied.
    wallSeconds : float
        Training time (staging, scanning and evaluation excluded).
    stoppedBy : str
        ``"max_updates"`` or ``"time_budget"``.
    stepSize : float
        The step the rule used (after ``auto``).
    stalenessHistogram : dict of int to int
        Accepted results by staleness.
    trace : list of dict
        One record per update (seconds, version, staleness, block, objective or None), as
        ``async-spark train --out`` writes to ``trace.jsonl``.
    """

    def __init__(
        self, trajectory: list[dict[str, Any]], run: dict[str, Any], trace: list[dict[str, Any]]
    ) -> None:
        self.trajectory = trajectory
        self._run = run
        self.trace = trace

    @classmethod
    def from_result(cls, result: Any) -> AsyncTrainingSummary:
        trajectory = [
            {"seconds": float(s), "updates": int(v), "objective": float(f)}
            for s, v, f in result.snapshots
        ]
        return cls(trajectory, result.summary(), list(result.trace))

    @property
    def objectiveHistory(self) -> list[float]:
        return [r["objective"] for r in self.trajectory]

    @property
    def totalUpdates(self) -> int:
        return int(self._run["updates"])

    @property
    def wallSeconds(self) -> float:
        return float(self._run["wall_seconds"])

    @property
    def stoppedBy(self) -> str:
        return str(self._run["stopped_by"])

    @property
    def stepSize(self) -> float:
        return float(self._run["step"])

    @property
    def finalObjective(self) -> float:
        return float(self._run["final_objective"])

    @property
    def stalenessHistogram(self) -> dict[int, int]:
        """Accepted results by staleness."""
        return {int(k): int(v) for k, v in self._run["staleness_histogram"]}

    def asDict(self) -> dict[str, Any]:
        """The run summary (the keys of ``summary.json``)."""
        return dict(self._run)

    def toPandas(self) -> Any:
        """:attr:`trajectory` as a pandas DataFrame (columns seconds, updates, objective)."""
        import pandas as pd

        return pd.DataFrame(self.trajectory, columns=["seconds", "updates", "objective"])

    def __repr__(self) -> str:
        return (
            f"AsyncTrainingSummary(updates={self.totalUpdates}, seconds={self.wallSeconds:.2f}, "
            f"objective={self.finalObjective:.6g}, stoppedBy={self.stoppedBy!r})"
        )

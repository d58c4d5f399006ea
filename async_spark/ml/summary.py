"""The training summary of an asynchronous linear model: the trajectory and the run's counters."""

from __future__ import annotations

import os
from pathlib import Path
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
    gradientNorm, startGradientNorm : float or None
        The training objective's gradient norm (with l1: its smallest subgradient's) at the
        returned model and at the start, computed by the evaluation job: 0 exactly at the
        optimum, so their ratio says how far the fit got whatever stopped it.
    stalenessHistogram : dict of int to int
        Accepted results by staleness.
    stepSafeguard : dict or None
        The step safeguard's record (``None`` with ``stepSafeguard=False``): ``final_step``,
        ``raised``, ``lowered`` and ``changes`` (one dict per change: ``kind``, ``why``, ``update``,
        ``seconds``, ``from`` and ``to``, the windows' objectives).
    blockWeights : dict or None
        Asynchronous SGD and momentum with block weights on (the ``blockWeights`` Param):
        ``shares``, each block's share of the recent results at the end, and ``weight_range``,
        the smallest and largest weight a result got (``None`` before any was weighted). A
        block whose share stays far below ``1 / numPartitions`` is a straggler the weights made
        up for (docs/steps.md, "Block weights"). ``None`` for the other methods and with the
        weights off.
    momentum : dict or None
        A momentum method's (alpha, beta): how they were chosen, ``final_beta`` after the
        safeguard's retune, and whether the momentum was ``restart``-ed (``None`` for the other
        methods).
    trace : list of dict
        One record per update (seconds, version, staleness, block, objective or None), as
        ``async-spark train --out`` writes to ``trace.jsonl``.
    accuracy, weightedPrecision, areaUnderROC, logLoss, r2, rootMeanSquaredError, ... :
        After a fit, the metrics of the model's predictions on the training DataFrame, as
        pyspark.ml's training summaries have them: every attribute of the summary that
        ``model.evaluate`` returns (:mod:`async_spark.ml.evaluation`), computed on first use.
    """

    def __init__(
        self, trajectory: list[dict[str, Any]], run: dict[str, Any], trace: list[dict[str, Any]]
    ) -> None:
        self.trajectory = trajectory
        self._run = run
        self.trace = trace
        # the fitted model's evaluate() on the training DataFrame (set by the fit): its metrics
        # are computed on first use
        self._metrics: Any = None

    def attach_metrics(self, metrics: Any) -> None:
        """Answer the attributes of ``metrics`` (the model's :meth:`evaluate` summary of the
        training rows: ``accuracy``, ``areaUnderROC``, ``r2``, ...; :mod:`.evaluation`) as
        pyspark.ml's training summaries do."""
        self._metrics = metrics

    def __getattr__(self, name: str) -> Any:
        # only attributes this class lacks reach here: the training rows' metrics, if attached
        metrics = self.__dict__.get("_metrics")
        if name.startswith("_") or metrics is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(metrics, name)

    def __getstate__(self) -> dict[str, Any]:
        # the metrics hold the training DataFrame, which does not travel: the record does
        return {**self.__dict__, "_metrics": None}

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
    def gradientNorm(self) -> float | None:
        """The objective's gradient norm at the returned model (with l1: its smallest
        subgradient's), in the coordinates trained: 0 exactly at the optimum. Compare it with
        :attr:`startGradientNorm` to see how far the run got."""
        value = self._run.get("gradient_norm")
        return None if value is None else float(value)

    @property
    def startGradientNorm(self) -> float | None:
        """The same norm at the model the run started from."""
        value = self._run.get("gradient_norm_start")
        return None if value is None else float(value)

    @property
    def stalenessHistogram(self) -> dict[int, int]:
        """Accepted results by staleness."""
        return {int(k): int(v) for k, v in self._run["staleness_histogram"]}

    @property
    def stepSafeguard(self) -> dict[str, Any] | None:
        guard = self._run.get("step_safeguard")
        if not guard:
            return None
        keep = ("final_step", "raised", "lowered", "changes")
        return {k: guard[k] for k in keep if k in guard}

    @property
    def blockWeights(self) -> dict[str, Any] | None:
        return self._run.get("block_weights")

    @property
    def momentum(self) -> dict[str, Any] | None:
        return self._run.get("momentum")

    def asDict(self) -> dict[str, Any]:
        """The run summary (the keys of ``summary.json``)."""
        return dict(self._run)

    def plot(
        self,
        path: str | os.PathLike[str],
        *,
        optimum: float | None = None,
        tolerance: float | None = 1e-2,
        title: str | None = None,
    ) -> Path:
        """Draw the run's objective against training seconds into the PNG file ``path``.

        The figure of ``async-spark train --plot`` and of the main job's report
        (:func:`async_spark.reporting.plots.plot_objective`): the objective of the snapshots
        against wall-clock training seconds and, without ``optimum``, against model updates;
        with ``optimum`` (:math:`F^*`, the minimum of the same training problem), the relative
        suboptimality :math:`(F - F^*)/|F^*|` on a log scale, ``tolerance`` dotted.

        Parameters
        ----------
        path : str or path-like
            A file name ending in ``.png``; written atomically, missing parent folders created.
        optimum, tolerance, title
            As :func:`~async_spark.reporting.plots.plot_objective`.

        Returns
        -------
        pathlib.Path
            ``path``.

        Raises
        ------
        ValueError
            ``path`` is no ``.png`` file name, is a folder, or its folder cannot be created
            (the message names the path).
        ImportError
            matplotlib is not installed (the ``data`` extra).
        """
        from async_spark.reporting.plots import Run, plot_objective, require_matplotlib

        out = _png_path(path)
        require_matplotlib("AsyncTrainingSummary.plot")
        method = str(self._run.get("method", "run"))
        run = Run(out.parent, method, self._run, self.trace)
        return plot_objective([run], out, optimum=optimum, tolerance=tolerance, title=title)

    def toPandas(self) -> Any:
        """:attr:`trajectory` as a pandas DataFrame (columns seconds, updates, objective)."""
        import pandas as pd

        return pd.DataFrame(self.trajectory, columns=["seconds", "updates", "objective"])

    def __repr__(self) -> str:
        return (
            f"AsyncTrainingSummary(updates={self.totalUpdates}, seconds={self.wallSeconds:.2f}, "
            f"objective={self.finalObjective:.6g}, stoppedBy={self.stoppedBy!r})"
        )


def _png_path(path: Any) -> Path:
    """``path`` as a Path to a PNG file whose folder exists (created), or one ValueError."""
    if not isinstance(path, str | os.PathLike):
        raise ValueError(f"path must be a file name ending in .png, got {path!r}")
    out = Path(path)
    if out.suffix.lower() != ".png":
        raise ValueError(f"path must be a file name ending in .png, got {str(path)!r}")
    if out.is_dir():
        raise ValueError(f"path {str(path)!r} is a folder; give a file name ending in .png")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(
            f"path {str(path)!r}: its folder {str(out.parent)!r} cannot be created "
            f"({exc.strerror or type(exc).__name__})"
        ) from None
    if not os.access(out.parent, os.W_OK):
        raise ValueError(f"path {str(path)!r}: its folder {str(out.parent)!r} is not writable")
    return out

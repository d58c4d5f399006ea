"""What an MLflow run of a linear training job holds (used by the CLI and the Estimators).

Params: the configuration and the data's shape. Metrics: the objective at each evaluated snapshot
as a series (step = model version, timestamp = training time) and the summary's figures.
Artifacts: whatever ``write_artifacts(folder)`` writes (the run's outputs).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from async_spark.reporting.tracking import MlflowRun

from .linear import TrainResult

__all__ = ["RUN_FILES", "SUMMARY_METRICS", "log_linear_result"]

RUN_FILES = ("summary.json", "trace.jsonl", "model.npz")

SUMMARY_METRICS = (
    "final_objective",
    "gradient_norm",
    "wall_seconds",
    "time_to_target",
    "updates",
    "results_accepted",
    "rejected",
    "cancelled",
    "failed",
    "mean_staleness",
    "max_staleness",
    "straggler_base_seconds",
)


def log_linear_result(
    run: MlflowRun,
    result: TrainResult,
    *,
    out_dir: str | None = None,
    write_artifacts: Callable[[str], None] | None = None,
    extra_params: Mapping[str, Any] | None = None,
) -> None:
    """Log ``result`` to ``run``; artifacts from ``out_dir``, or written by ``write_artifacts``
    into a temporary folder (default: :func:`~.outputs.write_run`)."""
    summary = result.summary()
    run.log_params(
        {
            **result.config.as_dict(),
            "n": summary["n"],
            "d": summary["d"],
            "nnz": summary["nnz"],
            "policy": summary["policy"],
            "step_used": summary["step"],
            **(extra_params or {}),
        }
    )
    run.log_series(
        "objective", ((version, value, seconds) for seconds, version, value in result.snapshots)
    )
    run.log_metrics({k: summary.get(k) for k in SUMMARY_METRICS})
    run.set_tags({"stopped_by": summary["stopped_by"]})
    if out_dir is not None and write_artifacts is None:
        # the run's outputs only: not its checkpoints/ nor files an earlier run left there
        for name in RUN_FILES:
            path = os.path.join(out_dir, name)
            if os.path.exists(path):
                run.log_artifact(path)
        return
    if write_artifacts is None:
        from .outputs import write_run

        def write_artifacts(folder: str) -> None:
            write_run(result, folder)

    with tempfile.TemporaryDirectory(prefix="async-spark-mlflow-") as folder:
        write_artifacts(folder)
        run.log_artifacts(folder)

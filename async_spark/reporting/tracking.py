"""Optional MLflow tracking of training runs.

``mlflow`` (or the lighter ``mlflow-skinny``) is an optional dependency: ``pip install
'async-spark[tracking]'``. Without it, asking for tracking fails at once with a message that says
so, before any training starts.

The tracking server is MLflow's usual one: ``tracking_uri`` or the ``MLFLOW_TRACKING_URI``
environment variable; the experiment is ``experiment``, ``MLFLOW_EXPERIMENT_NAME``, the one chosen
with ``mlflow.set_experiment()`` (``MLFLOW_EXPERIMENT_ID``) or ``async-spark``. A run started in the caller's thread with ``mlflow.start_run()`` (a notebook) is
the parent of ours. Everything goes through ``MlflowClient`` with an explicit run id, so several
runs can be logged from threads at once (``CrossValidator(parallelism=k)``).

A series (the objective over updates) is logged with its training time as the timestamp, so
MLflow's "relative time" axis is training time.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["MlflowRun", "TrackingError", "active_run_id", "require_mlflow", "flatten_params"]

DEFAULT_EXPERIMENT = "async-spark"
MAX_PARAM_LENGTH = 500  # MLflow's limit for a parameter value on older servers
BATCH = 1000  # metrics per log_batch call (MLflow's limit)

INSTALL_HINT = (
    "MLflow tracking needs the mlflow package, which is not installed: "
    "pip install 'async-spark[tracking]' (or mlflow / mlflow-skinny)"
)


class TrackingError(RuntimeError):
    """The tracking server refused or could not be reached."""


def require_mlflow() -> Any:
    """Import mlflow or raise ImportError with the install command."""
    try:
        import mlflow
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return mlflow


def active_run_id() -> str | None:
    """The MLflow run active in this thread, or None (also when mlflow is not installed)."""
    try:
        import mlflow
    except ImportError:
        return None
    run = mlflow.active_run()
    return None if run is None else run.info.run_id


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mappings become dotted keys; values become strings MLflow accepts."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, f"{name}."))
            continue
        text = "None" if value is None else str(value)
        if len(text) > MAX_PARAM_LENGTH:
            text = text[: MAX_PARAM_LENGTH - 3] + "..."
        flat[name] = text
    return flat


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class MlflowRun:
    """One MLflow run, created at construction and ended by :meth:`end` (or ``with``).

    Parameters
    ----------
    run_name : str
    experiment : str, optional
        Experiment name (created if missing).
    tracking_uri : str, optional
    tags : mapping, optional
    parent_run_id : str, optional
        Nest under this run (and log into its experiment); the active run of the calling
        thread, if any, takes precedence.
    """

    def __init__(
        self,
        run_name: str,
        *,
        experiment: str | None = None,
        tracking_uri: str | None = None,
        tags: Mapping[str, str] | None = None,
        parent_run_id: str | None = None,
    ) -> None:
        mlflow = require_mlflow()
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        self._metric_cls, self._param_cls = Metric, Param
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or mlflow.get_tracking_uri()
        name = experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
        # mlflow.set_experiment() in a notebook records the experiment's id in the environment
        experiment_id_env = None if experiment else os.environ.get("MLFLOW_EXPERIMENT_ID")
        all_tags = {"mlflow.runName": run_name, "mlflow.source.name": "async-spark"}
        active = mlflow.active_run()
        if active is not None:  # the caller's run (a notebook cell) is our parent
            parent_run_id = active.info.run_id
        if parent_run_id is not None:
            all_tags["mlflow.parentRunId"] = parent_run_id
        all_tags.update(tags or {})
        try:
            self.client = MlflowClient(tracking_uri=uri)
            if parent_run_id is not None:
                experiment_id = self.client.get_run(parent_run_id).info.experiment_id
            elif experiment_id_env and not os.environ.get("MLFLOW_EXPERIMENT_NAME"):
                experiment_id = experiment_id_env
            else:
                found = self.client.get_experiment_by_name(name)
                experiment_id = (
                    found.experiment_id
                    if found is not None
                    else self.client.create_experiment(name)
                )
            run = self.client.create_run(experiment_id, tags=all_tags, run_name=run_name)
        except Exception as exc:
            hint = ""
            if not (tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")):
                hint = (
                    " (MLflow's default store; point --mlflow-uri or MLFLOW_TRACKING_URI at your "
                    "tracking server, e.g. http://host:5000)"
                )
            raise TrackingError(
                f"MLflow tracking at {uri!r} (experiment {name!r}) failed{hint}: "
                f"{' '.join(str(exc).split())[:300]}"
            ) from exc
        self.tracking_uri = uri
        self.experiment_id = experiment_id
        self.run_id: str = run.info.run_id
        self.start_ms = int(run.info.start_time or time.time() * 1000)
        self.ended = False

    # --- logging ------------------------------------------------------------------------------
    def log_params(self, params: Mapping[str, Any]) -> None:
        flat = flatten_params(params)
        items = [self._param_cls(k, v) for k, v in flat.items()]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def log_metrics(self, metrics: Mapping[str, Any], step: int = 0) -> None:
        """Scalars; None and non-finite values are skipped (MLflow cannot show them)."""
        now = int(time.time() * 1000)
        items = [
            self._metric_cls(k, v, now, step)
            for k, raw in metrics.items()
            if (v := _finite(raw)) is not None
        ]
        self._log_metric_items(items)

    def log_series(self, name: str, points: Iterable[tuple[int, Any, float]]) -> int:
        """``(step, value, seconds)`` points; ``seconds`` of training sets the timestamp."""
        items = [
            self._metric_cls(name, v, self.start_ms + int(1000 * seconds), int(step))
            for step, raw, seconds in points
            if (v := _finite(raw)) is not None
        ]
        self._log_metric_items(items)
        return len(items)

    def _log_metric_items(self, items: list[Any]) -> None:
        for i in range(0, len(items), BATCH):
            self.client.log_batch(self.run_id, metrics=items[i : i + BATCH])

    def log_artifact(self, local_path: str | os.PathLike[str]) -> None:
        self.client.log_artifact(self.run_id, os.fspath(local_path))

    def log_artifacts(
        self, local_dir: str | os.PathLike[str], artifact_path: str | None = None
    ) -> None:
        self.client.log_artifacts(self.run_id, os.fspath(local_dir), artifact_path)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        for key, value in tags.items():
            self.client.set_tag(self.run_id, key, str(value))

    def end(self, status: str = "FINISHED") -> None:
        """FINISHED, FAILED or KILLED (idempotent)."""
        if self.ended:
            return
        self.client.set_terminated(self.run_id, status)
        self.ended = True

    def __enter__(self) -> MlflowRun:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.end("FINISHED")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.end("KILLED")
        else:
            self.end("FAILED")

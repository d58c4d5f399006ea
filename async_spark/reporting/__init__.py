"""Watching runs: a progress bar (tqdm) and optional MLflow tracking.

A leaf package: it imports nothing else of async_spark, so solvers, the CLI and the pyspark.ml
Estimators can all use it.
"""

from .progress import TrainingProgress, in_notebook
from .tracking import MlflowRun, TrackingError, flatten_params, require_mlflow

__all__ = [
    "MlflowRun",
    "TrackingError",
    "TrainingProgress",
    "flatten_params",
    "in_notebook",
    "require_mlflow",
]

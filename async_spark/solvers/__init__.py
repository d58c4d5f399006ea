"""Training loops that join an update rule, a model and the engine."""

from .config import LINEAR_METHODS, ConfigError, TrainConfig
from .evaluate import Evaluator
from .linear import TrainResult, build_model, train_linear
from .outputs import load_linear_model, write_run

__all__ = [
    "LINEAR_METHODS",
    "ConfigError",
    "Evaluator",
    "TrainConfig",
    "TrainResult",
    "build_model",
    "load_linear_model",
    "train_linear",
    "write_run",
]

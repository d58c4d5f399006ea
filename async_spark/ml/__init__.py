"""pyspark.ml Estimators and Models over the asynchronous solvers.

- :class:`AsyncLogisticRegression` / :class:`AsyncLogisticRegressionModel` (binomial and
  multinomial, ``family``);
- :class:`AsyncLinearRegression` / :class:`AsyncLinearRegressionModel`;
- :class:`AsyncTrainingSummary`: the trajectory (objective over time and updates) of a fit, and
  the training rows' metrics;
- :class:`AsyncClassificationSummary` / :class:`AsyncRegressionSummary`: ``model.evaluate(df)``,
  pyspark.ml's summary metrics (accuracy, areaUnderROC, r2, ...).

They follow pyspark.ml's conventions (Params with type converters and defaults, ``copy``,
``fit``/``transform``, ``write``/``read`` without pickle) and work inside ``Pipeline``,
``CrossValidator`` and ``TrainValidationSplit``. See ``docs/ml.md``.
"""

from ._params import ParamValueError
from .classification import AsyncLogisticRegression, AsyncLogisticRegressionModel
from .evaluation import AsyncClassificationSummary, AsyncRegressionSummary
from .regression import AsyncLinearRegression, AsyncLinearRegressionModel
from .summary import AsyncTrainingSummary

__all__ = [
    "AsyncClassificationSummary",
    "AsyncRegressionSummary",
    "AsyncLinearRegression",
    "AsyncLinearRegressionModel",
    "AsyncLogisticRegression",
    "AsyncLogisticRegressionModel",
    "AsyncTrainingSummary",
    "ParamValueError",
]

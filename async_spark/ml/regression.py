r"""Least-squares linear regression trained by the asynchronous solvers.

.. math::
    \min_{w, b}\; \frac1{2n}\sum_{i=1}^n (w^T x_i + b - y_i)^2
    + \lambda\left(\alpha\|w\|_1 + \frac{1-\alpha}{2}\|w\|_2^2\right)

:class:`AsyncLinearRegression` is a pyspark.ml ``Predictor``; its model adds ``predictionCol``.
Unlike :class:`pyspark.ml.regression.LinearRegression`, the label is never standardized, so with
``regParam > 0`` the two solve different problems (pyspark.ml scales λ by the label's standard
deviation when ``standardization`` is on); with ``regParam = 0`` they agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pyspark import keyword_only
from pyspark.ml.base import PredictionModel, Predictor
from pyspark.ml.linalg import DenseVector, Vector
from pyspark.ml.util import DefaultParamsReadable, DefaultParamsWritable, MLReadable, MLWritable

from ._fit import _check_columns, fit_linear, fit_multiple
from ._io import LinearModelReader, LinearModelWriter
from ._params import _AsyncLinearParams, _HasSetters
from .classification import _margins
from .evaluation import AsyncRegressionSummary, with_output_columns
from .summary import AsyncTrainingSummary

__all__ = ["AsyncLinearRegression", "AsyncLinearRegressionModel"]


class AsyncLinearRegressionModel(PredictionModel, _AsyncLinearParams, MLWritable, MLReadable):
    """A fitted linear regression: :attr:`coefficients`, :attr:`intercept`, :attr:`summary`."""

    def __init__(self) -> None:
        super().__init__()
        self._W = np.zeros((1, 1))
        self._b = np.zeros(1)
        self._num_classes = 0
        self._multinomial = False
        self._summary: AsyncTrainingSummary | None = None

    @classmethod
    def _from_arrays(
        cls, W: np.ndarray, b: np.ndarray, *, num_classes: int = 0, multinomial: bool = False
    ) -> AsyncLinearRegressionModel:
        model = cls()
        model._W = np.array(W, dtype=np.float64, ndmin=2)
        model._b = np.array(b, dtype=np.float64, ndmin=1)
        return model

    @property
    def numFeatures(self) -> int:
        return int(self._W.shape[1])

    @property
    def coefficients(self) -> DenseVector:
        return DenseVector(self._W[0])

    @property
    def intercept(self) -> float:
        return float(self._b[0])

    @property
    def hasSummary(self) -> bool:
        return self._summary is not None

    @property
    def summary(self) -> AsyncTrainingSummary:
        if self._summary is None:
            raise RuntimeError(
                "no training summary for this AsyncLinearRegressionModel (only a freshly fitted "
                "model has one)"
            )
        return self._summary

    def predict(self, value: Vector) -> float:
        return float(_margins(self._W, self._b, value)[0])

    def _transform(self, dataset: Any) -> Any:
        from pyspark.sql import functions as F
        from pyspark.sql.types import DoubleType

        features, out = self.getFeaturesCol(), self.getPredictionCol()
        _check_columns(dataset, features, None)
        if not out:
            return dataset
        W, b = self._W, self._b

        def predict(v):  # type: ignore[no-untyped-def]  # no hints: pyspark reads them
            return None if v is None else float(_margins(W, b, v)[0])

        return dataset.withColumn(out, F.udf(predict, DoubleType())(F.col(features)))

    def evaluate(self, dataset: Any) -> AsyncRegressionSummary:
        """The model's metrics on ``dataset`` (features and labels), as pyspark.ml's
        ``LinearRegressionModel.evaluate``: RMSE, MSE, MAE, R² and explained variance, each
        computed on first use by pyspark.ml's ``RegressionEvaluator`` over
        ``transform(dataset)``."""
        _check_columns(dataset, self.getFeaturesCol(), self.getLabelCol())
        model = with_output_columns(self, ("predictionCol",))
        columns = {n: model.getOrDefault(n) for n in ("labelCol", "featuresCol", "predictionCol")}
        through_origin = not self.getFitIntercept()
        return AsyncRegressionSummary(model.transform(dataset), columns, through_origin)

    def write(self) -> LinearModelWriter:
        return LinearModelWriter(self)

    @classmethod
    def read(cls) -> LinearModelReader[AsyncLinearRegressionModel]:
        return LinearModelReader(cls)

    def __repr__(self) -> str:
        return f"AsyncLinearRegressionModel: uid={self.uid}, numFeatures={self.numFeatures}"


class AsyncLinearRegression(
    Predictor, _AsyncLinearParams, _HasSetters, DefaultParamsWritable, DefaultParamsReadable
):
    """Linear least squares fitted on the ASYNC engine: by L-BFGS by default (``method="auto"``), or
    by asynchronous SGD/SAGA/momentum (``method``; ``docs/steps.md``, "The default method").

    Parameters: see :class:`~async_spark.ml._params._AsyncLinearParams` (``maxIter``, pyspark.ml's
    name, sets ``maxUpdates``). Keyword arguments only.
    """

    _input_kwargs: dict[str, Any]

    @keyword_only
    def __init__(
        self,
        *,
        featuresCol: str = "features",
        labelCol: str = "label",
        predictionCol: str = "prediction",
        method: str = "auto",
        stepSize: float | str = 0.0,
        momentum: float = 0.0,
        stepSafeguard: bool = True,
        momentumRestart: bool = True,
        blockWeights: bool = True,
        momentumDamping: float | None = None,
        regParam: float = 0.0,
        elasticNetParam: float = 0.0,
        standardization: bool = True,
        fitIntercept: bool = True,
        maxUpdates: int = 1000,
        maxIter: int | None = None,
        timeBudget: float = 0.0,
        tol: float = 1e-6,
        batchFraction: float = 0.0,
        numPartitions: int = 0,
        beta: float = 0.0,
        tau: int = -1,
        stragglers: str = "none",
        transport: str = "resident",
        seed: int = 0,
        evalEvery: float = 0.5,
        stagingDir: str = "",
        showProgress: bool = False,
        mlflowTracking: bool = False,
    ) -> None:
        super().__init__()
        self._set_keywords(self._input_kwargs)

    @keyword_only
    def setParams(
        self,
        *,
        featuresCol: str = "features",
        labelCol: str = "label",
        predictionCol: str = "prediction",
        method: str = "auto",
        stepSize: float | str = 0.0,
        momentum: float = 0.0,
        stepSafeguard: bool = True,
        momentumRestart: bool = True,
        blockWeights: bool = True,
        momentumDamping: float | None = None,
        regParam: float = 0.0,
        elasticNetParam: float = 0.0,
        standardization: bool = True,
        fitIntercept: bool = True,
        maxUpdates: int = 1000,
        maxIter: int | None = None,
        timeBudget: float = 0.0,
        tol: float = 1e-6,
        batchFraction: float = 0.0,
        numPartitions: int = 0,
        beta: float = 0.0,
        tau: int = -1,
        stragglers: str = "none",
        transport: str = "resident",
        seed: int = 0,
        evalEvery: float = 0.5,
        stagingDir: str = "",
        showProgress: bool = False,
        mlflowTracking: bool = False,
    ) -> AsyncLinearRegression:
        """Set the given Params (keyword arguments only)."""
        return self._set_keywords(self._input_kwargs)

    def fitMultiple(self, dataset: Any, paramMaps: Any) -> Any:
        """As pyspark.ml's, and the fits' MLflow runs nest under the caller's active run."""
        return fit_multiple(self, dataset, paramMaps)

    def _fit(self, dataset: Any) -> AsyncLinearRegressionModel:
        self._check_combinations()
        out = fit_linear(self, dataset, problem=lambda stats: ("squares", None))
        model = AsyncLinearRegressionModel._from_arrays(out.weights, out.intercepts)
        model._summary = out.summary
        self._copyValues(model)
        out.summary.attach_metrics(model.evaluate(dataset))  # the Params of the fit, lazily
        return model

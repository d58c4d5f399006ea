"""Metrics of a fitted model's predictions on a DataFrame, as pyspark.ml's model summaries.

pyspark.ml's ``LogisticRegressionModel.evaluate(df)`` returns a summary whose attributes
(``accuracy``, ``weightedPrecision``, ``areaUnderROC``, ...) are computed from the predictions;
its training summary (``model.summary``) has the same attributes on the training rows. The
models here do the same: :meth:`evaluate` returns :class:`AsyncClassificationSummary` or
:class:`AsyncRegressionSummary`, and ``model.summary`` (:class:`.summary.AsyncTrainingSummary`)
answers those attributes for the training DataFrame. Every metric is computed by pyspark.ml's own
evaluators over the predictions (distributed, on a classic or a Spark Connect session), lazily,
once per summary.
"""

from __future__ import annotations

from typing import Any, cast

__all__ = ["AsyncClassificationSummary", "AsyncRegressionSummary"]


def with_output_columns(model: Any, params: tuple[str, ...]) -> Any:
    """``model``, or a copy of it whose empty output columns (a user may turn one off) get names
    of their own, so that an evaluator can read them."""
    empty = [p for p in params if not model.getOrDefault(p)]
    if not empty:
        return model
    return model.copy({model.getParam(p): f"__async_{p}_{model.uid}" for p in empty})


class _PredictionSummary:
    """The predictions of a model on one DataFrame and the columns that name them."""

    def __init__(self, predictions: Any, columns: dict[str, str]) -> None:
        self._predictions = predictions
        self._columns = columns
        self._values: dict[tuple[str, float], float] = {}

    @property
    def predictions(self) -> Any:
        """The DataFrame the model's ``transform`` returned (the input's columns and the
        prediction columns)."""
        return self._predictions

    @property
    def labelCol(self) -> str:
        return self._columns["labelCol"]

    @property
    def featuresCol(self) -> str:
        return self._columns["featuresCol"]

    @property
    def predictionCol(self) -> str:
        return self._columns["predictionCol"]

    def _metric(self, evaluator: Any, name: str, beta: float = 1.0) -> float:
        key = (name, beta)
        if key not in self._values:
            self._values[key] = float(evaluator.evaluate(self._predictions))
        return self._values[key]


class AsyncClassificationSummary(_PredictionSummary):
    """A classifier's metrics on one DataFrame (pyspark.ml's ``LogisticRegressionSummary``, and
    ``areaUnderROC`` of its binary one); each is computed on first use by pyspark.ml's
    ``MulticlassClassificationEvaluator`` or ``BinaryClassificationEvaluator``.

    ``logLoss`` (the mean cross-entropy of ``probabilityCol``, as the evaluator's ``logLoss``:
    probabilities clipped to [1e-15, 1 - 1e-15]) is not in pyspark.ml's summary; it is the data
    term of the training objective."""

    def __init__(self, predictions: Any, columns: dict[str, str], num_classes: int) -> None:
        super().__init__(predictions, columns)
        self._num_classes = num_classes

    @property
    def probabilityCol(self) -> str:
        return self._columns["probabilityCol"]

    @property
    def rawPredictionCol(self) -> str:
        return self._columns["rawPredictionCol"]

    @property
    def labels(self) -> list[float]:
        """The class indices, 0.0 .. K-1 (pyspark.ml lists the labels it saw; this model's K)."""
        return [float(k) for k in range(self._num_classes)]

    def _multiclass(self, name: str, beta: float = 1.0) -> float:
        from pyspark.ml.evaluation import MulticlassClassificationEvaluator

        evaluator = MulticlassClassificationEvaluator(
            metricName=cast(Any, name),  # (pyspark's hints omit logLoss, which it supports)
            labelCol=self.labelCol,
            predictionCol=self.predictionCol,
            probabilityCol=self.probabilityCol,
            beta=beta,
        )
        return self._metric(evaluator, name, beta)

    @property
    def accuracy(self) -> float:
        return self._multiclass("accuracy")

    @property
    def weightedPrecision(self) -> float:
        return self._multiclass("weightedPrecision")

    @property
    def weightedRecall(self) -> float:
        return self._multiclass("weightedRecall")

    @property
    def weightedTruePositiveRate(self) -> float:
        return self._multiclass("weightedTruePositiveRate")

    @property
    def weightedFalsePositiveRate(self) -> float:
        return self._multiclass("weightedFalsePositiveRate")

    def weightedFMeasure(self, beta: float = 1.0) -> float:
        return self._multiclass("weightedFMeasure", beta)

    @property
    def logLoss(self) -> float:
        return self._multiclass("logLoss")

    @property
    def areaUnderROC(self) -> float:
        """Two classes only, as pyspark.ml's ``BinaryLogisticRegressionSummary``; exact."""
        if self._num_classes != 2:
            raise AttributeError(
                f"areaUnderROC is a binary classifier's metric; this model has "
                f"{self._num_classes} classes"
            )
        from pyspark.ml.evaluation import BinaryClassificationEvaluator

        # scored by P(class 1), as pyspark.ml's summary (a multinomial model's raw margins of
        # class 1 alone need not rank the rows as its probability does); exact (numBins=0),
        # where pyspark.ml's summary bins the curve into 100 (an approximation above 200 rows)
        evaluator = BinaryClassificationEvaluator(
            metricName="areaUnderROC",
            labelCol=self.labelCol,
            rawPredictionCol=self.probabilityCol,
            numBins=0,
        )
        return self._metric(evaluator, "areaUnderROC")


class AsyncRegressionSummary(_PredictionSummary):
    """A regression model's metrics on one DataFrame (pyspark.ml's ``LinearRegressionSummary``),
    each computed on first use by pyspark.ml's ``RegressionEvaluator``; for a model without an
    intercept ``r2`` is the uncentered one (``1 - SSE / sum y^2``), as pyspark.ml's."""

    def __init__(self, predictions: Any, columns: dict[str, str], through_origin: bool) -> None:
        super().__init__(predictions, columns)
        self._through_origin = through_origin

    def _regression(self, name: str) -> float:
        from pyspark.ml.evaluation import RegressionEvaluator

        evaluator = RegressionEvaluator(
            metricName=cast(Any, name),
            labelCol=self.labelCol,
            predictionCol=self.predictionCol,
            throughOrigin=self._through_origin,
        )
        return self._metric(evaluator, name)

    @property
    def rootMeanSquaredError(self) -> float:
        return self._regression("rmse")

    @property
    def meanSquaredError(self) -> float:
        return self._regression("mse")

    @property
    def meanAbsoluteError(self) -> float:
        return self._regression("mae")

    @property
    def r2(self) -> float:
        return self._regression("r2")

    @property
    def explainedVariance(self) -> float:
        return self._regression("var")

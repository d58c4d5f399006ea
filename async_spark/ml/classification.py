r"""Logistic regression (binomial and multinomial) trained by the asynchronous solvers.

:class:`AsyncLogisticRegression` is a pyspark.ml ``ProbabilisticClassifier``: it takes a DataFrame
with a vector column (``featuresCol``) and a label column of class indices 0..K-1 and returns an
:class:`AsyncLogisticRegressionModel` whose ``transform`` adds ``rawPredictionCol``,
``probabilityCol`` and ``predictionCol`` exactly as
:class:`pyspark.ml.classification.LogisticRegressionModel` does, so the model works with
``BinaryClassificationEvaluator`` / ``MulticlassClassificationEvaluator``, inside ``Pipeline``,
``CrossValidator`` and ``TrainValidationSplit``, and saves/loads with them.

Objective (binomial, :math:`y \in \{0, 1\}`; multinomial uses the softmax loss with K rows of
weights and K unpenalized intercepts):

.. math::
    \min_{w, b}\; \frac1n\sum_{i=1}^n \left[\log(1 + e^{w^T x_i + b}) - y_i (w^T x_i + b)\right]
    + \lambda\left(\alpha\|w\|_1 + \frac{1-\alpha}{2}\|w\|_2^2\right)

minimized by SGD/SAGA/momentum methods run by the ASYNC engine (Soori et al., "ASYNC: A Cloud
Engine with Asynchrony and History for Distributed Machine Learning", IPDPS 2020): see
:mod:`async_spark.solvers.linear`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pyspark import keyword_only
from pyspark.ml.classification import (
    ProbabilisticClassificationModel,
    ProbabilisticClassifier,
    _ProbabilisticClassifierParams,
)
from pyspark.ml.linalg import DenseMatrix, DenseVector, SparseVector, Vector
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import HasThreshold
from pyspark.ml.util import DefaultParamsReadable, DefaultParamsWritable, MLReadable, MLWritable
from scipy.special import expit, softmax

from ._fit import LabelStats, classes_for, fit_linear, fit_multiple
from ._io import LinearModelReader, LinearModelWriter
from ._params import (
    ParamValueError,
    _AsyncLinearParams,
    _checked,
    _HasSetters,
    _one_of,
    _unit_interval,
    _word,
)
from .evaluation import AsyncClassificationSummary, with_output_columns
from .summary import AsyncTrainingSummary

__all__ = ["AsyncLogisticRegression", "AsyncLogisticRegressionModel"]

FAMILIES = ("auto", "binomial", "multinomial")


class _AsyncLogisticRegressionParams(
    _ProbabilisticClassifierParams, _AsyncLinearParams, HasThreshold
):
    """:class:`_AsyncLinearParams` plus ``family`` and pyspark's ``threshold`` (``HasThreshold``,
    redefined with a range check as pyspark's ``LogisticRegression`` does)."""

    family: Param[str] = Param(
        Params._dummy(),
        "family",
        "auto | binomial | multinomial: auto is binomial for K <= 2 classes, else multinomial "
        "(as pyspark.ml).",
        typeConverter=_checked("family", _word, _one_of(FAMILIES)),
    )
    threshold: Param[float] = Param(
        Params._dummy(),
        "threshold",
        "binomial: predict 1 when P(y=1) > threshold, in [0, 1] (thresholds, if set, wins).",
        typeConverter=_checked("threshold", TypeConverters.toFloat, _unit_interval(closed=True)),
    )

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._setDefault(family="auto", threshold=0.5)

    def getFamily(self) -> str:
        return self.getOrDefault(self.family)


def _margins(W: np.ndarray, b: np.ndarray, v: Any) -> np.ndarray:
    d = W.shape[1]
    if isinstance(v, SparseVector):
        if v.size != d:
            raise ValueError(f"featuresCol: vector of size {v.size}, the model has {d} features")
        return W[:, v.indices] @ v.values + b
    x = v.toArray() if isinstance(v, Vector) else np.asarray(v, dtype=np.float64)
    if x.shape != (d,):
        raise ValueError(f"featuresCol: vector of size {x.size}, the model has {d} features")
    return W @ x + b


def _scores(
    W: np.ndarray,
    b: np.ndarray,
    multinomial: bool,
    threshold: float,
    thresholds: list[float] | None,
    v: Any,
) -> tuple[np.ndarray, np.ndarray, float]:
    """(rawPrediction, probability, prediction) of one feature vector, pyspark.ml's conventions:
    binomial raw = (-m, m), probability = (1 - σ(m), σ(m)); multinomial raw = margins,
    probability = softmax; prediction = argmax p_k / t_k with ``thresholds``, else (binomial)
    σ(m) > threshold or (multinomial) argmax."""
    z = _margins(W, b, v)
    if multinomial:
        raw = z
        prob = softmax(z)
    else:
        m = float(z[0])
        raw = np.array([-m, m])
        p1 = float(expit(m))
        prob = np.array([1.0 - p1, p1])
    if thresholds is not None:
        t = np.asarray(thresholds, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(t > 0, prob / np.where(t > 0, t, 1.0), np.inf)
        pred = float(np.argmax(ratio))
    elif multinomial:
        pred = float(np.argmax(raw))
    else:
        pred = 1.0 if prob[1] > threshold else 0.0
    return raw, prob, pred


class AsyncLogisticRegressionModel(
    ProbabilisticClassificationModel, _AsyncLogisticRegressionParams, MLWritable, MLReadable
):
    """A fitted (binomial or multinomial) logistic regression.

    Attributes: :attr:`coefficients` / :attr:`intercept` (binomial), :attr:`coefficientMatrix`
    (K x d; 1 x d for binomial) / :attr:`interceptVector`, :attr:`numClasses`,
    :attr:`numFeatures`, :attr:`summary` (after fit, not after load).
    """

    def __init__(self) -> None:
        super().__init__()
        self._W = np.zeros((1, 1))
        self._b = np.zeros(1)
        self._num_classes = 2
        self._multinomial = False
        self._summary: AsyncTrainingSummary | None = None

    @classmethod
    def _from_arrays(
        cls, W: np.ndarray, b: np.ndarray, *, num_classes: int, multinomial: bool
    ) -> AsyncLogisticRegressionModel:
        model = cls()
        model._W = np.array(W, dtype=np.float64, ndmin=2)
        model._b = np.array(b, dtype=np.float64, ndmin=1)
        model._num_classes = int(num_classes)
        model._multinomial = bool(multinomial)
        return model

    # --- attributes ---------------------------------------------------------------------------

    @property
    def numClasses(self) -> int:
        return self._num_classes

    @property
    def numFeatures(self) -> int:
        return int(self._W.shape[1])

    @property
    def isMultinomial(self) -> bool:
        return self._multinomial

    @property
    def coefficients(self) -> DenseVector:
        """Weights of the binomial model (pyspark.ml raises for multinomial models too)."""
        if self._multinomial:
            raise RuntimeError(
                "multinomial models have a matrix of coefficients; use coefficientMatrix"
            )
        return DenseVector(self._W[0])

    @property
    def intercept(self) -> float:
        if self._multinomial:
            raise RuntimeError(
                "multinomial models have a vector of intercepts; use interceptVector"
            )
        return float(self._b[0])

    @property
    def coefficientMatrix(self) -> DenseMatrix:
        K, d = self._W.shape
        return DenseMatrix(K, d, self._W.ravel().tolist(), isTransposed=True)

    @property
    def interceptVector(self) -> DenseVector:
        return DenseVector(self._b)

    @property
    def hasSummary(self) -> bool:
        return self._summary is not None

    @property
    def summary(self) -> AsyncTrainingSummary:
        if self._summary is None:
            raise RuntimeError(
                "no training summary for this AsyncLogisticRegressionModel (only a freshly "
                "fitted model has one)"
            )
        return self._summary

    def evaluate(self, dataset: Any) -> AsyncClassificationSummary:
        """The model's metrics on ``dataset`` (features and labels), as pyspark.ml's
        ``LogisticRegressionModel.evaluate``: accuracy, weighted precision, recall and F-measure,
        log loss and (binomial) the ROC area, each computed on first use by pyspark.ml's
        evaluators over ``transform(dataset)``."""
        from ._fit import _check_columns

        _check_columns(dataset, self.getFeaturesCol(), self.getLabelCol())
        model = with_output_columns(self, ("rawPredictionCol", "probabilityCol", "predictionCol"))
        columns = {
            name: model.getOrDefault(name)
            for name in (
                "labelCol",
                "featuresCol",
                "predictionCol",
                "probabilityCol",
                "rawPredictionCol",
            )
        }
        return AsyncClassificationSummary(model.transform(dataset), columns, self._num_classes)

    # --- prediction ---------------------------------------------------------------------------

    def setThreshold(self, value: float) -> AsyncLogisticRegressionModel:
        return self._set(threshold=value)

    def _thresholds(self) -> list[float] | None:
        if not self.isDefined(self.thresholds):
            return None
        t = [float(v) for v in self.getOrDefault(self.thresholds)]
        if len(t) != self._num_classes:
            raise ParamValueError(
                f"thresholds must have one value per class ({self._num_classes}), got {len(t)}"
            )
        return t

    def _score(self, value: Any) -> tuple[np.ndarray, np.ndarray, float]:
        return _scores(
            self._W, self._b, self._multinomial, self.getThreshold(), self._thresholds(), value
        )

    def predictRaw(self, value: Vector) -> DenseVector:
        return DenseVector(self._score(value)[0])

    def predictProbability(self, value: Vector) -> DenseVector:
        return DenseVector(self._score(value)[1])

    def predict(self, value: Vector) -> float:
        return self._score(value)[2]

    def _transform(self, dataset: Any) -> Any:
        from pyspark.ml.functions import array_to_vector
        from pyspark.sql import functions as F
        from pyspark.sql.types import ArrayType, DoubleType, StructField, StructType

        from ._fit import _check_columns

        features = self.getFeaturesCol()
        _check_columns(dataset, features, None)
        outputs = {
            "raw": self.getRawPredictionCol(),
            "prob": self.getProbabilityCol(),
            "pred": self.getPredictionCol(),
        }
        if not any(outputs.values()):
            return dataset
        W, b, multi = self._W, self._b, self._multinomial
        threshold, thresholds = self.getThreshold(), self._thresholds()

        def score(v):  # type: ignore[no-untyped-def]  # no hints: pyspark reads them
            if v is None:
                return None
            raw, prob, pred = _scores(W, b, multi, threshold, thresholds, v)
            return raw.tolist(), prob.tolist(), pred

        schema = StructType(
            [
                StructField("raw", ArrayType(DoubleType(), False)),
                StructField("prob", ArrayType(DoubleType(), False)),
                StructField("pred", DoubleType()),
            ]
        )
        tmp = f"__async_scores_{self.uid}"
        out = dataset.withColumn(tmp, F.udf(score, schema)(F.col(features)))
        if outputs["raw"]:
            out = out.withColumn(outputs["raw"], array_to_vector(F.col(f"{tmp}.raw")))
        if outputs["prob"]:
            out = out.withColumn(outputs["prob"], array_to_vector(F.col(f"{tmp}.prob")))
        if outputs["pred"]:
            out = out.withColumn(outputs["pred"], F.col(f"{tmp}.pred"))
        return out.drop(tmp)

    # --- persistence --------------------------------------------------------------------------

    def write(self) -> LinearModelWriter:
        return LinearModelWriter(self)

    @classmethod
    def read(cls) -> LinearModelReader[AsyncLogisticRegressionModel]:
        return LinearModelReader(cls)

    def __repr__(self) -> str:
        kind = "multinomial" if self._multinomial else "binomial"
        return (
            f"AsyncLogisticRegressionModel: uid={self.uid}, {kind}, numClasses="
            f"{self.numClasses}, numFeatures={self.numFeatures}"
        )


class AsyncLogisticRegression(
    ProbabilisticClassifier,
    _AsyncLogisticRegressionParams,
    _HasSetters,
    DefaultParamsWritable,
    DefaultParamsReadable,
):
    """Logistic regression fitted on the ASYNC engine: by L-BFGS by default (``method="auto"``), or
    by asynchronous SGD/SAGA/momentum (``method``; ``docs/steps.md``, "The default method").

    Parameters: see :class:`~async_spark.ml._params._AsyncLinearParams` (``method``,
    ``stepSize``, ``regParam``, ``elasticNetParam``, ``maxUpdates`` (or pyspark.ml's name,
    ``maxIter``), ``timeBudget``, ``tol``, ``beta``, ``tau``, ``stragglers``, ...) plus ``family``
    and ``threshold``. Keyword arguments only. A fit ends at ``maxUpdates``, ``timeBudget`` or
    once a snapshot passes the convergence test ``tol`` (pyspark.ml's default, 1e-6), whichever
    comes first: ``summary.stoppedBy``.

    Examples
    --------
    >>> from pyspark.ml import Pipeline
    >>> from pyspark.ml.feature import VectorAssembler
    >>> lr = AsyncLogisticRegression(regParam=0.01, method="asaga", maxUpdates=500)
    >>> model = Pipeline(stages=[VectorAssembler(inputCols=cols, outputCol="features"), lr]).fit(df)
    ... # doctest: +SKIP
    """

    _input_kwargs: dict[str, Any]

    @keyword_only
    def __init__(
        self,
        *,
        featuresCol: str = "features",
        labelCol: str = "label",
        predictionCol: str = "prediction",
        probabilityCol: str = "probability",
        rawPredictionCol: str = "rawPrediction",
        family: str = "auto",
        threshold: float = 0.5,
        thresholds: list[float] | None = None,
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
        probabilityCol: str = "probability",
        rawPredictionCol: str = "rawPrediction",
        family: str = "auto",
        threshold: float = 0.5,
        thresholds: list[float] | None = None,
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
    ) -> AsyncLogisticRegression:
        """Set the given Params (keyword arguments only)."""
        return self._set_keywords(self._input_kwargs)

    def setFamily(self, value: str) -> AsyncLogisticRegression:
        return self._set(family=value)

    def setThreshold(self, value: float) -> AsyncLogisticRegression:
        return self._set(threshold=value)

    def fitMultiple(self, dataset: Any, paramMaps: Any) -> Any:
        """As pyspark.ml's, and the fits' MLflow runs nest under the caller's active run."""
        return fit_multiple(self, dataset, paramMaps)

    def _problem(self, stats: LabelStats) -> tuple[str, int | None]:
        """The loss and classes for the data's labels (checked as pyspark.ml checks them)."""
        label = self.getLabelCol()
        K = classes_for(stats, label)
        family = self.getFamily()
        if family == "binomial" and K > 2:
            raise ParamValueError(
                f"family='binomial' needs labels 0 and 1, found {K} classes in column "
                f"{label!r}; use family='multinomial' or 'auto'"
            )
        if self.isDefined(self.thresholds) and len(self.getOrDefault(self.thresholds)) != K:
            raise ParamValueError(
                f"thresholds must have one value per class ({K}), got "
                f"{len(self.getOrDefault(self.thresholds))}"
            )
        if family == "multinomial" or (family == "auto" and K > 2):
            return "softmax", K
        return "logistic", None

    def _fit(self, dataset: Any) -> AsyncLogisticRegressionModel:
        self._check_combinations()
        out = fit_linear(self, dataset, problem=self._problem)
        K = out.num_classes or 2
        model = AsyncLogisticRegressionModel._from_arrays(
            out.weights, out.intercepts, num_classes=K, multinomial=out.loss == "softmax"
        )
        model._summary = out.summary
        self._copyValues(model)
        out.summary.attach_metrics(model.evaluate(dataset))  # the Params of the fit, lazily
        return model

"""The Params shared by the asynchronous linear Estimators and their Models.

Every numeric Param has a type converter that also checks the range, so a bad value is refused
where it is set (``setRegParam(-1)``, ``AsyncLogisticRegression(regParam=-1)``, a
``ParamGridBuilder`` map applied by ``copy``, or a saved model being loaded) with one
``ValueError`` naming the Param and its accepted range. Combinations (e.g. ``beta`` with a
synchronous method) are checked when :meth:`fit` starts.

Sentinels (so that every Param has a plain JSON default, as pyspark.ml writers need):

- ``stepSize = 0.0`` means **auto** (from the data, see :func:`async_spark.optim.steps.auto_step`
  and the momentum rule); the string ``"auto"`` is accepted and stored as 0.0;
- ``timeBudget = 0.0`` means no time limit (``maxUpdates`` stops the run);
- ``beta = 0.0`` means no partial barrier (fully asynchronous dispatch);
- ``tau = -1`` means no staleness bound;
- ``numPartitions = 0`` means ``sparkContext.defaultParallelism`` blocks (at most one per row).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pyspark.ml.base import _PredictorParams
from pyspark.ml.param import Param, Params, TypeConverters

from async_spark.engine.stragglers import parse_stragglers
from async_spark.solvers.config import LINEAR_METHODS, MOMENTUM_METHODS, SYNC_METHODS

__all__ = ["_AsyncLinearParams", "ParamValueError"]


class ParamValueError(ValueError):
    """A Param value outside its accepted range (the message names the Param)."""


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {value!r}")
    try:
        v = TypeConverters.toFloat(value)
    except TypeError:
        raise TypeError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v):
        raise ParamValueError(f"{name} must be a finite number, got {value!r}")
    return v


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        return TypeConverters.toInt(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r}") from None


def _float_in(
    name: str, lo: float, hi: float = math.inf, *, lo_open: bool = False, hi_open: bool = False
) -> Callable[[Any], float]:
    left, right = ("(" if lo_open else "["), (")" if hi_open or hi == math.inf else "]")
    rng = f"{left}{lo:g}, {'inf' if hi == math.inf else format(hi, 'g')}{right}"

    def convert(value: Any) -> float:
        v = _number(name, value)
        ok = (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
        if not ok:
            raise ParamValueError(f"{name} must be in {rng}, got {value!r}")
        return v

    return convert


def _int_at_least(name: str, lo: int) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        v = _integer(name, value)
        if v < lo:
            raise ParamValueError(f"{name} must be an integer >= {lo}, got {value!r}")
        return v

    return convert


def _step_size(value: Any) -> float:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return 0.0
    v = _number("stepSize", value)
    if v < 0:
        raise ParamValueError(
            f"stepSize must be 'auto' (stored as 0.0) or a number > 0, got {value!r}"
        )
    return v


def _one_of(name: str, choices: tuple[str, ...]) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a string, one of {', '.join(choices)}; got {value!r}")
        v = value.strip().lower()
        if v not in choices:
            raise ParamValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        return v

    return convert


def _stragglers(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"stragglers must be a string, got {value!r}")
    try:
        parse_stragglers(value)
    except ValueError as exc:
        raise ParamValueError(f"stragglers: {exc}") from None
    return value.strip().lower()


def _string(value: Any) -> str:
    return TypeConverters.toString(value)


class _AsyncLinearParams(_PredictorParams):
    """Params of :class:`AsyncLogisticRegression`, :class:`AsyncLinearRegression` and their Models.

    The objective (as everywhere in async_spark, intercept unpenalized) is

    .. math::
        F(w, b) = \\frac1n\\sum_i \\ell(w^T x_i + b, y_i)
                  + \\lambda\\left(\\alpha\\|w\\|_1 + \\frac{1-\\alpha}{2}\\|w\\|_2^2\\right),

    with :math:`\\lambda` = ``regParam`` and :math:`\\alpha` = ``elasticNetParam`` — the
    pyspark.ml / glmnet parametrization, i.e. ``l2 = regParam·(1−α)`` and ``l1 = regParam·α`` for
    the solvers. With ``standardization`` the problem is solved (and penalized) on features scaled
    to unit variance and the coefficients are returned on the original scale, as pyspark.ml does.
    """

    method: Param[str] = Param(
        Params._dummy(),
        "method",
        "update rule: " + ", ".join(LINEAR_METHODS) + " (a* = asynchronous; sgd/saga/hb/ag/apg "
        "are bulk-synchronous rounds).",
        typeConverter=_one_of("method", LINEAR_METHODS),
    )
    stepSize: Param[float] = Param(
        Params._dummy(),
        "stepSize",
        "step size > 0, or 0.0 / 'auto' for a step chosen from the data.",
        typeConverter=_step_size,
    )
    momentum: Param[float] = Param(
        Params._dummy(),
        "momentum",
        "momentum beta in [0, 1) for hb/ag/apg (and ahb/aag/aapg) with an explicit stepSize; "
        "ignored with stepSize auto (then chosen from (mu, L)).",
        typeConverter=_float_in("momentum", 0.0, 1.0, hi_open=True),
    )
    regParam: Param[float] = Param(
        Params._dummy(),
        "regParam",
        "regularization parameter lambda >= 0.",
        typeConverter=_float_in("regParam", 0.0),
    )
    elasticNetParam: Param[float] = Param(
        Params._dummy(),
        "elasticNetParam",
        "elastic net mixing alpha in [0, 1]: 0 is L2 (l2 = regParam (1 - alpha)), 1 is L1 "
        "(l1 = regParam alpha).",
        typeConverter=_float_in("elasticNetParam", 0.0, 1.0),
    )
    standardization: Param[bool] = Param(
        Params._dummy(),
        "standardization",
        "scale the features to unit variance before fitting (dense data is also centered); "
        "coefficients are returned on the original scale.",
        typeConverter=TypeConverters.toBoolean,
    )
    maxUpdates: Param[int] = Param(
        Params._dummy(),
        "maxUpdates",
        "stop after this many model updates (integer >= 1).",
        typeConverter=_int_at_least("maxUpdates", 1),
    )
    timeBudget: Param[float] = Param(
        Params._dummy(),
        "timeBudget",
        "stop after this many seconds of training (>= 0; 0.0 = no time limit).",
        typeConverter=_float_in("timeBudget", 0.0),
    )
    batchFraction: Param[float] = Param(
        Params._dummy(),
        "batchFraction",
        "fraction in (0, 1] of its block that one task samples.",
        typeConverter=_float_in("batchFraction", 0.0, 1.0, lo_open=True),
    )
    numPartitions: Param[int] = Param(
        Params._dummy(),
        "numPartitions",
        "number of blocks P (integer >= 0; 0 = sparkContext.defaultParallelism).",
        typeConverter=_int_at_least("numPartitions", 0),
    )
    beta: Param[float] = Param(
        Params._dummy(),
        "beta",
        "ASYNC partial barrier in [0, 1]: a new round once ceil(beta P) blocks are idle "
        "(asynchronous methods only; 0.0 = no barrier).",
        typeConverter=_float_in("beta", 0.0, 1.0),
    )
    tau: Param[int] = Param(
        Params._dummy(),
        "tau",
        "staleness bound: reject results older than tau versions (integer >= 0, asynchronous "
        "methods only; -1 = no bound).",
        typeConverter=_int_at_least("tau", -1),
    )
    stragglers: Param[str] = Param(
        Params._dummy(),
        "stragglers",
        "straggler model for experiments: none | intensity:C | cloud | slow-executor:F.",
        typeConverter=_stragglers,
    )
    seed: Param[int] = Param(
        Params._dummy(),
        "seed",
        "random seed (task samples, stragglers).",
        typeConverter=_int_at_least("seed", 0),
    )
    evalEvery: Param[float] = Param(
        Params._dummy(),
        "evalEvery",
        "seconds between snapshots of the trajectory (evaluated after training, off the "
        "clock; > 0).",
        typeConverter=_float_in("evalEvery", 0.0, lo_open=True),
    )
    stagingDir: Param[str] = Param(
        Params._dummy(),
        "stagingDir",
        "local or shared directory where fit() stages the training data as Parquet; it must be "
        "visible under the same path to the driver and every executor ('' = "
        "$ASYNC_SPARK_STAGING_DIR or <tmp>/async_spark_staging).",
        typeConverter=_string,
    )

    showProgress: Param[bool] = Param(
        Params._dummy(),
        "showProgress",
        "draw a progress bar while fitting (tqdm: a widget in a notebook, text on stderr).",
        typeConverter=TypeConverters.toBoolean,
    )
    mlflowTracking: Param[bool] = Param(
        Params._dummy(),
        "mlflowTracking",
        "log each fit as an MLflow run (nested under the active run, if any): Params, the "
        "objective over updates, the summary's figures, and the coefficients as model.npz; "
        "needs pip install 'async-spark[tracking]'.",
        typeConverter=TypeConverters.toBoolean,
    )

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._setDefault(
            method="asaga",
            stepSize=0.0,
            momentum=0.0,
            regParam=0.0,
            elasticNetParam=0.0,
            standardization=True,
            maxUpdates=1000,
            timeBudget=0.0,
            batchFraction=0.1,
            numPartitions=0,
            beta=0.0,
            tau=-1,
            stragglers="none",
            seed=0,
            evalEvery=0.5,
            stagingDir="",
            showProgress=False,
            mlflowTracking=False,
        )

    # getters (pyspark.ml style) ---------------------------------------------------------------

    def getMethod(self) -> str:
        return self.getOrDefault(self.method)

    def getStepSize(self) -> float:
        return self.getOrDefault(self.stepSize)

    def getMomentum(self) -> float:
        return self.getOrDefault(self.momentum)

    def getRegParam(self) -> float:
        return self.getOrDefault(self.regParam)

    def getElasticNetParam(self) -> float:
        return self.getOrDefault(self.elasticNetParam)

    def getStandardization(self) -> bool:
        return self.getOrDefault(self.standardization)

    def getMaxUpdates(self) -> int:
        return self.getOrDefault(self.maxUpdates)

    def getTimeBudget(self) -> float:
        return self.getOrDefault(self.timeBudget)

    def getBatchFraction(self) -> float:
        return self.getOrDefault(self.batchFraction)

    def getNumPartitions(self) -> int:
        return self.getOrDefault(self.numPartitions)

    def getBeta(self) -> float:
        return self.getOrDefault(self.beta)

    def getTau(self) -> int:
        return self.getOrDefault(self.tau)

    def getStragglers(self) -> str:
        return self.getOrDefault(self.stragglers)

    def getSeed(self) -> int:
        return self.getOrDefault(self.seed)

    def getEvalEvery(self) -> float:
        return self.getOrDefault(self.evalEvery)

    def getStagingDir(self) -> str:
        return self.getOrDefault(self.stagingDir)

    def getShowProgress(self) -> bool:
        return self.getOrDefault(self.showProgress)

    def getMlflowTracking(self) -> bool:
        return self.getOrDefault(self.mlflowTracking)

    def _check_combinations(self) -> None:
        """Cross-Param rules, checked when fit() starts (one ValueError naming the Params)."""
        method = self.getMethod()
        if method in SYNC_METHODS:
            if self.getBeta() != 0.0:
                raise ParamValueError(
                    f"beta applies to the asynchronous methods (asgd, asaga, ahb, aag, aapg), "
                    f"not method={method!r}; leave it at 0.0"
                )
            if self.getTau() != -1:
                raise ParamValueError(
                    f"tau applies to the asynchronous methods (asgd, asaga, ahb, aag, aapg), "
                    f"not method={method!r}; leave it at -1"
                )
        if method not in MOMENTUM_METHODS and self.getMomentum() != 0.0:
            raise ParamValueError(
                f"momentum applies to hb, ag, apg and their asynchronous forms, not "
                f"method={method!r}"
            )


class _HasSetters(Params):
    """``setX`` for every Param of :class:`_AsyncLinearParams` (Estimators only)."""

    def setMethod(self, value: str) -> Any:
        return self._set(method=value)

    def setStepSize(self, value: float | str) -> Any:
        return self._set(stepSize=value)

    def setMomentum(self, value: float) -> Any:
        return self._set(momentum=value)

    def setRegParam(self, value: float) -> Any:
        return self._set(regParam=value)

    def setElasticNetParam(self, value: float) -> Any:
        return self._set(elasticNetParam=value)

    def setStandardization(self, value: bool) -> Any:
        return self._set(standardization=value)

    def setMaxUpdates(self, value: int) -> Any:
        return self._set(maxUpdates=value)

    def setTimeBudget(self, value: float) -> Any:
        return self._set(timeBudget=value)

    def setBatchFraction(self, value: float) -> Any:
        return self._set(batchFraction=value)

    def setNumPartitions(self, value: int) -> Any:
        return self._set(numPartitions=value)

    def setBeta(self, value: float) -> Any:
        return self._set(beta=value)

    def setTau(self, value: int) -> Any:
        return self._set(tau=value)

    def setStragglers(self, value: str) -> Any:
        return self._set(stragglers=value)

    def setSeed(self, value: int) -> Any:
        return self._set(seed=value)

    def setEvalEvery(self, value: float) -> Any:
        return self._set(evalEvery=value)

    def setStagingDir(self, value: str) -> Any:
        return self._set(stagingDir=value)

    def setShowProgress(self, value: bool) -> Any:
        return self._set(showProgress=value)

    def setMlflowTracking(self, value: bool) -> Any:
        return self._set(mlflowTracking=value)

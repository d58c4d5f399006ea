"""The Params shared by the asynchronous linear Estimators and their Models.

Every numeric or choice Param has a type converter that also checks the range, so a bad value is
refused where it is set (``setRegParam(-1)``, ``AsyncLogisticRegression(regParam=-1)``, a
``ParamGridBuilder`` map applied by ``copy``, or a saved model being loaded) with one
:class:`ParamValueError` naming the Param and its accepted range. The ranges are not written
here: each converter calls the check of :mod:`async_spark.solvers.validation` that
:class:`~async_spark.solvers.config.TrainConfig` (so the command line) uses for the same option,
and says its :class:`~async_spark.solvers.validation.ConfigError` with the Params' names
(:data:`PARAM_NAMES`). Combinations (e.g. ``beta`` with a synchronous method) are TrainConfig's
rules too, checked when :meth:`fit` starts.

Sentinels (so that every Param has a plain JSON default, as pyspark.ml writers need):

- ``stepSize = 0.0`` means **auto** (from the data, see :func:`async_spark.optim.steps.auto_step`,
  :func:`~async_spark.optim.steps.asynchronous_step` and the momentum rule; ``docs/steps.md``); the string ``"auto"`` is accepted and stored as 0.0;
- ``timeBudget = 0.0`` means no time limit (``maxUpdates`` stops the run);
- ``tol = 0.0`` means no convergence test;
- ``beta = 0.0`` means no partial barrier (fully asynchronous dispatch);
- ``tau = -1`` means no staleness bound;
- ``numPartitions = 0`` means ``sparkContext.defaultParallelism`` blocks (at most one per row).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pyspark.ml.base import _PredictorParams
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import (
    HasElasticNetParam,
    HasFitIntercept,
    HasRegParam,
    HasStandardization,
    HasTol,
)

from async_spark.engine.policies import PartialBarrier, PolicyError, StalenessBound
from async_spark.solvers.choice import AUTO
from async_spark.solvers.config import (
    LINEAR_METHODS,
    MOMENTUM_METHODS,
    SYNC_METHODS,
    TRANSPORTS,
    ConfigError,
    TrainConfig,
)
from async_spark.solvers.validation import (
    check_choice,
    check_fraction,
    check_int,
    check_number,
    check_stragglers,
    escape,
    quote,
)

__all__ = ["ALIASES", "PARAM_NAMES", "ParamValueError", "_AsyncLinearParams"]

T = TypeVar("T")

#: TrainConfig fields -> the Estimators' Params (the rest share their name). Params that are no
#: TrainConfig field (``elasticNetParam``, ``family``, ``threshold``) are checked under their own
#: name.
PARAM_NAMES = {
    "step": "stepSize",
    "l2": "regParam",
    "l1": "regParam",
    "batch_fraction": "batchFraction",
    "partitions": "numPartitions",
    "max_updates": "maxUpdates",
    "time_budget": "timeBudget",
    "eval_every": "evalEvery",
    "momentum_damping": "momentumDamping",
    "step_safeguard": "stepSafeguard",
    "momentum_restart": "momentumRestart",
    "block_weights": "blockWeights",
    "fit_intercept": "fitIntercept",
}


#: pyspark.ml's names of Params that exist here under another name (their role is the same; the
#: Param's doc says where the meaning differs): accepted as keywords of ``__init__`` and
#: ``setParams``, and as attributes, getters and setters of the Param itself.
ALIASES = {"maxIter": "maxUpdates"}


def _param_name(field: str) -> str:
    return PARAM_NAMES.get(field, field)


class ParamValueError(ValueError):
    """A Param value outside its accepted range (the message names the Param)."""


def _checked(
    field: str,
    to: Callable[[Any], T],
    check: Callable[[str, T], T],
    *,
    unset: tuple[T, str] | None = None,
) -> Callable[[Any], T]:
    """A Param's type converter: the type from pyspark's ``TypeConverters`` (a ``TypeError``,
    which pyspark prefixes with the Param's name), then the range of ``field`` from
    :mod:`async_spark.solvers.validation`, the checks the command line uses, as a
    :class:`ParamValueError` naming the Param. ``unset = (value, meaning)`` is the sentinel that
    stands for "no value" (None or "auto" in TrainConfig): it is accepted as such, and
    ``meaning`` is added to the message.
    """
    note = "" if unset is None else f" (or {unset[0]!r} for {unset[1]})"

    def convert(value: Any) -> T:
        v = to(value)
        if unset is not None and v == unset[0]:
            return v
        try:
            return check(field, v)
        except ConfigError as exc:
            raise ParamValueError(exc.render(_param_name) + note) from None

    return convert


# Local adapters, where TrainConfig.validate() has no check of validation.py to call: it writes
# momentum's [0, 1) inline (validation.py has no interval check, which elasticNetParam and
# threshold need too), and says the engine's PolicyError (beta, tau) as a ConfigError the way it
# does; the straggler text is parsed by validation.check_stragglers, TrainConfig's own parser.
def _unit_interval(*, closed: bool) -> Callable[[str, float], float]:
    right = "]" if closed else ")"

    def check(field: str, value: float) -> float:
        v = check_number(field, value, strict=False)
        if v > 1 or (v == 1 and not closed):
            raise ConfigError(field, f"must be in [0, 1{right}, got {quote(value)}")
        return v

    return check


def _straggler_model(field: str, value: str) -> str:
    check_stragglers(field, value)
    return value.strip().lower()


def _policy_rule(rule: Callable[[Any], object]) -> Callable[[str, Any], Any]:
    def check(field: str, value: Any) -> Any:
        try:
            rule(value)
        except PolicyError as exc:
            raise ConfigError(exc.field or field, f"is not valid: {escape(str(exc))}") from None
        return value

    return check


def _at_least(low: int) -> Callable[[str, int], int]:
    return lambda field, value: check_int(field, value, low)


def _number(*, strict: bool = True) -> Callable[[str, float], float]:
    return lambda field, value: check_number(field, value, strict=strict)


def _one_of(choices: tuple[str, ...]) -> Callable[[str, str], str]:
    return lambda field, value: check_choice(field, value, choices)


def _word(value: Any) -> str:
    return TypeConverters.toString(value).strip().lower()


def _step(value: Any) -> float:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return 0.0
    try:
        return TypeConverters.toFloat(value)
    except TypeError:
        raise TypeError(f"stepSize must be a number or 'auto', got {value!r}") from None


_to_float = TypeConverters.toFloat
_to_int = TypeConverters.toInt


class _AsyncLinearParams(
    _PredictorParams, HasRegParam, HasElasticNetParam, HasStandardization, HasTol, HasFitIntercept
):
    """Params of :class:`AsyncLogisticRegression`, :class:`AsyncLinearRegression` and their Models.

    The objective (as everywhere in async_spark, intercept unpenalized) is

    .. math::
        F(w, b) = \\frac1n\\sum_i \\ell(w^T x_i + b, y_i)
                  + \\lambda\\left(\\alpha\\|w\\|_1 + \\frac{1-\\alpha}{2}\\|w\\|_2^2\\right),

    with :math:`\\lambda` = ``regParam`` and :math:`\\alpha` = ``elasticNetParam`` — the
    pyspark.ml / glmnet parametrization, i.e. ``l2 = regParam·(1−α)`` and ``l1 = regParam·α`` for
    the solvers. As in pyspark.ml the features are always scaled to unit variance for training
    and the coefficients are returned on the original scale; ``standardization`` says which
    weights the penalty acts on: the scaled columns' (True, the default) or the original
    columns' (False: scaling is then a preconditioner only and the minimizer is the raw
    problem's). ``fitIntercept`` is pyspark's Param as it is (default True): False fits no
    intercept (:math:`b = 0`) and, as pyspark.ml, scales the columns without centering them.

    ``regParam``, ``elasticNetParam`` and ``standardization`` come from pyspark's shared mixins
    (``HasRegParam``, ``HasElasticNetParam``, ``HasStandardization``: same names, meanings,
    defaults and getters). ``standardization`` is pyspark's Param as it is; the other two are
    redefined with a converter that also checks the range, as pyspark's own
    ``LogisticRegression`` redefines ``threshold``. Not adopted, their meaning differs:
    ``HasStepSize`` (here 0.0 means auto and ``"auto"`` is accepted), ``HasSeed`` (any integer,
    default a hash of the class name that its ``__init__`` sets through the converter; here an
    integer >= 0, default 0), ``HasMaxIter`` (``maxUpdates`` counts updates, and an update is
    not always an iteration). ``maxIter`` is accepted as pyspark.ml's name for ``maxUpdates`` (an
    alias, not a second Param: :attr:`maxIter`). ``tol`` is ``HasTol``'s Param, redefined with a
    range check: the gradient test of pyspark.ml's L-BFGS at every snapshot (``evalEvery``),
    default 1e-6 as pyspark.ml's.
    """

    method: Param[str] = Param(
        Params._dummy(),
        "method",
        "update rule: auto (the default: lbfgs, or asaga with stepSize, batchFraction, beta or "
        "tau set; docs/steps.md), "
        + ", ".join(LINEAR_METHODS)
        + " ("
        + ", ".join(SYNC_METHODS)
        + " are bulk-synchronous rounds, the others asynchronous).",
        typeConverter=_checked("method", _word, _one_of((AUTO, *LINEAR_METHODS))),
    )
    stepSize: Param[float] = Param(
        Params._dummy(),
        "stepSize",
        "step size > 0, or 0.0 / 'auto' for a step chosen from the data.",
        typeConverter=_checked(
            "step",
            _step,
            _number(),
            unset=(0.0, "auto, a step chosen from the data; 'auto' is accepted too"),
        ),
    )
    momentum: Param[float] = Param(
        Params._dummy(),
        "momentum",
        "momentum beta in [0, 1) for hb/ag/apg (and ahb/aag/aapg) with an explicit stepSize; "
        "ignored with stepSize auto (then chosen from (mu, L)).",
        typeConverter=_checked("momentum", _to_float, _unit_interval(closed=False)),
    )
    momentumDamping: Param[float] = Param(
        Params._dummy(),
        "momentumDamping",
        "c >= 0: asynchronous momentum (ahb/aag/aapg) uses beta / (1 + c * staleness) for a "
        "stale result (0.0 = undamped; default None: the method's, 1 for ahb with an automatic "
        "stepSize, else 0).",
        typeConverter=_checked("momentum_damping", _to_float, _number(strict=False)),
    )
    momentumRestart: Param[bool] = Param(
        Params._dummy(),
        "momentumRestart",
        "restart the momentum of synchronous ag/apg with an automatic stepSize when the step "
        "points against it (O'Donoghue & Candes' gradient scheme; docs/steps.md).",
        typeConverter=TypeConverters.toBoolean,
    )
    blockWeights: Param[bool] = Param(
        Params._dummy(),
        "blockWeights",
        "weigh each result of asgd and the asynchronous momentum methods by the inverse of its "
        "block's share of the recent results, so that a fast block does not count more "
        "(docs/steps.md).",
        typeConverter=TypeConverters.toBoolean,
    )
    stepSafeguard: Param[bool] = Param(
        Params._dummy(),
        "stepSafeguard",
        "halve the step when the losses the tasks measure on their samples rise, search an "
        "automatic stepSize upward while they clearly fall for it, and halve an automatic SGD or "
        "momentum step on plateaus (the summary's stepSafeguard lists each change).",
        typeConverter=TypeConverters.toBoolean,
    )
    regParam: Param[float] = Param(
        Params._dummy(),
        "regParam",
        HasRegParam.regParam.doc,
        typeConverter=_checked("l2", _to_float, _number(strict=False)),
    )
    elasticNetParam: Param[float] = Param(
        Params._dummy(),
        "elasticNetParam",
        HasElasticNetParam.elasticNetParam.doc
        + " Here l2 = regParam (1 - alpha) and l1 = regParam alpha.",
        typeConverter=_checked("elasticNetParam", _to_float, _unit_interval(closed=True)),
    )
    maxUpdates: Param[int] = Param(
        Params._dummy(),
        "maxUpdates",
        "stop after this many model updates (integer >= 1).",
        typeConverter=_checked("max_updates", _to_int, _at_least(1)),
    )
    tol: Param[float] = Param(
        Params._dummy(),
        "tol",
        HasTol.tol.doc
        + " Here the gradient test of pyspark.ml's L-BFGS: the fit stops once a snapshot's "
        "largest gradient entry is at most tol times its objective (0.0 = no test; maxUpdates "
        "and timeBudget stop it otherwise).",
        typeConverter=_checked("tol", _to_float, _number(strict=False)),
    )
    timeBudget: Param[float] = Param(
        Params._dummy(),
        "timeBudget",
        "stop after this many seconds of training (> 0; 0.0 = no time limit).",
        typeConverter=_checked("time_budget", _to_float, _number(), unset=(0.0, "no time limit")),
    )
    batchFraction: Param[float] = Param(
        Params._dummy(),
        "batchFraction",
        "fraction in (0, 1] of its block that one task samples (0.0 = the method's default: "
        "0.1 for saga/asaga, 1.0 for the others).",
        typeConverter=_checked(
            "batch_fraction", _to_float, check_fraction, unset=(0.0, "the method's default")
        ),
    )
    numPartitions: Param[int] = Param(
        Params._dummy(),
        "numPartitions",
        "number of blocks P (integer >= 1; 0 = sparkContext.defaultParallelism).",
        typeConverter=_checked(
            "partitions", _to_int, _at_least(1), unset=(0, "sparkContext.defaultParallelism")
        ),
    )
    beta: Param[float] = Param(
        Params._dummy(),
        "beta",
        "ASYNC partial barrier in (0, 1]: a new round once ceil(beta P) blocks are idle "
        "(asynchronous methods only; 0.0 = no barrier).",
        typeConverter=_checked(
            "beta", _to_float, _policy_rule(PartialBarrier), unset=(0.0, "no barrier")
        ),
    )
    tau: Param[int] = Param(
        Params._dummy(),
        "tau",
        "staleness bound: reject results older than tau versions (integer >= 0, asynchronous "
        "methods only; -1 = no bound).",
        typeConverter=_checked(
            "tau", _to_int, _policy_rule(StalenessBound), unset=(-1, "no staleness bound")
        ),
    )
    stragglers: Param[str] = Param(
        Params._dummy(),
        "stragglers",
        "straggler model for experiments: none | intensity:C | cloud | slow-executor:F.",
        typeConverter=_checked("stragglers", TypeConverters.toString, _straggler_model),
    )
    transport: Param[str] = Param(
        Params._dummy(),
        "transport",
        "how tasks reach the executors: resident (one Spark job of long-running tasks per fit, "
        "tickets over an authenticated socket) or jobs (one Spark job per task).",
        typeConverter=_checked("transport", _word, _one_of(TRANSPORTS)),
    )
    seed: Param[int] = Param(
        Params._dummy(),
        "seed",
        "random seed (task samples, stragglers; an integer >= 0).",
        typeConverter=_checked("seed", _to_int, _at_least(0)),
    )
    evalEvery: Param[float] = Param(
        Params._dummy(),
        "evalEvery",
        "seconds between snapshots of the trajectory (evaluated after training, off the "
        "clock; > 0).",
        typeConverter=_checked("eval_every", _to_float, _number()),
    )
    stagingDir: Param[str] = Param(
        Params._dummy(),
        "stagingDir",
        "local or shared directory where fit() stages the training data as Parquet; it must be "
        "visible under the same path to the driver and every executor ('' = "
        "$ASYNC_SPARK_STAGING_DIR or <tmp>/async_spark_staging).",
        typeConverter=TypeConverters.toString,
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
            method=AUTO,
            stepSize=0.0,
            momentum=0.0,
            momentumDamping=None,
            momentumRestart=True,
            blockWeights=True,
            stepSafeguard=True,
            regParam=0.0,
            elasticNetParam=0.0,
            standardization=True,
            fitIntercept=True,
            maxUpdates=1000,
            timeBudget=0.0,
            tol=1e-6,
            batchFraction=0.0,
            numPartitions=0,
            beta=0.0,
            tau=-1,
            stragglers="none",
            transport="resident",
            seed=0,
            evalEvery=0.5,
            stagingDir="",
            showProgress=False,
            mlflowTracking=False,
        )

    # getters (pyspark.ml style; getRegParam, getElasticNetParam and getStandardization come
    # with pyspark's mixins) -------------------------------------------------------------------

    def getMethod(self) -> str:
        return self.getOrDefault(self.method)

    def getStepSize(self) -> float:
        return self.getOrDefault(self.stepSize)

    def getMomentum(self) -> float:
        return self.getOrDefault(self.momentum)

    def getMomentumDamping(self) -> float | None:
        return self.getOrDefault(self.momentumDamping)

    def getMomentumRestart(self) -> bool:
        return self.getOrDefault(self.momentumRestart)

    def getBlockWeights(self) -> bool:
        return self.getOrDefault(self.blockWeights)

    def getStepSafeguard(self) -> bool:
        return self.getOrDefault(self.stepSafeguard)

    def getMaxUpdates(self) -> int:
        return self.getOrDefault(self.maxUpdates)

    @property
    def maxIter(self) -> Param[int]:
        """pyspark.ml's name for :attr:`maxUpdates`: the same Param (so ``addGrid(lr.maxIter,
        ...)``, ``getOrDefault("maxIter")`` and ``maxIter=`` keywords act on ``maxUpdates``, and
        ``params`` lists it once). With the default L-BFGS an update is one round of the line
        search, nearly always one iteration (pyspark.ml's); with the stochastic methods it is one
        (possibly stale) stochastic step."""
        return self.maxUpdates

    def getMaxIter(self) -> int:
        return self.getMaxUpdates()

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

    def getTransport(self) -> str:
        return self.getOrDefault(self.transport)

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

    # the Params in TrainConfig's terms --------------------------------------------------------

    def _train_fields(self) -> dict[str, Any]:
        """The TrainConfig fields these Params set (sentinels become None or ``"auto"``); the
        data, its format, the loss and the number of blocks are fit()'s."""
        lam, alpha = self.getRegParam(), self.getElasticNetParam()
        method, step = self.getMethod(), self.getStepSize()
        momentum: float | None = self.getMomentum()
        if method in MOMENTUM_METHODS:
            if step == 0.0:  # auto: (alpha, beta) are chosen from (mu, L)
                momentum = None
        elif momentum == 0.0:
            momentum = None  # set for another method, TrainConfig refuses it
        budget, beta, tau = self.getTimeBudget(), self.getBeta(), self.getTau()
        return dict(
            method=method,
            l2=lam * (1.0 - alpha),
            l1=lam * alpha,
            # as pyspark.ml: the columns are always scaled for training; standardization says
            # whether the penalty acts on the scaled or on the original columns' weights
            standardize=True,
            penalty_on="standardized" if self.getStandardization() else "original",
            fit_intercept=self.getFitIntercept(),
            step="auto" if step == 0.0 else step,
            momentum=momentum,
            momentum_damping=self.getMomentumDamping(),
            momentum_restart=self.getMomentumRestart(),
            block_weights=self.getBlockWeights(),
            step_safeguard=self.getStepSafeguard(),
            batch_fraction=self.getBatchFraction() or None,
            beta=None if beta == 0.0 else beta,
            tau=None if tau < 0 else tau,
            stragglers=self.getStragglers(),
            transport=self.getTransport(),
            seed=self.getSeed(),
            max_updates=self.getMaxUpdates(),
            time_budget=None if budget == 0.0 else budget,
            tol=self.getTol() or None,
            eval_every=self.getEvalEvery(),
            quiet=not self.getShowProgress(),
        )

    def _check_combinations(self) -> None:
        """Cross-Param rules, checked when fit() starts: TrainConfig's own, said with the Params'
        names (e.g. ``beta`` with a synchronous method, ``momentum`` with a method without)."""
        try:
            TrainConfig(**self._train_fields()).validate()
        except ConfigError as exc:
            raise ParamValueError(exc.render(_param_name)) from None


class _HasSetters(Params):
    """``setX`` for every Param of :class:`_AsyncLinearParams` (Estimators only)."""

    def _set_keywords(self, kwargs: dict[str, Any]) -> Any:
        """Set the keywords of ``__init__``/``setParams``, pyspark.ml's names (:data:`ALIASES`)
        included: an alias given as None is not given; an alias and its Param given together
        must agree (after conversion), else the keywords would race in dict order."""
        kwargs = dict(kwargs)
        for alias, name in ALIASES.items():
            if alias not in kwargs:
                continue
            value = kwargs.pop(alias)
            if value is None:
                continue
            param = self.getParam(name)
            try:
                value = param.typeConverter(value)
            except (ParamValueError, TypeError) as exc:
                raise type(exc)(f"{alias} (pyspark.ml's name for {name}): {exc}") from None
            given = kwargs.get(name)
            if given is not None and param.typeConverter(given) != value:
                raise ParamValueError(
                    f"{alias}={value!r} and {name}={given!r} set the same Param ({alias} is "
                    f"pyspark.ml's name for {name}): give one of them"
                )
            kwargs[name] = value
        return self._set(**kwargs)

    def setMethod(self, value: str) -> Any:
        return self._set(method=value)

    def setStepSize(self, value: float | str) -> Any:
        return self._set(stepSize=value)

    def setMomentum(self, value: float) -> Any:
        return self._set(momentum=value)

    def setMomentumDamping(self, value: float) -> Any:
        return self._set(momentumDamping=value)

    def setMomentumRestart(self, value: bool) -> Any:
        return self._set(momentumRestart=value)

    def setBlockWeights(self, value: bool) -> Any:
        return self._set(blockWeights=value)

    def setStepSafeguard(self, value: bool) -> Any:
        return self._set(stepSafeguard=value)

    def setRegParam(self, value: float) -> Any:
        return self._set(regParam=value)

    def setElasticNetParam(self, value: float) -> Any:
        return self._set(elasticNetParam=value)

    def setStandardization(self, value: bool) -> Any:
        return self._set(standardization=value)

    def setFitIntercept(self, value: bool) -> Any:
        return self._set(fitIntercept=value)

    def setMaxUpdates(self, value: int) -> Any:
        return self._set(maxUpdates=value)

    def setMaxIter(self, value: int) -> Any:
        """pyspark.ml's name for :meth:`setMaxUpdates`."""
        return self._set(maxUpdates=value)

    def setTimeBudget(self, value: float) -> Any:
        return self._set(timeBudget=value)

    def setTol(self, value: float) -> Any:
        return self._set(tol=value)

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

    def setTransport(self, value: str) -> Any:
        return self._set(transport=value)

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

"""The Estimators' Params without Spark: pyspark's shared mixins, ranges and combinations that are
TrainConfig's own (the same check, said with the Param's name), sentinels, types."""

from __future__ import annotations

import pytest
from pyspark.ml.param.shared import (
    HasElasticNetParam,
    HasMaxIter,
    HasRegParam,
    HasSeed,
    HasStandardization,
    HasStepSize,
    HasThreshold,
    HasTol,
)

from async_spark.ml import (
    AsyncLinearRegression,
    AsyncLinearRegressionModel,
    AsyncLogisticRegression,
    AsyncLogisticRegressionModel,
    ParamValueError,
)
from async_spark.ml._fit import _train_config
from async_spark.ml._params import ALIASES, _param_name
from async_spark.solvers.config import ConfigError, TrainConfig

CLASSES = [
    AsyncLogisticRegression,
    AsyncLogisticRegressionModel,
    AsyncLinearRegression,
    AsyncLinearRegressionModel,
]


@pytest.mark.parametrize("cls", CLASSES)
def test_shared_mixins_where_the_meaning_is_the_same(cls):
    inst = cls()
    for mixin in (HasRegParam, HasElasticNetParam, HasStandardization, HasTol):
        assert isinstance(inst, mixin), mixin
    # stepSize 0.0 = auto; seed >= 0 with default 0; maxUpdates are updates
    for mixin in (HasStepSize, HasSeed, HasMaxIter):
        assert not isinstance(inst, mixin), mixin
    # tol: pyspark.ml's default and its gradient test (recording.tolerance_met)
    assert inst.getTol() == 1e-6 and cls.tol is not HasTol.tol
    assert isinstance(inst, HasThreshold) == (cls.__name__.startswith("AsyncLogistic"))
    # pyspark's Param for standardization as it is; ours (same name) where a range is checked
    assert cls.standardization is HasStandardization.standardization
    assert cls.regParam is not HasRegParam.regParam
    assert (inst.getRegParam(), inst.getElasticNetParam(), inst.getSeed()) == (0.0, 0.0, 0)
    assert inst.getStandardization() is True


@pytest.mark.parametrize("cls", [AsyncLogisticRegression, AsyncLinearRegression])
def test_the_signatures_say_the_params_defaults(cls):
    """``help(AsyncLogisticRegression)`` shows the keyword defaults of ``__init__`` and
    ``setParams``: each must be the Param's own default (None where it has none), and every
    keyword a Param."""
    import inspect

    inst = cls()
    for fn in (cls.__init__, cls.setParams):
        keywords = {
            name: p.default
            for name, p in inspect.signature(fn).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        }
        assert keywords, fn
        for name, shown in keywords.items():
            assert inst.hasParam(name), (fn.__name__, name)
            if name in ALIASES:  # "not given": the Param it names keeps its own default
                assert shown is None and inst.getParam(name) is inst.getParam(ALIASES[name])
                continue
            default = inst.getOrDefault(name) if inst.hasDefault(name) else None
            assert shown == default and type(shown) is type(default), (fn.__name__, name, shown)
    assert inst.getMethod() == "auto"


@pytest.mark.parametrize("cls", [AsyncLogisticRegression, AsyncLinearRegression])
def test_max_iter_is_pyspark_mls_name_for_max_updates(cls):
    """pyspark.ml code that says ``maxIter`` runs unchanged: keyword, setter, getter, the Param
    in a grid; one Param underneath (listed once, saved once), and no silent choice between
    two disagreeing keywords."""
    from pyspark.ml.tuning import ParamGridBuilder

    est = cls(maxIter=50)
    assert (est.getMaxUpdates(), est.getMaxIter(), est.isSet("maxUpdates")) == (50, 50, True)
    assert est.maxIter is est.maxUpdates and est.getParam("maxIter") is est.maxUpdates
    assert [p.name for p in est.params].count("maxUpdates") == 1
    assert "maxIter" not in [p.name for p in est.params]
    assert est.setParams(maxIter=7).getMaxUpdates() == 7
    assert est.setMaxIter(9).getMaxUpdates() == 9
    grid = ParamGridBuilder().addGrid(est.maxIter, [3, 4]).build()
    assert [est.copy(m).getMaxUpdates() for m in grid] == [3, 4]
    assert cls(maxIter=5, maxUpdates=5).getMaxUpdates() == 5
    assert cls(maxIter=None).getMaxUpdates() == 1000 and not cls(maxIter=None).isSet("maxUpdates")
    with pytest.raises(ParamValueError, match="maxIter=5 and maxUpdates=6 set the same Param"):
        cls(maxIter=5, maxUpdates=6)
    with pytest.raises(
        ParamValueError, match=r"maxIter \(pyspark.ml's name for maxUpdates\).*>= 1"
    ):
        cls().setParams(maxIter=0)
    with pytest.raises(TypeError, match="maxIter"):
        cls(maxIter=2.5)
    model_cls = (
        AsyncLogisticRegressionModel
        if cls is AsyncLogisticRegression
        else (AsyncLinearRegressionModel)
    )
    assert model_cls().getMaxIter() == 1000


def _config_error(**fields):
    with pytest.raises(ConfigError) as info:
        TrainConfig(**fields).validate()
    return info.value.render(_param_name)


# (Param, bad value, the same option for TrainConfig): the Param refuses it with TrainConfig's
# message in the Param's name (plus, for a Param with a sentinel, what the sentinel means).
SAME_CHECK = [
    ("method", "adam", {"method": "adam"}),
    ("stepSize", -1.0, {"step": -1.0}),
    ("stepSize", float("inf"), {"step": float("inf")}),
    ("momentum", 1.0, {"method": "hb", "step": 0.1, "momentum": 1.0}),
    ("momentum", -0.5, {"method": "hb", "step": 0.1, "momentum": -0.5}),
    ("regParam", -1.0, {"l2": -1.0}),
    ("maxUpdates", 0, {"max_updates": 0}),
    ("timeBudget", -1.0, {"time_budget": -1.0}),
    ("tol", -1e-6, {"tol": -1e-6}),
    ("tol", float("nan"), {"tol": float("nan")}),
    ("batchFraction", -0.5, {"batch_fraction": -0.5}),
    ("batchFraction", 1.5, {"batch_fraction": 1.5}),
    ("numPartitions", -1, {"partitions": -1}),
    ("beta", 2.0, {"beta": 2.0}),
    ("beta", -0.5, {"beta": -0.5}),
    ("tau", -2, {"tau": -2}),
    ("stragglers", "sometimes", {"stragglers": "sometimes"}),
    ("stragglers", "intensity:-1", {"stragglers": "intensity:-1"}),
    ("evalEvery", 0.0, {"eval_every": 0.0}),
    ("momentumDamping", -0.5, {"momentum_damping": -0.5}),
    ("momentumDamping", float("nan"), {"momentum_damping": float("nan")}),
]


@pytest.mark.parametrize(("param", "value", "fields"), SAME_CHECK)
@pytest.mark.parametrize("cls", [AsyncLogisticRegression, AsyncLinearRegression])
def test_a_param_range_is_train_configs(cls, param, value, fields):
    expected = _config_error(**fields)
    assert expected.startswith(param + " ")
    with pytest.raises(ParamValueError) as info:
        cls(**{param: value})
    assert str(info.value).startswith(expected)
    est = cls()
    with pytest.raises(ParamValueError) as info:  # setter and copy(extra) as well
        getattr(est, "set" + param[0].upper() + param[1:])(value)
    assert str(info.value).startswith(expected)
    with pytest.raises(ParamValueError):
        est.copy({est.getParam(param): value})
    assert isinstance(info.value, ValueError)


ESTIMATOR_ONLY = [
    ("elasticNetParam", 1.5, "elasticNetParam must be in [0, 1], got 1.5"),
    ("elasticNetParam", -0.1, "elasticNetParam must be a finite number >= 0, got -0.1"),
    ("seed", -1, "seed must be an integer >= 0, got -1"),
    ("threshold", 1.2, "threshold must be in [0, 1], got 1.2"),
    ("family", "poisson", "family must be one of auto, binomial, multinomial, got 'poisson'"),
]


@pytest.mark.parametrize(("param", "value", "message"), ESTIMATOR_ONLY)
def test_estimator_only_params(param, value, message):
    with pytest.raises(ParamValueError) as info:
        AsyncLogisticRegression(**{param: value})
    assert str(info.value) == message


COMBINATIONS = [
    ({"method": "saga", "beta": 0.5}, {"method": "saga", "beta": 0.5}),
    ({"method": "sgd", "tau": 3}, {"method": "sgd", "tau": 3}),
    ({"method": "asaga", "momentum": 0.5}, {"method": "asaga", "momentum": 0.5}),
    ({"method": "dcasgd", "momentum": 0.5}, {"method": "dcasgd", "momentum": 0.5}),
    # an automatic momentum step needs l2 > 0, said in the Params' names
    ({"method": "ag"}, {"method": "ag", "l2": 0.0}),
]


@pytest.mark.parametrize(("params", "fields"), COMBINATIONS)
def test_combinations_are_train_configs(params, fields):
    est = AsyncLinearRegression(**params)  # each Param alone is fine
    with pytest.raises(ParamValueError) as info:
        est._check_combinations()
    assert str(info.value) == _config_error(**fields)


def test_an_automatic_momentum_step_without_l2_is_said_in_the_params_names():
    with pytest.raises(ParamValueError) as info:
        AsyncLogisticRegression(method="ahb")._check_combinations()  # default regParam 0.0
    assert str(info.value).startswith("regParam must be > 0 for an automatic stepSize of ahb")
    assert str(info.value).endswith("or give stepSize and momentum")


def test_sentinels_and_normalized_values():
    lr = AsyncLogisticRegression(
        stepSize=" Auto ",
        method=" AHB ",
        stragglers=" Cloud ",
        timeBudget=0,
        beta=0,
        tau=-1,
        regParam=0.1,  # an automatic momentum step needs l2 > 0
    )
    assert lr.getStepSize() == 0.0 and lr.getMethod() == "ahb" and lr.getStragglers() == "cloud"
    lr._check_combinations()  # momentum method with an auto step: momentum not asked for
    fields = lr._train_fields()
    assert fields["step"] == "auto" and fields["momentum"] is None
    assert fields["time_budget"] is None and fields["beta"] is None and fields["tau"] is None
    assert AsyncLinearRegression(numPartitions=0).getNumPartitions() == 0


def test_train_config_from_params():
    lr = AsyncLogisticRegression(
        method="apg",  # l1 needs the proximal momentum method
        stepSize=0.2,
        momentum=0.5,
        regParam=0.1,
        elasticNetParam=0.25,
        maxUpdates=7,
        timeBudget=3.0,
        batchFraction=0.5,
        seed=4,
        evalEvery=0.25,
        showProgress=True,
        stepSafeguard=False,
        momentumRestart=False,
        momentumDamping=0.3,
        tol=1e-4,
    )
    cfg = _train_config(lr, "logistic", 3, "/data")
    assert cfg == TrainConfig(
        data="/data",
        format="parquet",
        loss="logistic",
        method="apg",
        l2=0.1 * 0.75,
        l1=0.1 * 0.25,
        step=0.2,
        momentum=0.5,
        step_safeguard=False,
        momentum_restart=False,
        momentum_damping=0.3,
        batch_fraction=0.5,
        partitions=3,
        beta=None,
        tau=None,
        stragglers="none",
        seed=4,
        max_updates=7,
        time_budget=3.0,
        tol=1e-4,
        eval_every=0.25,
        quiet=False,
    )
    cfg.validate()
    asaga = _train_config(AsyncLinearRegression(beta=0.5, tau=2), "squares", 2, "/d")
    assert (asaga.step, asaga.momentum, asaga.beta, asaga.tau) == ("auto", None, 0.5, 2)
    assert asaga.time_budget is None and asaga.max_updates == 1000 and asaga.quiet
    assert asaga.tol == 1e-6  # pyspark.ml's; tol=0.0 turns the test off
    assert _train_config(AsyncLinearRegression(tol=0.0), "squares", 2, "/d").tol is None
    assert (asaga.step_safeguard, asaga.momentum_restart, asaga.momentum_damping) == (
        True,
        True,
        None,
    )  # the CLI's defaults (None: the method's damping)


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("regParam", "x"),
        ("regParam", True),
        ("maxUpdates", 2.5),
        ("seed", "1"),
        ("method", 3),
        ("standardization", 1),
        ("stepSafeguard", "yes"),
        ("momentumRestart", 0),
        ("stepSize", [0.1]),
    ],
)
def test_a_wrong_type_is_a_type_error_naming_the_param(param, value):
    with pytest.raises(TypeError, match=f'param "{param}"'):
        AsyncLogisticRegression(**{param: value})


@pytest.mark.parametrize(
    ("params", "reads"),
    [
        ({}, False),  # auto -> lbfgs: its line search reads no curvature
        ({"method": "lbfgs"}, False),
        ({"stepSize": 0.1}, True),  # auto -> asaga (a stochastic option was given)
        ({"method": "asaga"}, True),
        ({"method": "ag"}, True),
        ({"method": "sgd", "stepSize": 0.5}, True),  # the safeguard may still need it
    ],
)
def test_a_fit_measures_the_rows_curvature_only_for_a_method_that_reads_it(params, reads):
    """The job that measures the rows as trained runs only when the fit's method (``auto``
    resolved as the run resolves it) reads the curvature."""
    from async_spark.ml._fit import _reads_curvature

    for cls in (AsyncLogisticRegression, AsyncLinearRegression):
        assert _reads_curvature(cls(**params)) is reads

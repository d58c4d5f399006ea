"""``method="auto"``, the default: L-BFGS unless an option only the stochastic methods take is
given (then ASAGA); the choice and its reason are in the config and the run's summary."""

from __future__ import annotations

import pytest

from async_spark.solvers import TrainConfig, train_linear
from async_spark.solvers.choice import AUTO, choose_method
from async_spark.solvers.validation import ConfigError


def test_the_default_method_is_auto_and_resolves_to_lbfgs():
    cfg = TrainConfig(data="builtin:breast_cancer")
    assert cfg.method == AUTO and cfg.chosen_by is None
    cfg.validate()
    assert cfg.method == "lbfgs" and "no option of the stochastic methods" in cfg.chosen_by
    # validated twice (the CLI, then train_linear): the choice stays
    assert cfg.validate().method == "lbfgs" and cfg.chosen_by is not None


@pytest.mark.parametrize(
    ("option", "flag"),
    [
        ({"step": 0.1}, "--step"),
        ({"step_rule": "constant"}, "--step-rule"),
        ({"batch_fraction": 0.25}, "--batch-fraction"),
        ({"beta": 0.5}, "--beta"),
        ({"tau": 3}, "--tau"),
        ({"ssp": 2}, "--ssp"),
    ],
)
def test_an_option_of_the_stochastic_methods_chooses_asaga(option, flag):
    cfg = TrainConfig(data="builtin:breast_cancer", **option).validate()
    assert cfg.method == "asaga"
    assert cfg.chosen_by == f"{flag} is an option of the stochastic methods"


@pytest.mark.parametrize("option", [{"batch_fraction": 1.0}, {"stragglers": "cloud"}, {"l1": 0.1}])
def test_options_every_method_takes_leave_lbfgs(option):
    # a whole block per task, a straggler model (measured: L-BFGS still first) and an l1
    # penalty (OWL-QN) are L-BFGS's too
    assert TrainConfig(data="builtin:breast_cancer", **option).validate().method == "lbfgs"


def test_a_named_method_is_kept_and_no_choice_is_recorded():
    cfg = TrainConfig(data="builtin:breast_cancer", method="saga", step=0.1).validate()
    assert cfg.method == "saga" and cfg.chosen_by is None


def test_momentum_without_a_momentum_method_names_the_option():
    with pytest.raises(ConfigError) as err:
        TrainConfig(data="builtin:breast_cancer", momentum=0.9).validate()
    assert err.value.field == "momentum"
    assert "name one with --method" in str(err.value)
    with pytest.raises(ConfigError, match="momentum"):
        choose_method(TrainConfig(momentum=0.5))


def test_a_default_run_trains_with_lbfgs_and_says_why():
    cfg = TrainConfig(data="builtin:breast_cancer", l2=0.01, partitions=2, quiet=True, tol=1e-6)
    result = train_linear(cfg)
    summary = result.summary()
    assert summary["method"] == "lbfgs"
    assert summary["method_choice"]["asked"] == "auto"
    assert summary["method_choice"]["chose"] == "lbfgs"
    assert "stochastic" in summary["method_choice"]["why"]
    assert result.stopped_by in ("tolerance", "converged"), result.stopped_by
    named = train_linear(
        TrainConfig(data="builtin:breast_cancer", method="lbfgs", l2=0.01, partitions=2, quiet=True)
    )
    assert named.summary()["method_choice"] is None


def _separable(n=200, d=5, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    w = rng.standard_normal(d)
    y = (X @ w > 0).astype(float)
    X += 0.5 * np.sign(X @ w)[:, None] * w / np.linalg.norm(w)  # a margin around the plane
    return X, y


@pytest.mark.parametrize("l2", [0.0, 1e-3])
def test_separable_rows_without_a_penalty_are_named(caplog, l2):
    """L-BFGS (the default) at l2 = 0 on separable rows drives the loss to 0 and the weights
    up: a warning says why; with a penalty the objective has a minimum and nothing is said."""
    import logging

    X, y = _separable()
    cfg = TrainConfig(data=(X, y), l2=l2, partitions=2, quiet=True, max_updates=2000)
    with caplog.at_level(logging.WARNING, logger="async_spark.solvers.linear"):
        result = train_linear(cfg)
    said = [r.getMessage() for r in caplog.records if "linearly separable" in r.getMessage()]
    if l2 == 0.0:
        assert result.final_objective < 1e-6
        assert len(said) == 1 and "set l2 (--l2, regParam) > 0" in said[0], said
    else:
        assert result.final_objective > 1e-3 and said == []

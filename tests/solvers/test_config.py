"""TrainConfig checks each option once and names it: the field, the CLI flag, the Estimator Param."""

from __future__ import annotations

import os

import pytest

from async_spark.ml._fit import _param_name
from async_spark.solvers.config import LINEAR_METHODS, SYNC_METHODS, TrainConfig
from async_spark.solvers.methods import METHODS
from async_spark.solvers.validation import ConfigError, flag_name

BAD = [
    (dict(method="adam"), "method", "must be one of auto, sgd"),
    (dict(loss="hinge"), "loss", "must be one of auto, logistic, squares, softmax"),
    (dict(step=-1.0), "step", "must be a finite number > 0"),
    (dict(step="fast"), "step", "must be a finite number > 0"),
    (dict(l2=-1e-3), "l2", "must be a finite number >= 0"),
    (dict(batch_fraction=1.5), "batch_fraction", "must be in (0, 1]"),
    (dict(partitions=0), "partitions", "must be an integer >= 1"),
    (dict(method="sgd", tau=2), "tau", "applies to the asynchronous methods"),
    (dict(method="asgd", beta=2.0), "beta", "beta (partial barrier) must be in (0, 1]"),
    (dict(method="asgd", ssp=-1), "ssp", "ssp slack s must be an integer >= 0"),
    (dict(method="hb", step=0.1, momentum=1.0), "momentum", "must be in [0, 1)"),
    (dict(method="saga", momentum=0.5), "momentum", "applies to hb"),
    (dict(stragglers="sometimes"), "stragglers", "unknown straggler model"),
    (dict(checkpoint_every=5), "checkpoint_every", "needs {out} DIR"),
    (dict(publisher="carrier-pigeon"), "publisher", "must be one of broadcast, inline"),
]


@pytest.mark.parametrize("options, field, problem", BAD)
def test_each_bad_option_raises_one_error_naming_its_field(options, field, problem):
    with pytest.raises(ConfigError) as info:
        TrainConfig(**options).validate()
    assert info.value.field == field
    assert problem in info.value.problem
    assert str(info.value).startswith(flag_name(field) + " ")


def test_an_error_is_said_in_each_front_ends_names():
    with pytest.raises(ConfigError) as info:
        TrainConfig(checkpoint_every=5, batch_fraction=0.5).validate()
    assert str(info.value) == "--checkpoint-every needs --out DIR"
    assert info.value.render(str.upper) == "CHECKPOINT_EVERY needs OUT DIR"
    with pytest.raises(ConfigError) as info:
        TrainConfig(batch_fraction=2.0).validate()
    assert info.value.render(_param_name).startswith("batchFraction must be in (0, 1]")
    # A user's value with braces is quoted, not taken for an option name.
    with pytest.raises(ConfigError) as info:
        TrainConfig(stragglers="{out}").validate()
    assert "'{out}'" in info.value.render(str.upper)


def test_method_lists_are_read_from_the_method_table():
    assert LINEAR_METHODS == tuple(METHODS)
    assert set(SYNC_METHODS) == {m for m, row in METHODS.items() if row.synchronous}
    for name in LINEAR_METHODS:
        assert TrainConfig(method=name).validate().synchronous is METHODS[name].synchronous


@pytest.mark.parametrize(
    ("master", "slots"),
    [
        ("local", 1),
        ("local[3]", 3),
        ("local[4,2]", 4),
        ("local[*]", os.cpu_count()),
        (None, os.cpu_count()),
        ("local-cluster[2,1,1024]", 2),
        ("local-cluster[1,1,1024]", 2),  # Spark's default parallelism is at least 2 on a cluster
        ("local-cluster[3, 2, 512]", 6),
        ("spark://host:7077", 8),  # unknown until the session runs (then corrected)
    ],
)
def test_the_cli_predicts_the_task_slots_of_a_master(master, slots):
    from async_spark.cli.train import predicted_slots

    assert predicted_slots(master) == slots


@pytest.mark.parametrize(
    ("options", "field", "hint"),
    [
        (dict(method="asgaa"), "method", "did you mean 'asaga'?"),
        (dict(loss="softmx"), "loss", "did you mean 'softmax'?"),
        (dict(transport="resdent"), "transport", "did you mean 'resident'?"),
        (dict(stragglers="clod"), "stragglers", "did you mean 'cloud'?"),
        (dict(format="parqet"), "format", "did you mean 'parquet'?"),
    ],
)
def test_a_misspelt_name_gets_the_closest_choice_from_the_error_itself(options, field, hint):
    with pytest.raises(ConfigError) as info:
        TrainConfig(**options).validate()
    assert info.value.field == field and info.value.problem.endswith(hint)
    assert info.value.render(_param_name).endswith(hint)  # the Estimators say it too


def test_the_straggler_text_is_parsed_once_per_run(monkeypatch):
    from async_spark.solvers import train_linear, validation

    calls = []
    real = validation.parse_stragglers

    def counting(text, seed=0):
        calls.append(text)
        return real(text, seed=seed)

    monkeypatch.setattr(validation, "parse_stragglers", counting)
    cfg = TrainConfig(
        data="builtin:breast_cancer",
        method="asgd",
        partitions=2,
        stragglers="intensity:0.5",
        max_updates=4,
        quiet=True,
    )
    result = train_linear(cfg)
    assert calls == ["intensity:0.5"]
    assert result.engine_snapshot["stragglers"] == "intensity:0.5"


def test_the_cli_has_no_checks_of_its_own_for_the_options():
    import async_spark.cli._common as common
    import async_spark.cli.train as train

    assert not hasattr(common, "check_choice") and not hasattr(train, "check_train_choices")

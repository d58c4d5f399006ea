"""The step safeguard's decisions on known loss sequences (pure: no Spark, no solver)."""

from __future__ import annotations

import numpy as np
import pytest

from async_spark.solvers.safeguard import StepSafeguard
from async_spark.solvers.worker import loss_stats


def _guard(**kw):
    built = []

    def rebuild(gamma):
        built.append(gamma)
        return ("rule", gamma)

    args = dict(gamma=1.0, rebuild=rebuild, penalty=lambda theta: 0.0, window=4, grace=2)
    return StepSafeguard(**{**args, **kw}), built


def _feed(guard, means, rng, rows=50, spread=0.2):
    out = []
    for k, m in enumerate(means):
        out.append(guard.observe(loss_stats(rng.normal(m, spread, rows)), np.zeros(1), k, 0.0))
    return out


def test_noise_around_a_plateau_never_lowers_the_step():
    guard, built = _guard()
    rng = np.random.default_rng(0)
    assert all(r is None for r in _feed(guard, [1.0] * 4000, rng))
    assert built == [] and guard.gamma == 1.0 and guard.summary()["lowered"] == []


def test_a_rise_lowers_the_step_once_then_waits_out_the_grace():
    guard, built = _guard()
    rng = np.random.default_rng(1)
    falling = list(np.linspace(2.0, 1.0, 40))
    out = _feed(guard, falling + [1.3] * 4, rng)
    assert out[-1] == ("rule", 0.5) and built == [0.5] and guard.gamma == 0.5
    (change,) = guard.summary()["lowered"]
    assert change["from"] == 1.0 and change["to"] == 0.5 and change["update"] == len(out) - 1
    assert change["window_objective"] > change["best_objective"] * 1.2
    # the grace (2 results) and the new reference window: the same level is not a new rise
    out = _feed(guard, [1.3] * 2 + [1.3] * 4 + [1.3] * 4, rng)
    assert all(r is None for r in out) and built == [0.5]


def test_a_rise_smaller_than_the_relative_margin_is_ignored():
    guard, built = _guard(rise=0.05)
    rng = np.random.default_rng(2)
    # 3% up with almost no noise: significant, but below the 5% margin
    _feed(guard, [1.0] * 8 + [1.03] * 4, rng, spread=1e-4)
    assert built == []
    _feed(guard, [1.2] * 4, rng, spread=1e-4)
    assert built == [0.5]


def test_the_penalty_counts_in_the_estimate_and_changes_are_bounded():
    penalty = {"value": 0.0}
    guard, built = _guard(penalty=lambda theta: penalty["value"], max_changes=2, grace=0)
    rng = np.random.default_rng(3)
    _feed(guard, [1.0] * 4, rng, spread=1e-3)
    for k in range(1, 6):  # same losses, a growing penalty: the objective rises
        penalty["value"] = 0.5 * k
        _feed(guard, [1.0] * 8, rng, spread=1e-3)
    assert built == [0.5, 0.25] and guard.gamma == 0.25  # at most max_changes


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        _guard(window=0)
    with pytest.raises(ValueError, match=r"factor must be in \(0, 1\)"):
        _guard(factor=1.0)


def test_restore_continues_from_a_checkpointed_summary():
    guard, built = _guard()
    assert guard.restore({"final_step": 1.0, "lowered": []}) is None and built == []
    saved = {"final_step": 0.25, "lowered": [{"update": 9, "from": 1.0, "to": 0.5}]}
    assert guard.restore(saved) == ("rule", 0.25) and guard.gamma == 0.25
    assert guard.summary()["lowered"] == saved["lowered"]


def test_a_resumed_run_keeps_the_lowered_step(tmp_path):
    """Asynchronous heavy ball at its tuned step oscillates on 8 stale blocks (see
    test_momentum_engine): the safeguard lowers the step; a resume must not start over from the
    step that oscillated."""
    from async_spark.data.dataset import open_dataset
    from async_spark.solvers import TrainConfig, train_linear
    from async_spark.solvers.checkpoint import load_latest

    data = open_dataset("builtin:breast_cancer", 8, standardize=True, loss="logistic")
    common = dict(
        data="x", method="ahb", partitions=8, batch_fraction=1.0, l2=1e-2, quiet=True,
        out=str(tmp_path), checkpoint_every=50, eval_every=1e9,
    )  # fmt: skip
    first = train_linear(TrainConfig(max_updates=300, **common), dataset=data)
    lowered = first.step_safeguard["final_step"]
    assert lowered < first.step
    ckpt = load_latest(tmp_path)
    assert ckpt.engine["step_safeguard"]["final_step"] == lowered
    resumed = train_linear(TrainConfig(max_updates=340, **common), dataset=data, resume=ckpt)
    assert resumed.step_safeguard["final_step"] <= lowered
    assert (
        resumed.step_safeguard["lowered"][: len(first.step_safeguard["lowered"])]
        == (first.step_safeguard["lowered"])
    )

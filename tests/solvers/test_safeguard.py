"""The step safeguard's decisions on known loss sequences (pure: no Spark, no solver)."""

from __future__ import annotations

import json

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
    assert built == [] and guard.gamma == 1.0 and guard.summary()["changes"] == []


def test_a_rise_lowers_the_step_once_then_waits_out_the_grace():
    guard, built = _guard(confirm=2)
    rng = np.random.default_rng(1)
    falling = list(np.linspace(2.0, 1.0, 40))
    out = _feed(guard, falling + [1.3] * 4, rng)
    assert built == []  # one window up: a burst of stale results, maybe (confirm=2)
    out = _feed(guard, [1.3] * 4, rng)  # the second window up in a row
    assert out[-1] == ("rule", 0.5) and built == [0.5] and guard.gamma == 0.5
    (change,) = guard.summary()["changes"]
    assert change["kind"] == "lowered" and change["why"] == "rose"
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
    _feed(guard, [1.2] * 8, rng, spread=1e-4)
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


def test_a_steady_fall_raises_an_automatic_step_and_never_an_explicit_one():
    falling = list(np.linspace(3.0, 1.0, 400))  # windows of 4, pooled by 3: 12 results a test
    guard, built = _guard(search=True, max_raises=3)
    _feed(guard, falling, np.random.default_rng(4), spread=1e-3)
    assert built == [2.0, 4.0, 8.0] and guard.gamma == 8.0  # up to max_raises, then it stops
    changes = guard.summary()["changes"]
    assert [c["kind"] for c in changes] == ["raised"] * 3
    assert all(c["window_objective"] < c["best_objective"] for c in changes)
    # the first raise needs a pooled reference (12 results) and a clear fall below it (12 more)
    assert changes[0]["update"] == 2 * 12 - 1
    guard, built = _guard(search=False)
    _feed(guard, falling, np.random.default_rng(4), spread=1e-3)
    assert built == []


def test_a_plateau_after_a_raise_goes_back_to_the_step_before_and_ends_the_search():
    guard, built = _guard(search=True)
    rng = np.random.default_rng(5)
    falling = np.linspace(3.0, 2.0, 24)
    _feed(guard, list(falling), rng, spread=1e-3)  # a pooled reference, then a clear fall
    assert built == [2.0]
    # then no progress below the fall's level: the search pools up to max_pool x patience
    # windows before it calls a stall (a plateau above the optimum: a step slightly too large)
    level = float(falling[12:].mean())
    _feed(guard, [level] * (2 + 4 * 3 * 4), rng, spread=1e-3)
    assert built == [2.0, 1.0] and guard.gamma == 1.0
    assert guard.summary()["changes"][-1]["why"] == "stalled"
    assert not guard.summary()["searching"]
    _feed(guard, list(np.linspace(2.0, 0.5, 200)), rng, spread=1e-3)
    assert built == [2.0, 1.0]  # ended: a fall later raises nothing


def test_no_clear_fall_from_the_first_step_changes_nothing():
    guard, built = _guard(search=True)
    _feed(guard, [1.0] * 400, np.random.default_rng(6))
    assert built == [] and not guard.summary()["searching"]


def test_a_rise_during_the_search_lowers_the_step_and_ends_the_search():
    guard, built = _guard(search=True)
    rng = np.random.default_rng(7)
    falling = np.linspace(3.0, 2.0, 24)
    _feed(guard, list(falling), rng, spread=1e-3)
    assert built == [2.0]
    level = float(falling[12:].mean())
    _feed(guard, [level] * 6 + [level * 1.2] * 8, rng, spread=1e-3)
    assert built == [2.0, 1.0] and guard.summary()["changes"][-1]["why"] == "rose"
    _feed(guard, list(np.linspace(2.5, 0.5, 200)), rng, spread=1e-3)
    assert built == [2.0, 1.0]


def test_decay_halves_on_each_plateau_and_doubles_the_next_phase():
    guard, built = _guard(decay=True)  # no search: an ended one, as after a stall
    rng = np.random.default_rng(8)
    # 3 windows pooled = 12 results; a plateau is 4 x 3 windows without a clear fall
    _feed(guard, [1.0] * 12, rng, spread=1e-3)  # the reference
    _feed(guard, [1.0] * 48, rng, spread=1e-3)
    assert built == [0.5]
    (change,) = guard.summary()["changes"]
    assert change["why"] == "plateau" and guard.summary()["plateau_windows"] == 24
    _feed(guard, [1.0] * 2 + [1.0] * 48, rng, spread=1e-3)  # grace, then half the next phase
    assert built == [0.5]
    _feed(guard, [1.0] * 48, rng, spread=1e-3)
    assert built == [0.5, 0.25]
    # a clear fall within a phase keeps the step
    guard, built = _guard(decay=True)
    _feed(guard, list(np.linspace(3.0, 1.0, 200)), rng, spread=1e-3)
    assert built == []


def test_a_pooled_estimate_takes_at_least_pool_rows_rows():
    # 50 rows a result, windows of 4: 200 rows a window; 1000 rows = 5 windows, not 3
    guard, built = _guard(search=True, pool_rows=1000.0)
    out = _feed(guard, list(np.linspace(3.0, 1.0, 60)), np.random.default_rng(10), spread=1e-3)
    assert built[:1] == [2.0] and out.index(("rule", 2.0)) == 2 * 5 * 4 - 1


def test_a_rise_while_decaying_halves_and_takes_a_fresh_reference():
    guard, built = _guard(decay=True)
    rng = np.random.default_rng(11)
    _feed(guard, [1.0] * 12, rng, spread=1e-6)  # the reference
    _feed(guard, [1.5] * 8, rng, spread=1e-6)  # two windows rise
    assert built == [0.5] and guard.summary()["changes"][-1]["why"] == "rose"
    assert guard.summary()["plateau_windows"] == 12  # a rise does not lengthen the phases
    # falling from 1.5 but never below the old reference 1.0: progress against a fresh one
    _feed(guard, [1.5] * (2 + 12) + list(np.linspace(1.45, 1.2, 48)), rng, spread=1e-6)
    assert built == [0.5]


def test_a_restored_phase_length_is_kept():
    guard, built = _guard(decay=True)
    guard.restore({"final_step": 1.0, "plateau_windows": 24, "changes": []})
    rng = np.random.default_rng(12)
    _feed(guard, [1.0] * 12 + [1.001] * 95, rng, spread=1e-6)
    assert built == []  # 24 windows = 96 results
    _feed(guard, [1.001], rng, spread=1e-6)
    assert built == [0.5]


def test_the_search_hands_over_to_the_halving_with_a_fresh_pool():
    guard, built = _guard(search=True, decay=True, max_raises=1)
    rng = np.random.default_rng(13)
    _feed(guard, list(np.linspace(3.0, 2.0, 24)), rng, spread=1e-6)
    assert built == [2.0]
    falling = np.linspace(1.76, 1.74, 12)  # after the grace: progress, but no raise is left
    _feed(guard, [2.0] * 2 + list(falling), rng, spread=1e-6)
    assert built == [2.0] and not guard.summary()["searching"]
    level = float(falling.mean()) * 1.001  # neither a fall nor a rise (< 1%)
    _feed(guard, [level] * 47, rng, spread=1e-6)
    assert built == [2.0]  # a plateau needs 12 fresh windows
    _feed(guard, [level], rng, spread=1e-6)
    assert built == [2.0, 1.0] and guard.summary()["changes"][-1]["why"] == "plateau"


def test_a_checkpointed_pooled_test_continues_where_it_was():
    guard, built = _guard(decay=True)
    rng = np.random.default_rng(14)
    _feed(guard, [1.0] * 12 + [1.001] * 28, rng, spread=1e-6)  # whole windows: a checkpoint
    again, rebuilt = _guard(decay=True)  # keeps the pooled test, not a half-filled window
    again.restore(guard.summary())
    for g in (guard, again):
        _feed(g, [1.001] * 19, rng, spread=1e-6)
    assert built == rebuilt == []
    for g in (guard, again):
        _feed(g, [1.001], rng, spread=1e-6)
    assert built == rebuilt == [0.5]  # 12 + 48 results: the same plateau, resumed or not


def test_without_decay_a_plateau_keeps_the_step():
    guard, built = _guard(decay=False)
    _feed(guard, [1.0] * 400, np.random.default_rng(8), spread=1e-3)
    assert built == []


def test_an_automatic_step_searched_upward_converges_sooner_than_the_step_alone():
    """Synchronous SAGA (the same run whatever the threads' order) on breast cancer: the data's
    step is 16x below the one the run tolerates (see the module docstring of .safeguard). The
    search must raise it and the run must be far closer to the optimum for it; a search that
    raised the recorded step without rebuilding the rule would fail the second assertion."""
    from async_spark.data.dataset import open_dataset
    from async_spark.solvers import TrainConfig, train_linear

    data = open_dataset("builtin:breast_cancer", 4, standardize=True, loss="logistic")
    common = dict(data="x", method="saga", partitions=4, l2=1e-3, quiet=True, max_updates=400)
    runs = {
        on: train_linear(TrainConfig(step_safeguard=on, **common), dataset=data)
        for on in (True, False)
    }
    searched = runs[True].step_safeguard
    assert searched["raised"] >= 3 and searched["final_step"] >= 4 * runs[True].step
    assert runs[False].step == runs[True].step
    from async_spark.models.linear import objective  # noqa: F401 (the runs report it)

    # the same objective, decreasing to ~0.0796: at 400 updates the searched run is far lower
    gap = runs[False].final_objective - runs[True].final_objective
    assert gap > 0.01, (runs[True].final_objective, runs[False].final_objective)


def test_an_automatic_sgd_step_is_halved_on_plateaus_and_gets_closer_than_the_sqrt_rule():
    """Synchronous SGD on breast cancer (deterministic): with the defaults the step is searched,
    then halved on each plateau with a constant rule between; the old default (the sqrt rule,
    no safeguard) ends far above. A halving that did not rebuild the rule, or a rule left at
    sqrt under the halvings, would not get as close."""
    from async_spark.data.dataset import open_dataset
    from async_spark.solvers import TrainConfig, train_linear
    from async_spark.solvers.linear import decays
    from async_spark.solvers.methods import method

    data = open_dataset("builtin:breast_cancer", 4, standardize=True, loss="logistic")
    common = dict(
        data="x",
        method="sgd",
        partitions=4,
        l2=1e-3,
        quiet=True,
        max_updates=1500,
        batch_fraction=0.1,
    )
    default = train_linear(TrainConfig(**common), dataset=data)
    old = train_linear(TrainConfig(step_safeguard=False, **common), dataset=data)
    whys = [c["why"] for c in default.step_safeguard["changes"]]
    assert whys.count("plateau") >= 2, whys
    # halved on each plateau below where the search had taken it
    peak = max(c["to"] for c in default.step_safeguard["changes"])
    assert default.step_safeguard["final_step"] <= peak / 2 ** whys.count("plateau"), whys
    # the optimum is ~0.0796; the sqrt rule is ~0.2 above it after 1500 updates
    assert old.final_objective - default.final_objective > 0.05, (
        default.final_objective,
        old.final_objective,
    )
    sgd, asgd, saga = method("sgd"), method("asgd"), method("saga")
    assert decays(TrainConfig(**common), sgd)
    assert not decays(TrainConfig(**common), saga)  # variance-reduced: no noise ball
    assert not decays(TrainConfig(step=0.1, **common), sgd)  # an explicit step
    assert not decays(TrainConfig(step_rule="sqrt", **common), sgd)  # an explicit rule
    assert not decays(TrainConfig(step_safeguard=False, **common), sgd)
    # a synchronous round of whole blocks is the full gradient: no ball (a full-gradient AG must
    # not be slowed), and SGD's default whole block is such a round
    whole = {**common, "batch_fraction": 1.0}
    assert not decays(TrainConfig(**whole), sgd)
    assert not decays(TrainConfig(**{**common, "batch_fraction": None}), sgd)
    # one block's exact gradient per update still leaves ASGD in the blocks' spread: it decays
    assert decays(TrainConfig(**{**whole, "method": "asgd"}), asgd)
    assert decays(TrainConfig(**{**common, "batch_fraction": None, "method": "asgd"}), asgd)
    # ... but not an asynchronous momentum method's stale swing, which halving only slows
    aag = method("aag")
    assert not decays(TrainConfig(**{**whole, "method": "aag"}), aag)
    assert decays(TrainConfig(**{**common, "method": "aag"}), aag)  # sampled rows: a ball


def test_an_explicit_step_is_never_raised():
    from async_spark.data.dataset import open_dataset
    from async_spark.solvers import TrainConfig, train_linear

    data = open_dataset("builtin:breast_cancer", 4, standardize=True, loss="logistic")
    r = train_linear(
        TrainConfig(data="x", method="saga", partitions=4, l2=1e-3, quiet=True, max_updates=300,
                    step=0.05),
        dataset=data,
    )  # fmt: skip
    assert r.step_safeguard["raised"] == 0 and r.step_safeguard["final_step"] <= 0.05


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        _guard(window=0)
    with pytest.raises(ValueError, match=r"factor must be in \(0, 1\)"):
        _guard(factor=1.0)
    with pytest.raises(ValueError, match="grow must be > 1"):
        _guard(grow=1.0)
    with pytest.raises(ValueError, match="patience must be an integer >= 1"):
        _guard(patience=0)


def test_restore_continues_from_a_checkpointed_summary():
    guard, built = _guard()
    assert guard.restore({"final_step": 1.0, "changes": []}) is None and built == []
    saved = {
        "final_step": 0.25,
        "changes": [{"kind": "lowered", "update": 9, "from": 1.0, "to": 0.5}],
    }
    assert guard.restore(saved) == ("rule", 0.25) and guard.gamma == 0.25
    assert guard.summary()["changes"] == saved["changes"]
    # a checkpoint written before the search upward existed: "lowered" was the list
    old = {"final_step": 0.5, "lowered": [{"update": 3, "from": 1.0, "to": 0.5}]}
    assert guard.restore(old) == ("rule", 0.5)
    assert guard.summary()["changes"] == [{"kind": "lowered", **old["lowered"][0]}]


def test_restore_keeps_an_ended_search_ended():
    guard, built = _guard(search=True)
    guard.restore({"final_step": 4.0, "searching": False, "changes": []})
    rng = np.random.default_rng(9)
    _feed(guard, list(np.linspace(3.0, 1.0, 200)), rng, spread=1e-3)
    assert built == [4.0] and guard.gamma == 4.0  # only the restore's rebuild: no raise


def test_a_resumed_run_keeps_the_lowered_step(tmp_path):
    """Asynchronous heavy ball at its tuned step, undamped, oscillates on 8 stale blocks (see
    test_momentum_engine): the safeguard lowers the step; a resume must not start over from the
    step that oscillated."""
    from async_spark.data.dataset import open_dataset
    from async_spark.solvers import TrainConfig, train_linear
    from async_spark.solvers.checkpoint import load_latest

    data = open_dataset("builtin:breast_cancer", 8, standardize=True, loss="logistic")
    common = dict(
        data="x", method="ahb", momentum_damping=0.0, partitions=8, batch_fraction=1.0,
        l2=1e-2, quiet=True,
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
        resumed.step_safeguard["changes"][: len(first.step_safeguard["changes"])]
        == (first.step_safeguard["changes"])
    )


def _straggling_run(guard, rng, results=3000, every=10, spread=0.2):
    """Two equal blocks: block 0 answers ``every - 1`` times for each answer of block 1 (a
    straggler). The run fits block 0 (its sampled losses fall) while block 1's rise more, so the
    objective, their mean, rises."""
    for k in range(results):
        block = 1 if k % every == every - 1 else 0
        t = k / results
        mean = 1.0 - 0.5 * t if block == 0 else 1.0 + 1.0 * t
        stats = loss_stats(rng.normal(mean, spread, 50))
        guard.observe(stats, np.zeros(1), k, 0.0, block)
    return [(c["kind"], c["why"]) for c in guard.changes]


def test_the_search_is_stratified_by_block_so_a_straggler_does_not_vanish():
    """Asynchronous results arrive in proportion to speed, not size. Windows of 20 results hold
    the straggler's two each, so the rise test is steady; the pooled test, stratified, sees the
    objective's slow rise and never raises the step. Pooled over results (one stratum: what it
    did before), the fast block's falling losses raise it again and again."""
    stratified, _ = _guard(search=True, block_rows=(500, 500), pool_rows=100.0, window=20)
    assert _straggling_run(stratified, np.random.default_rng(5)) == []
    pooled, _ = _guard(search=True, pool_rows=100.0, window=20)  # every result in one stratum
    assert _straggling_run(pooled, np.random.default_rng(5)).count(("raised", "fell")) >= 5


def test_the_pooled_test_waits_for_every_block():
    """Falling losses from two of three blocks raise nothing until the third is in the pool."""
    guard, built = _guard(search=True, block_rows=(10, 10, 10), pool_rows=10.0, patience=2)
    rng = np.random.default_rng(0)
    means = np.linspace(2.0, 0.5, 400)
    for k in range(28):  # blocks 0 and 1 only: 7 windows, fewer than the pool's limit (4 x 2)
        guard.observe(loss_stats(rng.normal(means[k], 0.01, 20)), np.zeros(1), k, 0.0, k % 2)
    assert built == [] and guard._pooled == 7 and guard._before is None  # no decision at all
    for k in range(28, 400):  # every block now: the fall is clear and the step is raised
        guard.observe(loss_stats(rng.normal(means[k], 0.01, 20)), np.zeros(1), k, 0.0, k % 3)
    assert guard.summary()["raised"] >= 1


def test_the_stratified_estimate_weighs_blocks_by_their_rows():
    from async_spark.solvers.safeguard import WindowEstimate

    stats = np.array([[10.0, 110.0, 10], [0.0, 0.0, 0], [90.0, 8200.0, 90]])  # block 1 absent
    est = WindowEstimate.of(stats, 0.5, np.array([1.0, 5.0, 3.0]))
    # block means 1.0 and 1.0 weighted 1:3 over the present blocks, plus the penalty
    assert est.value == pytest.approx(1.0 + 0.5)
    var0, var2 = 11.0 - 1.0, 8200.0 / 90 - 1.0
    assert est.stderr == pytest.approx(np.sqrt((0.25**2) * var0 / 10 + (0.75**2) * var2 / 90))


def test_an_automatic_momentum_step_is_searched_upward_with_the_momentum_retuned():
    """Synchronous AG with whole blocks (Nesterov's method on the full gradient) on digits: the
    data's step 1/L, from the bound l'' <= 1/2 of the softmax, is far below what the run
    tolerates. The search must raise it, retune the momentum for the curvature the raised step
    implies, and bring the run far closer to the optimum in the same updates. A search that kept
    the automatic momentum fails the third assertion, one that raised only the recorded step
    the last."""
    from async_spark.data.dataset import open_dataset
    from async_spark.solvers import TrainConfig, train_linear
    from async_spark.solvers.momentum import raised_momentum

    data = open_dataset("builtin:digits", 4, standardize=True, loss="softmax")
    common = dict(
        data="x", method="ag", loss="softmax", partitions=4, l2=1e-3, quiet=True, max_updates=120
    )
    common["momentum_restart"] = False  # the search alone (the restart is tested on its own)
    runs = {
        on: train_linear(TrainConfig(step_safeguard=on, **common), dataset=data)
        for on in (True, False)
    }
    searched, info = runs[True].step_safeguard, runs[True].momentum
    assert searched["raised"] >= 2 and searched["final_step"] >= 4 * runs[True].step
    assert runs[False].step == runs[True].step and info["alpha"] == runs[True].step
    retuned = raised_momentum("ag", info, searched["final_step"])
    assert info["final_beta"] == pytest.approx(retuned) and retuned < info["beta"] - 0.05
    assert runs[False].momentum["final_beta"] == runs[False].momentum["beta"]
    gap = runs[False].final_objective - runs[True].final_objective
    assert gap > 0.01, (runs[True].final_objective, runs[False].final_objective)


def test_a_raised_momentum_step_gets_the_tuning_of_the_curvature_it_implies():
    """AG's tuning is alpha = 1/L, beta = (sqrt(kappa) - 1)/(sqrt(kappa) + 1): a step raised
    k-fold implies L/k; the momentum never goes below the tuning of kappa = 1 (zero)."""
    from async_spark.solvers.momentum import raised_momentum

    mu, L = 1e-3, 2.0
    info = {"mu": mu, "L": L, "alpha": 1 / L}
    for k in (2.0, 8.0, 64.0):
        kappa = L / k / mu
        want = (np.sqrt(kappa) - 1) / (np.sqrt(kappa) + 1)
        assert raised_momentum("ag", info, k / L) == pytest.approx(want, rel=1e-12)
    assert raised_momentum("ag", info, 1e9) == 0.0  # L' capped at mu
    betas = [
        raised_momentum("hb", {**info, "alpha": 4 / (L**0.5 + mu**0.5) ** 2}, g) for g in (4, 8, 16)
    ]
    assert betas[0] > betas[1] > betas[2] > 0


def test_which_runs_search_their_step_upward():
    """Every automatic step but L-BFGS's (its line search) and an asynchronous momentum
    method's (a raised step amplifies its stale momentum); an explicit step never."""
    from async_spark.solvers import TrainConfig
    from async_spark.solvers.linear import searches
    from async_spark.solvers.methods import method

    for name in ("sgd", "asgd", "saga", "asaga", "hb", "ag", "apg", "dcasgd"):
        assert searches(TrainConfig(method=name), method(name)), name
    for name in ("ahb", "aag", "aapg", "lbfgs"):
        assert not searches(TrainConfig(method=name), method(name)), name
    assert not searches(TrainConfig(method="ag", step=0.1, momentum=0.5), method("ag"))
    assert not searches(TrainConfig(method="saga", step=0.1), method("saga"))


def test_which_runs_ask_a_rise_to_be_shared_and_confirmed():
    """SGD and SAGA: a rise shared by the blocks, held two windows when asynchronous; the
    momentum methods' function-value restart: any rise, at once."""
    from async_spark.solvers.linear import rise_test
    from async_spark.solvers.methods import method

    for name in ("sgd", "saga", "lbfgs"):
        assert rise_test(method(name)) == {"shared": True, "confirm": 1, "exact": False}, name
    for name in ("asgd", "asaga", "dcasgd"):
        assert rise_test(method(name)) == {"shared": True, "confirm": 2, "exact": False}, name
    for name in ("hb", "ag", "apg"):
        assert rise_test(method(name)) == {"shared": False, "confirm": 1, "exact": False}, name
    for name in ("ahb", "aag", "aapg"):
        assert rise_test(method(name)) == {"shared": False, "confirm": 1, "exact": True}, name


def _blocks_in_turns(guard, means, turns, rng, rows=50, spread=1e-4):
    """Feed results whose block follows ``turns`` (cycled) and whose sampled losses have the mean
    ``means[k][block]`` at result ``k``; the rebuilt steps, in order."""
    built = []
    for k, level in enumerate(means):
        block = turns[k % len(turns)]
        stats = loss_stats(rng.normal(level[block], spread, rows))
        out = guard.observe(stats, np.zeros(1), k, 0.0, block)
        if out is not None:
            built.append(out[1])
    return built


# windows of 4 results: three of block 0 then one, then one of block 0 and three of block 1
_UNEVEN_TURNS = [0, 0, 0, 1, 0, 1, 1, 1]


def test_which_blocks_answered_in_a_window_is_not_a_rise():
    """Two blocks fitted to different losses (1.00 and 1.03), steady: windows that hold the two
    in turns 3:1 and 1:3 have plain means 1.0075 and 1.0225, 1.5 % apart, above the 1 % margin
    and far above the noise. Compared block by block, nothing rose."""
    steady = [(1.0, 1.03)] * 400
    turns = _UNEVEN_TURNS + [0, 1, 1, 1]  # 3:1, 1:3, 1:3: two windows in a row 1.5 % up
    blockwise, _ = _guard(block_rows=(50, 50), grace=0)
    assert _blocks_in_turns(blockwise, steady, turns, np.random.default_rng(20)) == []
    plain, _ = _guard(grace=0)  # one stratum: the plain means, which the turns fool
    assert _blocks_in_turns(plain, steady, turns, np.random.default_rng(20)) != []


def test_a_rise_of_the_blocks_is_seen_whatever_their_turns():
    """Both blocks' losses up by 20 % (a step too large): lowered once, then the grace."""
    levels = [(1.0, 1.03)] * 40 + [(1.2, 1.236)] * 8
    guard, _ = _guard(block_rows=(50, 50), grace=0)
    assert _blocks_in_turns(guard, levels, _UNEVEN_TURNS, np.random.default_rng(21)) == [0.5]
    (change,) = guard.changes
    assert change["why"] == "rose"
    assert change["window_objective"] == pytest.approx(1.2 * change["best_objective"], rel=0.02)


def test_one_blocks_rise_waits_for_another_block_to_rise_with_it():
    """A straggler (block 1) missing from the newer windows: block 0's rise alone is what a
    model pulled between the blocks looks like, and is not acted on; once block 1 answers with
    a raised loss too (a step too large raises every block's), the windows that hold both are
    compared with the reference windows that held both, and the step is lowered."""
    guard, _ = _guard(block_rows=(50, 50), grace=0)
    rng = np.random.default_rng(22)
    assert _blocks_in_turns(guard, [(1.0, 2.0)] * 16, [0, 1], rng) == []
    assert _blocks_in_turns(guard, [(1.3, 2.0)] * 8, [0], rng) == []
    assert _blocks_in_turns(guard, [(1.3, 2.6)] * 8, [0, 1], rng) == [0.5]
    (change,) = guard.changes
    assert change["window_objective"] == pytest.approx(1.95, rel=1e-3)
    assert change["best_objective"] == pytest.approx(1.5, rel=1e-3)


def test_a_tug_of_war_between_blocks_is_no_rise():
    """An executor that pauses and catches up pulls the model between its block and the others:
    while block 1 is paused, block 0's loss falls and block 1's rises; when it catches up, the
    reverse. The stratified objective goes up 9 % for three windows in a row at every turn,
    carried by one block while the other falls; it is no rise. The same windows' objective read
    without leaving out the block that rose most (one stratum, where the plain means are the
    same here: equal turns) would halve the step."""
    tug = ([(1.0, 1.2)] * 12 + [(1.3, 1.1)] * 12) * 20
    guard, _ = _guard(block_rows=(50, 50), grace=0)
    assert _blocks_in_turns(guard, tug, [0, 1], np.random.default_rng(25)) == []
    plain, _ = _guard(grace=0)
    assert _blocks_in_turns(plain, tug, [0, 1], np.random.default_rng(25))[:1] == [0.5]
    # a momentum method's test (shared=False): the tug of war is a swing its restart damps
    eager, _ = _guard(block_rows=(50, 50), grace=0, shared=False)
    assert _blocks_in_turns(eager, tug, [0, 1], np.random.default_rng(25))[:1] == [0.5]


def test_a_single_window_up_is_a_burst_not_a_rise():
    """When a paused executor resumes, its results come at once, computed at versions from
    before the pause: one window stands out and the next is back. ``confirm=2`` windows in a
    row must rise; with ``confirm=1`` the same sequence halves the step."""
    bursts = ([1.0] * 16 + [1.3] * 4) * 20
    guard, built = _guard(grace=0, confirm=2)
    _feed(guard, bursts, np.random.default_rng(26), spread=1e-3)
    assert built == []
    eager, built = _guard(grace=0, confirm=1)
    _feed(eager, bursts, np.random.default_rng(26), spread=1e-3)
    assert built[:1] == [0.5]


def test_the_rise_tests_references_are_checkpointed_block_by_block():
    """A resumed safeguard compares its next window with the same recent windows; a checkpoint
    of before the blockwise test (pairs of value and stderr) restores none of them."""
    levels = [(1.0, 1.03)] * 16
    guard, built = _guard(block_rows=(50, 50), grace=0)
    _blocks_in_turns(guard, levels, [0, 1], np.random.default_rng(23))
    saved = guard.summary()
    assert len(saved["recent"]) == 4 and np.shape(saved["recent"][0]["stats"]) == (2, 3)
    again, rebuilt = _guard(block_rows=(50, 50), grace=0)
    again.restore(json.loads(json.dumps(saved)))
    for g in (guard, again):
        _blocks_in_turns(g, [(1.3, 1.339)] * 8, [0, 1], np.random.default_rng(24))
    assert built == rebuilt == [0.5]
    old, _ = _guard(block_rows=(50, 50), grace=0)
    old.restore({**saved, "recent": [[1.0, 1e-5]] * 4})
    assert _blocks_in_turns(old, [(1.3, 1.339)] * 8, [0, 1], np.random.default_rng(24)) == []
    # a checkpoint taken between two windows that rose: the resumed guard lowers at the second
    first, built = _guard(block_rows=(50, 50), grace=0, confirm=2)
    _blocks_in_turns(first, levels, [0, 1], np.random.default_rng(23))
    _blocks_in_turns(first, [(1.3, 1.339)] * 4, [0, 1], np.random.default_rng(24))
    assert built == [] and first.summary()["window"]["rising"] == 1
    second, rebuilt = _guard(block_rows=(50, 50), grace=0, confirm=2)
    second.restore(json.loads(json.dumps(first.summary())))
    for g in (first, second):
        _blocks_in_turns(g, [(1.3, 1.339)] * 4, [0, 1], np.random.default_rng(27))
    assert built == rebuilt == [0.5]


def test_whole_block_losses_are_no_sample_so_a_slow_fall_is_progress():
    """Results over whole blocks carry the blocks' exact losses: the rows' spread is no noise of
    the estimate (the finite population correction, 1 - sample_fraction, scales the variance).
    A fall far below the rows' spread per window is then progress, not a plateau; the same
    losses read as a small sample of a large population are a plateau, and the step is halved."""
    from async_spark.solvers.safeguard import WindowEstimate

    stats = loss_stats(np.random.default_rng(9).normal(1.0, 0.5, 400))
    full = WindowEstimate.of(stats, 0.0)
    assert full.corrected(0.0).stderr == 0.0 and full.corrected(0.0).value == full.value
    assert full.corrected(0.25).stderr == pytest.approx(full.stderr / 2)
    # every row of a 50-row block, each window 0.2% lower: the exact block loss falls slowly
    rows = np.random.default_rng(10).normal(0.0, 0.5, 50)
    levels = 1.0 - 0.002 * np.arange(600) / 4

    def run(fraction):
        guard, built = _guard(decay=True, sample_fraction=fraction, grace=0)
        for k, level in enumerate(levels):
            guard.observe(loss_stats(rows + level), np.zeros(1), k, 0.0)
        return built

    assert run(1.0) == []  # exact losses: every pooled estimate is below the last
    assert run(0.0)[:1] == [0.5]  # read as a sample: the fall is within the noise, a plateau
    with pytest.raises(ValueError, match="sample_fraction"):
        _guard(sample_fraction=1.5)


def test_stale_jitter_of_exact_block_losses_is_no_rise():
    """Between windows, stale asynchronous results move even exact whole-block losses by a few
    percent with no trend. The rise test keeps the rows' spread as its scale (no finite
    population correction there), so such moves are not rises; with the correction they would
    clear the 1% floor and halve the step again and again."""
    rng = np.random.default_rng(11)
    rows = rng.normal(0.0, 0.5, 50)
    jitter = 1.0 + 0.03 * rng.uniform(-1.0, 1.0, 4000)  # each result read a different version
    guard, built = _guard(sample_fraction=1.0)
    for k, level in enumerate(jitter):
        guard.observe(loss_stats(rows + level), np.zeros(1), k, 0.0)
    assert [c["why"] for c in guard.summary()["changes"]] == [] and built == []
    # the same jitter on the exact losses' own scale: windows differ by more than the 1% floor
    means = jitter.reshape(-1, 4).mean(axis=1)
    assert (means[1:] - means[:-1]).max() > 0.02


def test_an_exact_rise_test_sees_a_swing_within_the_rows_spread():
    """Whole-block losses of heavy-tailed rows (most near 0, a few large): a swing of the exact
    objective by 20 % is far inside five standard errors of the rows' spread, and the rise test
    on that scale never sees it; with ``exact`` (an asynchronous momentum method's function-value
    restart) the correction leaves the 1 % floor, and the swing restarts it at once."""
    rng = np.random.default_rng(13)
    rows = np.where(rng.random(50) < 0.05, 3.0, 0.02)  # 5 % of the rows carry most of the loss
    levels = ([1.0] * 16 + [1.2] * 8) * 10

    def run(exact):
        guard, built = _guard(sample_fraction=1.0, grace=0, exact=exact)
        for k, level in enumerate(levels):
            guard.observe(loss_stats(rows * level), np.zeros(1), k, 0.0)
        return built

    assert run(False) == []
    assert run(True)[:1] == [0.5]


def test_a_full_batchs_tiny_exact_fall_near_the_optimum_raises_no_step():
    """The search raises the step on a fall clear on the rows' scale, not on the exact losses':
    near the optimum a full batch's loss still falls by 1e-9, which is progress but no reason
    for a larger step (SAGA's step was raised 16x that way, then its objective jumped from the
    optimum to 1.9x it, tests/solvers/test_penalty_on.py). The search then stalls and goes
    back one raise; the same losses read as exact would have raised it to the limit."""
    rows = np.random.default_rng(12).normal(0.0, 0.5, 50)
    levels = 1.0 + 0.3 * 0.5 ** np.arange(400)  # a large fall, then an exact convergence

    guard, built = _guard(search=True, sample_fraction=1.0, grace=0)
    for k, level in enumerate(levels):
        guard.observe(loss_stats(rows + level), np.zeros(1), k, 0.0)
    assert [c["why"] for c in guard.summary()["changes"]] == ["fell", "stalled"]
    assert built == [2.0, 1.0]  # one raise on the large fall, then back (the exact: 64x)

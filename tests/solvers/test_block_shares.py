"""Asynchronous results weighted by the inverse of their block's share (loop.BlockShares).

Without the weights, one result per update makes asynchronous SGD minimize the blocks' losses
weighted by how often each block answers; with them, the expected update is the objective's
gradient again. Checked on the weights themselves, on a two-block quadratic iterated in the
arrival order of a block twice as fast as the other (against its exact optima), and on which
methods' messages get weighted.
"""

from __future__ import annotations

import numpy as np
import pytest

from async_spark.engine.engine import TaskResult
from async_spark.optim.sgd import SGDMessage
from async_spark.solvers.loop import BlockShares, Messages
from async_spark.solvers.methods import METHODS


def _arrivals(pattern, times):
    return [b for _ in range(times) for b in pattern]


def test_equal_arrivals_weigh_one():
    shares = BlockShares(2, 64)
    ws = [shares.weight(b, 2) for b in _arrivals([0, 1], 500)]
    assert np.allclose(ws[-10:], 1.0, atol=0.01)
    assert shares.summary()["shares"] == pytest.approx([0.5, 0.5], abs=0.01)


def test_a_block_twice_as_fast_weighs_half_as_much_as_the_other():
    shares = BlockShares(2, 64)
    ws = [(b, shares.weight(b, 2)) for b in _arrivals([0, 0, 1], 400)]
    fast = np.mean([w for b, w in ws[-300:] if b == 0])
    slow = np.mean([w for b, w in ws[-300:] if b == 1])
    # shares 2/3 and 1/3: weights 1 / (2 * share)
    assert fast == pytest.approx(0.75, rel=0.05)
    assert slow == pytest.approx(1.5, rel=0.05)
    # what each block contributes per cycle is the same
    assert 2 * fast == pytest.approx(slow, rel=0.05)


def test_a_rare_block_is_capped_at_the_number_of_live_blocks():
    shares = BlockShares(4, 128)
    ws = [(b, shares.weight(b, 4)) for b in _arrivals([0, 1, 2] * 30 + [3], 20)]
    assert max(w for b, w in ws if b == 3) == 4.0
    assert shares.summary()["weight_range"][1] == 4.0


def test_the_shares_follow_a_change_of_speed():
    shares = BlockShares(2, 64)
    for b in _arrivals([0, 0, 1], 200):
        shares.weight(b, 2)
    for b in _arrivals([0, 1], 400):  # the slow block caught up
        shares.weight(b, 2)
    assert shares.summary()["shares"] == pytest.approx([0.5, 0.5], abs=0.02)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="num_blocks"):
        BlockShares(0, 10)


def _iterate(weighted: bool, gamma: float = 0.002, cycles: int = 4000) -> np.ndarray:
    """f_p(x) = |x - a_p|^2 / 2 on two blocks, the objective their mean (x* = mean of a_p);
    block 0 answers twice for each answer of block 1. Returns the average iterate over the
    last cycles (the iterate circles its fixed point within one cycle)."""
    a = np.array([[1.0, -2.0], [-3.0, 4.0]])
    shares = BlockShares(2, 64) if weighted else None
    x = np.zeros(2)
    tail = []
    for i, b in enumerate(_arrivals([0, 0, 1], cycles)):
        w = 1.0 if shares is None else shares.weight(b, 2)
        x = x - gamma * w * (x - a[b])
        if i >= 3 * (cycles - 500):
            tail.append(x)
    return np.mean(tail, axis=0)


def test_weighted_updates_converge_to_the_objectives_optimum_not_the_speed_weighted_one():
    a_mean = np.array([-1.0, 1.0])  # the optimum of the mean of the two blocks
    speed_weighted = (2 * np.array([1.0, -2.0]) + np.array([-3.0, 4.0])) / 3
    plain, weighted = _iterate(False), _iterate(True)
    assert np.allclose(plain, speed_weighted, atol=0.02)  # the bias, as the theory says
    assert np.allclose(weighted, a_mean, atol=0.004)


def _result(block: int, payload) -> TaskResult:
    return TaskResult(block, 0, 0, payload, block, 0, "e", 0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("method", "weighted"),
    [("asgd", True), ("aag", True), ("ahb", True), ("asaga", False), ("dcasgd", False)],
)
def test_which_asynchronous_methods_weigh_their_blocks(method, weighted):
    family = METHODS[method].family
    messages = Messages(family, synchronous=False, num_blocks=2)
    assert (messages.shares is not None) == weighted


@pytest.mark.parametrize("method", ["sgd", "ag", "saga", "lbfgs"])
def test_synchronous_rounds_are_not_weighted(method):
    row = METHODS[method]
    assert Messages(row.family, synchronous=True, num_blocks=4).shares is None


def test_an_asgd_message_carries_its_weight():
    messages = Messages(METHODS["asgd"].family, synchronous=False, num_blocks=2)
    grad = np.array([1.0, 2.0])
    seen = []
    for i, b in enumerate(_arrivals([0, 0, 1], 200)):
        messages.dispatched(b, i, None)
        msg = messages.accept(_result(b, grad)._replace(task_id=i), live_blocks=2)
        assert isinstance(msg, SGDMessage)
        seen.append((b, float(msg.grad_sum[0])))
    late = [(b, g) for b, g in seen[-90:]]
    slow = np.mean([g for b, g in late if b == 1])
    fast = np.mean([g for b, g in late if b == 0])
    assert slow / fast == pytest.approx(2.0, rel=0.05)


@pytest.fixture(scope="module")
def sparse_problem():
    """2 000 sparse rows in 1 000 columns: two blocks whose own minimizers differ."""
    import scipy.sparse as sp

    rng = np.random.default_rng(3)
    X = sp.random(2000, 1000, density=0.02, format="csr", random_state=rng)
    X.data = rng.standard_normal(X.nnz)
    w = rng.standard_normal(1000)
    y = (rng.random(2000) < 1 / (1 + np.exp(-(X @ w)))).astype(float)
    return X, y


def _emulated(data, method, weights, **options):
    from async_spark.engine.emulator import CostModel
    from async_spark.solvers import TrainConfig, train_linear
    from async_spark.solvers.emulation import virtual_engine_factory

    cfg = TrainConfig(
        data=data,
        method=method,
        partitions=2,
        l2=1e-3,
        seed=1,
        block_weights=weights,
        eval_every=1e9,
        quiet=True,
        **options,
    )
    # virtual time: a deterministic schedule in which block 0 (sleeping one mean task time in
    # every task, ASYNC's intensity:1) answers once for every two answers of block 1
    cost = CostModel(task_overhead_seconds=0.01, seconds_per_nnz=1e-6, driver_seconds=1e-3)
    return train_linear(cfg, engine_factory=virtual_engine_factory(cost))


def test_asgd_with_a_slow_block_reaches_the_optimum_only_with_block_weights(sparse_problem):
    f_star = _emulated(sparse_problem, "lbfgs", True, max_updates=500).final_objective
    slow = {"max_updates": 3000, "stragglers": "intensity:1", "step": 0.5, "step_rule": "constant"}
    on = _emulated(sparse_problem, "asgd", True, **slow)
    off = _emulated(sparse_problem, "asgd", False, **slow)
    assert [b["tasks"] for b in on.engine_snapshot["blocks"]] == pytest.approx(
        [1000, 2000], rel=0.03
    )
    gap_on = (on.final_objective - f_star) / f_star
    gap_off = (off.final_objective - f_star) / f_star
    assert gap_on < 1e-3  # measured 2.0e-4
    assert gap_off > 1e-2  # measured 2.5e-2: the optimum of the 1/3-2/3 weighted losses
    weights = on.summary()["block_weights"]
    assert weights["shares"] == pytest.approx([1 / 3, 2 / 3], abs=0.02)
    assert weights["weight_range"] == pytest.approx([0.75, 1.5], abs=0.03)
    assert off.summary()["block_weights"] is None


def test_the_option_must_be_true_or_false():
    from async_spark.solvers import TrainConfig
    from async_spark.solvers.config import ConfigError

    cfg = TrainConfig(data="builtin:breast_cancer", method="asgd", block_weights="yes")
    with pytest.raises(ConfigError, match="block-weights must be true or false"):
        cfg.validate()


def test_the_command_line_turns_them_off():
    import argparse

    from async_spark.cli.train import add_train_arguments, train_configs

    p = argparse.ArgumentParser()
    add_train_arguments(p)
    for argv, want in (([], True), (["--no-block-weights"], False)):
        args = p.parse_args(["--data", "builtin:breast_cancer", "--method", "asgd", *argv])
        assert [c.block_weights for c in train_configs(args)] == [want]


def _numpy_weighted_asgd(dataset, trace, seed, frac, step, l2, weigh=True):
    """Weighted ASGD written out: block b's sampled gradient at the version its task read,
    times 1 / (P * share_b), share_b from counts decayed by 1 - 1/(32 P) per result, the
    block's own result counted half before and half after its weight; gamma / sqrt(k/P + 1)."""
    from scipy.special import expit

    from async_spark.solvers.worker import sample_rows

    source, desc = dataset
    P, d = desc.num_blocks, desc.d
    blocks = [source.load(p) for p in range(P)]
    counts = [32.0] * P  # horizon 32 P, equal shares to start
    history = [np.zeros(d + 1)]
    tasks_done = [0] * P
    for k, rec in enumerate(r for r in trace if r["version"] > 0):
        b, staleness = rec["block"], rec["staleness"]
        counts = [c * (1.0 - 1.0 / (32 * P)) for c in counts]
        counts[b] += 0.5
        w = min(float(P), sum(counts) / (P * counts[b])) if weigh else 1.0
        counts[b] += 0.5
        w_now, w_stale = history[-1], history[len(history) - 1 - staleness]
        idx = sample_rows(seed, b, tasks_done[b], blocks[b].rows, frac)
        tasks_done[b] += 1
        X, y = blocks[b].X[idx], blocks[b].y[idx]
        r = expit(X @ w_stale[:d] + w_stale[d]) - y
        g = w * np.concatenate([X.T @ r, [r.sum()]]) / (frac * desc.n / P)
        reg = np.concatenate([l2 * w_now[:d], [0.0]])
        history.append(w_now - step / np.sqrt(k / P + 1.0) * (g + reg))
    return history[-1]


def test_weighted_asgd_matches_a_numpy_loop():
    from async_spark.data.dataset import open_dataset
    from async_spark.engine.emulator import CostModel
    from async_spark.solvers import TrainConfig, train_linear
    from async_spark.solvers.emulation import virtual_engine_factory

    seed, frac, step, l2 = 5, 0.3, 0.05, 1e-2
    dataset = open_dataset("builtin:breast_cancer", 3, loss="logistic", standardize=True)
    cfg = TrainConfig(
        data="builtin:breast_cancer",
        method="asgd",
        partitions=3,
        step=step,
        batch_fraction=frac,
        l2=l2,
        seed=seed,
        max_updates=60,
        eval_every=1e9,
        stragglers="intensity:1",  # block 0 answers half as often: weights far from 1
        quiet=True,
    )
    cost = CostModel(task_overhead_seconds=0.01, seconds_per_nnz=1e-6, driver_seconds=1e-3)
    run = train_linear(cfg, dataset=dataset, engine_factory=virtual_engine_factory(cost))
    assert run.summary()["block_weights"]["weight_range"][1] > 1.1
    ref = _numpy_weighted_asgd(dataset, run.trace, seed, frac, step, l2)
    np.testing.assert_allclose(run.theta, ref, rtol=1e-11, atol=1e-13)
    plain = _numpy_weighted_asgd(dataset, run.trace, seed, frac, step, l2, weigh=False)
    assert np.max(np.abs(plain - ref)) > 1e-6  # the weights are exercised

"""DC-ASGD through the method layer against a plain numpy loop over the same schedule."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from async_spark.data.dataset import open_dataset
from async_spark.engine.emulator import CostModel
from async_spark.optim.dcasgd import DCMessage, dcasgd
from async_spark.solvers import TrainConfig, train_linear
from async_spark.solvers.emulation import virtual_engine_factory
from async_spark.solvers.linear import build_model
from async_spark.solvers.worker import sample_rows

SEED, P, FRAC, STEP, L2, UPDATES = 5, 3, 0.3, 0.05, 1e-2, 40
LAMBDA = 0.04  # the rule's default compensation


@pytest.fixture(scope="module")
def cancer():
    return open_dataset("builtin:breast_cancer", P, loss="logistic", standardize=True)


def _run(dataset, method):
    cfg = TrainConfig(
        data="builtin:breast_cancer",
        method=method,
        partitions=P,
        step=STEP,
        batch_fraction=FRAC,
        l2=L2,
        seed=SEED,
        max_updates=UPDATES,
        eval_every=1e9,
        quiet=True,
    )
    # Tasks of different sizes finish out of order: real staleness, deterministic schedule.
    cost = CostModel(task_overhead_seconds=0.01, seconds_per_nnz=1e-6, driver_seconds=1e-3)
    return train_linear(cfg, dataset=dataset, engine_factory=virtual_engine_factory(cost))


def _numpy_dcasgd(dataset, trace, lam):
    """Zheng et al.'s update, written out: g at the stale version, g + lam g*g*(w - w_stale)."""
    source, desc = dataset
    blocks = [source.load(p) for p in range(P)]
    d = desc.d
    history = [np.zeros(d + 1)]
    tasks_done = [0] * P
    for k, rec in enumerate(r for r in trace if r["version"] > 0):
        b, staleness = rec["block"], rec["staleness"]
        w_now = history[-1]
        w_stale = history[len(history) - 1 - staleness]
        blk = blocks[b]
        idx = sample_rows(SEED, b, tasks_done[b], blk.rows, FRAC)
        tasks_done[b] += 1
        X, y = blk.X[idx], blk.y[idx]
        r = expit(X @ w_stale[:d] + w_stale[d]) - y
        g = np.concatenate([X.T @ r, [r.sum()]]) / (FRAC * desc.n / P)
        comp = g + lam * g * g * (w_now - w_stale)
        reg = np.concatenate([L2 * w_now[:d], [0.0]])
        gamma = STEP / np.sqrt(k / P + 1.0)
        history.append(w_now - gamma * (comp + reg))
    return history[-1]


def test_dcasgd_matches_a_numpy_loop_and_its_compensation_matters(cancer):
    result = _run(cancer, "dcasgd")
    assert result.updates == UPDATES
    stalenesses = [r["staleness"] for r in result.trace if r["version"] > 0]
    assert max(stalenesses) >= 2  # the compensation term is exercised
    ref = _numpy_dcasgd(cancer, result.trace, LAMBDA)
    np.testing.assert_allclose(result.theta, ref, rtol=1e-11, atol=1e-13)
    # Dropping the compensation (plain ASGD on the same schedule) is far outside that tolerance.
    plain = _numpy_dcasgd(cancer, result.trace, 0.0)
    assert np.max(np.abs(plain - ref)) > 1e-6


def test_dcasgd_without_delay_is_sgd():
    """A fresh result (w_stale = w) makes DC-ASGD's update SGD's exactly."""
    from async_spark.optim.sgd import SGDMessage, sgd

    _, desc = open_dataset("builtin:breast_cancer", P, loss="logistic")
    model = build_model(TrainConfig(l2=L2), desc)
    rng = np.random.default_rng(0)
    w = rng.standard_normal(model.num_params)
    g = rng.standard_normal(model.num_params)
    kw = dict(n=desc.n, num_blocks=P, batch_fraction=FRAC, step=STEP)
    a, _ = dcasgd(model, **kw).update(DCMessage(g, w.copy()), dcasgd(model, **kw).init(w), w)
    b, _ = sgd(model, **kw).update(SGDMessage(g), sgd(model, **kw).init(w), w)
    np.testing.assert_array_equal(a, b)


def test_dcasgd_is_asynchronous_only():
    with pytest.raises(ValueError, match="must be one of"):
        TrainConfig(method="dcsgd").validate()
    assert not TrainConfig(method="dcasgd").validate().synchronous

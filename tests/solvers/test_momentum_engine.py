"""Momentum methods through the training loop: numpy reference, fewer updates than SGD, options."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from async_spark.data.dataset import open_dataset
from async_spark.engine.emulator import CostModel
from async_spark.solvers import ConfigError, TrainConfig, train_linear
from async_spark.solvers.emulation import virtual_engine_factory
from async_spark.solvers.momentum import gram_max_eigenvalue


@pytest.fixture(scope="module")
def cancer():
    return open_dataset("builtin:breast_cancer", 2, standardize=True, loss="logistic")


def _full_gradient(X, y, theta, l2):
    Xt = np.hstack([X, np.ones((len(y), 1))])
    g = Xt.T @ (expit(Xt @ theta) - y) / len(y)
    g[:-1] += l2 * theta[:-1]
    return g


def _sync_ag(cancer, alpha, beta, l2, updates):
    """Synchronous AG on whole blocks at an explicit step: the run and the data's rows."""
    source, desc = cancer
    blocks = [source.load(p) for p in range(desc.num_blocks)]
    X, y = np.vstack([b.X for b in blocks]), np.concatenate([b.y for b in blocks])
    cfg = TrainConfig(
        data="x",
        method="ag",
        partitions=2,
        batch_fraction=1.0,
        l2=l2,
        step=alpha,
        momentum=beta,
        max_updates=updates,
        quiet=True,
    )
    return train_linear(cfg, dataset=cancer), X, y


def test_sync_ag_matches_a_numpy_nesterov_loop(cancer):
    alpha, beta, l2 = 0.2, 0.8, 1e-2
    result, X, y = _sync_ag(cancer, alpha, beta, l2, 40)
    x = x_prev = np.zeros(X.shape[1] + 1)
    for _ in range(40):
        yk = x + beta * (x - x_prev)
        x_prev, x = x, yk - alpha * _full_gradient(X, y, yk, l2)
    np.testing.assert_allclose(result.theta, x, rtol=0, atol=1e-10)


def test_a_rise_lowers_the_step_and_restarts_the_momentum(cancer):
    """AG at a step and momentum too large for the data: the safeguard sees the objective rise,
    halves the step and drops the momentum (O'Donoghue & Candès's function-value restart). The
    run is the numpy Nesterov loop with, at the change, the step halved and a fresh start from the
    look-ahead point the round's gradient was computed at; without the restart the loop ends
    elsewhere."""
    alpha, beta, l2, n = 0.6, 0.95, 1e-2, 60
    result, X, y = _sync_ag(cancer, alpha, beta, l2, n)
    changes = result.step_safeguard["changes"]
    assert changes and all(c["why"] == "rose" for c in changes), changes
    assert [c["to"] for c in changes] == [alpha / 2 ** (i + 1) for i in range(len(changes))]
    at = {c["update"] for c in changes}

    def nesterov(restart: bool) -> np.ndarray:
        x = x_prev = np.zeros(X.shape[1] + 1)
        a = alpha
        for k in range(n):
            yk = x + beta * (x - x_prev)
            if k in at:
                a /= 2
                if restart:
                    x = yk  # AG started afresh at yk: no extrapolation from the old iterate
            x_prev, x = x, yk - a * _full_gradient(X, y, yk, l2)
        return x

    np.testing.assert_allclose(result.theta, nesterov(restart=True), rtol=0, atol=1e-10)
    assert np.abs(result.theta - nesterov(restart=False)).max() > 1e-3


def test_momentum_needs_fewer_updates_than_sgd_when_ill_conditioned(cancer):
    L = 0.25 * gram_max_eigenvalue(*cancer) + 1e-2
    assert L / 1e-2 > 100  # kappa: an ill-conditioned problem
    finals = {}
    for method, extra in (("sgd", dict(step=1 / L, step_rule="constant")), ("hb", {}), ("ag", {})):
        cfg = TrainConfig(
            data="x",
            method=method,
            partitions=2,
            batch_fraction=1.0,
            l2=1e-2,
            max_updates=80,
            quiet=True,
            **extra,
        )
        finals[method] = train_linear(cfg, dataset=cancer).final_objective
    assert finals["ag"] < finals["sgd"] and finals["hb"] < finals["sgd"]


def test_staleness_damping_stabilizes_asynchronous_heavy_ball():
    data = open_dataset("builtin:breast_cancer", 8, standardize=True, loss="logistic")
    # Virtual time, not threads: 8 equal tasks in flight give a staleness of about 7 on every
    # machine (with threads a loaded CI machine made another schedule, and the guarded run ended
    # at 0.25).
    cost = CostModel(task_overhead_seconds=0.01, seconds_per_nnz=1e-6, driver_seconds=1e-3)

    def run(damping, safeguard=False, updates=300):
        cfg = TrainConfig(
            data="x",
            method="ahb",
            partitions=8,
            batch_fraction=1.0,
            l2=1e-2,
            max_updates=updates,
            quiet=True,
            momentum_damping=damping,
            step_safeguard=safeguard,
            eval_every=1e9,
        )
        r = train_linear(cfg, dataset=data, engine_factory=virtual_engine_factory(cost))
        return r.final_objective, r.summary(), r.momentum

    plain, summary, info = run(0.0)
    damped, _, _ = run(2.0)
    default, _, default_info = run(None)
    assert info["kappa"] > 100 and summary["mean_staleness"] > 3  # 8 in flight: about 7
    assert plain > 0.3  # tuned heavy ball with stale gradients oscillates far from 0.0996
    assert damped < 0.11  # damped by staleness it converges (optimum 0.0996)
    # ahb's default with an automatic step damps by 1 + tau (methods.ASYNC_DAMPING)
    assert default_info["damping"] == 1.0 and info["damping"] == 0.0
    assert default < 0.11, default
    assert summary["step_safeguard"] is None
    # The step safeguard (on by default) sees the sampled losses rise and lowers the step.
    # Three halvings in the runs seen (1.08 -> 0.135), each after a window of results rose.
    guarded, summary, _ = run(0.0, safeguard=True, updates=1000)
    lowered = summary["step_safeguard"]["changes"]
    assert {c["kind"] for c in lowered} == {"lowered"}  # momentum: the search upward is off
    assert lowered and guarded < 0.103, (guarded, lowered)
    assert summary["step_safeguard"]["final_step"] < summary["step"]
    assert all(c["window_objective"] > c["best_objective"] for c in lowered)


@pytest.mark.parametrize(
    ("kwargs", "damping"),
    [
        (dict(method="ahb"), 1.0),  # an automatic step: the method's default
        (dict(method="ahb", step=0.1, momentum=0.5), 0.0),  # the plain method asked for
        (dict(method="ahb", momentum_damping=0.0), 0.0),  # as given
        (dict(method="ahb", momentum_damping=3.0), 3.0),
        (dict(method="aag"), 0.0),
        (dict(method="hb"), 0.0),  # synchronous: no staleness to damp
        (dict(method="asaga"), 0.0),
    ],
)
def test_the_momentum_damping_default_is_the_methods(kwargs, damping):
    assert TrainConfig(**kwargs).validate().for_method().momentum_damping == damping


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        (dict(method="ag", step=0.1), "--momentum is needed"),
        (dict(method="hb", step=0.1, momentum=1.0), "--momentum must be in"),
        (dict(method="sgd", momentum=0.5), "--momentum applies"),
        (dict(method="aag", momentum_damping=-1.0), "--momentum-damping"),
        (dict(method="ag", tau=3), "--tau applies"),
        (dict(method="ag", momentum_restart="yes"), "--momentum-restart must be true or false"),
        (dict(method="ahb", step_rule="sqrt"), "--step-rule applies to the methods without"),
    ],
)
def test_bad_momentum_options(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        TrainConfig(**kwargs).validate()


def test_auto_step_needs_strong_convexity(cancer):
    """Refused by validate, on ``l2``, before any data is read (it was found at step time)."""
    cfg = TrainConfig(data="x", method="ag", partitions=2, l2=0.0, max_updates=5, quiet=True)
    with pytest.raises(ConfigError) as info:
        cfg.validate()
    assert info.value.field == "l2"
    assert str(info.value).startswith("--l2 must be > 0 for an automatic --step of ag")
    assert str(info.value).endswith("or give --step and --momentum")
    with pytest.raises(ConfigError, match="--l2 must be > 0"):
        train_linear(cfg, dataset=cancer)
    TrainConfig(method="ag", l2=0.0, step=0.1, momentum=0.5).validate()  # explicit: fine
    TrainConfig(method="sgd", l2=0.0).validate()  # the rule is momentum's only


def test_an_automatic_synchronous_ag_restarts_its_momentum(cancer):
    """The gradient restart runs for synchronous AG and APG with an automatic step only (an
    explicit step is the plain method; asynchronously a stale gradient would decide it; HB has
    none), and it is what brings the default AG close to the optimum: without it, the same run
    (the same step search) ends far higher."""
    from async_spark.solvers.momentum import MomentumLinear

    common = dict(data="x", partitions=2, l2=1e-3, max_updates=50, quiet=True)
    runs = {m: train_linear(TrainConfig(method=m, **common), dataset=cancer) for m in ("ag", "apg")}
    assert runs["ag"].momentum["restart"] and runs["apg"].momentum["restart"]
    for method, extra in (("aag", {}), ("hb", {}), ("ag", dict(step=0.2, momentum=0.8))):
        cfg = TrainConfig(method=method, **{**common, "max_updates": 5}, **extra)
        assert not train_linear(cfg, dataset=cancer).momentum["restart"], method
    with pytest.raises(ValueError, match="restart applies to ag and apg"):
        MomentumLinear("hb", runs["ag"].model, 569, 2, 1.0, 0.1, 0.5, restart=True)
    plain = train_linear(TrainConfig(method="ag", momentum_restart=False, **common), dataset=cancer)
    assert not plain.momentum["restart"]
    # the optimum is 0.0598: at 50 updates restarted AG is 2.5% above it, plain AG 82%
    assert plain.final_objective - runs["ag"].final_objective > 0.02, (
        plain.final_objective,
        runs["ag"].final_objective,
    )

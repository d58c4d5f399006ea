"""``--method lbfgs`` through the run loop: the pure rule's iterates, scikit-learn's optimum, the
same model on Spark (both transports) as in one process, exact resume, and its options."""

from __future__ import annotations

import numpy as np
import pytest

from async_spark.data.dataset import open_dataset
from async_spark.engine import EngineError, LocalTransport
from async_spark.models.linear import (
    LinearModel,
    block_gradient_sum,
    block_loss_sum,
    full_gradient,
    init_params,
    objective,
    pack_params,
)
from async_spark.optim.lbfgs import (
    LBFGSMessage,
    combine_lbfgs_messages,
    lbfgs,
    pseudo_gradient,
)
from async_spark.solvers import ConfigError, TrainConfig, train_linear
from async_spark.solvers.checkpoint import load_latest

L2 = 1e-2


@pytest.fixture(scope="module")
def cancer():
    return open_dataset("builtin:breast_cancer", 3, standardize=True, loss="logistic")


def _cfg(**kw):
    base = dict(
        data="builtin:breast_cancer",
        method="lbfgs",
        partitions=3,
        l2=L2,
        quiet=True,
        eval_every=1e9,
        max_updates=200,
    )
    return TrainConfig(**{**base, **kw})


def _reference(model, blocks, rounds):
    """The pure rule driven by hand over whole-block sums in block order (no engine)."""
    n = sum(b.rows for b in blocks)
    rule = lbfgs(model, n=n)
    theta = init_params(model)
    state = rule.init(theta)
    for _ in range(rounds):
        msg = combine_lbfgs_messages(
            [
                LBFGSMessage(
                    block_gradient_sum(model, b, theta), block_loss_sum(model, b, theta), b.rows
                )
                for b in blocks
            ]
        )
        theta, state = rule.update(msg, state, theta)
        if state.converged:
            break
    return state


def test_the_run_is_the_pure_rule_and_stops_at_scipys_optimum(cancer):
    from sklearn.linear_model import LogisticRegression

    source, desc = cancer
    run = train_linear(_cfg(), dataset=cancer)
    blocks = [source.load(p) for p in range(desc.num_blocks)]
    model = LinearModel("logistic", desc.d, l2=L2)
    ref = _reference(model, blocks, 200)
    # The reported model is the last accepted point, and the run made the same evaluations.
    np.testing.assert_allclose(run.theta, ref.x, rtol=0, atol=1e-12)
    assert run.updates == ref.evaluations
    assert run.stopped_by == "converged"
    assert run.updates < 60  # quasi-Newton: tens of rounds, not thousands
    X = np.vstack([b.X for b in blocks])
    y = np.concatenate([b.y for b in blocks])
    sk = LogisticRegression(C=1.0 / (len(y) * L2), tol=1e-12, max_iter=10_000).fit(X, y)
    f_star = objective(model, pack_params(model, sk.coef_[0], sk.intercept_[0]), blocks)
    assert (run.final_objective - f_star) / f_star <= 1e-10
    assert "step_safeguard" not in run.summary() or not run.summary()["step_safeguard"]


@pytest.mark.parametrize("l1", [0.0, 1e-2])
def test_the_snapshots_objectives_are_the_runs_own_values_and_no_evaluation_job_runs(
    cancer, monkeypatch, l1
):
    """L-BFGS evaluates F and its gradient over every row at each point it accepts, so the run's
    trace, final objective and optimality norms are those values, with no evaluation job: each
    must equal F and the norm recomputed at the pure rule's iterate of that version (a value
    paired with the wrong iterate, or the l1 term dropped, would not)."""
    from async_spark.models.linear import smooth_optimality_norm
    from async_spark.solvers import evaluate

    asked = []
    monkeypatch.setattr(
        evaluate.Evaluator, "evaluate", lambda self, *a, **k: asked.append(a) or (None, None)
    )
    source, desc = cancer
    run = train_linear(_cfg(eval_every=1e-9, max_updates=15, l1=l1, tol=1e-12), dataset=cancer)
    assert asked == [] and run.updates == 15
    blocks = [source.load(p) for p in range(desc.num_blocks)]
    model = LinearModel("logistic", desc.d, l2=L2, l1=l1)
    known = [r for r in run.trace if r["objective"] is not None]
    assert [r["version"] for r in known] == list(range(16))  # a snapshot at every update
    for r in known:
        x = _reference(model, blocks, r["version"]).x if r["version"] else init_params(model)
        assert r["objective"] == pytest.approx(objective(model, x, blocks), rel=1e-13)
    assert run.final_objective == known[-1]["objective"]
    start, end = init_params(model), run.theta
    for norm, theta in ((run.start_gradient_norm, start), (run.gradient_norm, end)):
        expect = smooth_optimality_norm(model, theta, full_gradient(model, theta, blocks))
        assert norm == pytest.approx(expect, rel=1e-9)


def test_with_l1_the_run_is_owlqn_and_stops_at_a_sparse_optimum(cancer):
    source, desc = cancer
    run = train_linear(_cfg(l1=1e-2, max_updates=400), dataset=cancer)
    assert run.stopped_by == "converged"
    blocks = [source.load(p) for p in range(desc.num_blocks)]
    model = LinearModel("logistic", desc.d, l2=L2, l1=1e-2)
    ref = _reference(model, blocks, 400)
    np.testing.assert_allclose(run.theta, ref.x, rtol=0, atol=1e-12)
    rule = lbfgs(model, n=desc.n)
    pg = pseudo_gradient(run.theta, full_gradient(model, run.theta, blocks), rule.l1_weights)
    assert float(np.max(np.abs(pg))) <= 1e-8  # the optimality certificate of the l1 problem
    assert 3 <= int(np.sum(run.theta[: desc.d] == 0.0)) < desc.d


@pytest.mark.spark
@pytest.mark.parametrize("transport, l1", [("resident", 0.0), ("jobs", 0.0), ("resident", 1e-2)])
def test_spark_runs_equal_the_in_process_run(spark, cancer, transport, l1):
    local = train_linear(_cfg(max_updates=25, l1=l1), dataset=cancer)
    on_spark = train_linear(
        _cfg(max_updates=25, l1=l1, transport=transport), spark=spark, dataset=cancer
    )
    np.testing.assert_array_equal(on_spark.theta, local.theta)
    assert on_spark.final_objective == local.final_objective
    assert on_spark.updates == local.updates == 25


def test_a_resumed_run_ends_with_exactly_the_same_model(tmp_path, cancer):
    def cfg(out, updates):
        return _cfg(out=str(out), checkpoint_every=5, max_updates=updates, eval_every=1e-3)

    full = train_linear(cfg(tmp_path / "full", 24), dataset=cancer)
    train_linear(cfg(tmp_path / "cut", 12), dataset=cancer)
    ckpt = load_latest(tmp_path / "cut")
    assert ckpt.updates == 12
    resumed = train_linear(cfg(tmp_path / "cut", 24), dataset=cancer, resume=ckpt)
    np.testing.assert_array_equal(resumed.theta, full.theta)
    assert resumed.final_objective == full.final_objective


@pytest.mark.parametrize(
    "options, field",
    [
        ({"step": 0.1}, "step"),
        ({"step_rule": "sqrt"}, "step_rule"),
        ({"batch_fraction": 0.5}, "batch_fraction"),
    ],
)
def test_options_a_line_search_cannot_take_are_refused(options, field):
    with pytest.raises(ConfigError) as err:
        _cfg(**options).validate()
    assert err.value.field == field
    assert "lbfgs" in str(err.value)
    _cfg(batch_fraction=1.0).validate()  # the exact rounds it needs are accepted


class _BrokenBlock(LocalTransport):
    """Every task of block 1 raises (say, rows that one executor cannot read)."""

    def _execute(self, ticket, call):
        if ticket.block == 1:
            raise RuntimeError("block 1 is broken")
        return super()._execute(ticket, call)


def test_a_block_given_up_ends_the_run_with_its_error_instead_of_running_to_the_budget(cancer):
    """L-BFGS evaluates again a round that misses a block: with the block given up for good,
    every round would, until the budget. The run stops at once, naming the block and its error;
    synchronous SGD (whose rounds are the blocks left) goes on without it."""
    cfg = _cfg(max_retries=1, time_budget=20.0, max_updates=10**6)
    with pytest.raises(EngineError, match=r"(?s)block\(s\) \[1\] given up.*block 1 is broken"):
        train_linear(cfg, dataset=cancer, transport=_BrokenBlock())
    sgd = train_linear(
        _cfg(method="sgd", max_retries=1, max_updates=20),
        dataset=cancer,
        transport=_BrokenBlock(),
    )
    assert sgd.updates == 20 and sgd.stopped_by == "max_updates"
    assert [b["status"] for b in sgd.engine_snapshot["blocks"]] == ["idle", "dead", "idle"]

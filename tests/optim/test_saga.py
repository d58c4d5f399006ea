"""SAGA with one scalar per sample against classic SAGA (a table of full gradients)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from async_spark.data import open_dataset
from async_spark.data.blocks import Block
from async_spark.models import LinearModel, init_params, objective, pack_params
from async_spark.optim.saga import SAGAMessage, combine_saga_messages, saga
from async_spark.solvers.worker import saga_delta as saga_task_gradient
from async_spark.solvers.worker import sample_rows


def _msg(block, local, delta, new, old=None):
    """One task's SAGA message (local rows of one block)."""
    return SAGAMessage(
        (block,), (local,), delta, (new,), old_scalars=None if old is None else (old,)
    )


def _grad_i(model, x, t, theta):
    """Textbook per-sample gradient (data part), flat layout [W.ravel(), b]."""
    K, d = model.outputs, model.num_features
    W, b = theta[: K * d].reshape(K, d), theta[K * d :]
    z = W @ x + b
    if model.loss == "logistic":
        r = np.array([1.0 / (1.0 + np.exp(-z[0])) - t])
    elif model.loss == "squares":
        r = np.array([z[0] - t])
    else:
        e = np.exp(z - z.max())
        r = e / e.sum()
        r[int(t)] -= 1.0
    return np.concatenate([np.outer(r, x).ravel(), r if model.fit_intercept else 0 * r])


def _classic_saga(model, X, y, n, P, b, gamma, seed, rounds, rows_of_block):
    """Classic SAGA: an n x p table of gradients; one synchronous round = all P blocks."""
    p = model.num_params
    table = np.zeros((n, p))
    avg = np.zeros(p)
    theta = np.zeros(p)
    Kd = model.outputs * model.num_features
    for k in range(rounds):
        idx = np.concatenate(
            [
                off + sample_rows(seed, blk, k, cnt, b)
                for blk, (off, cnt) in enumerate(rows_of_block)
            ]
        )
        new = np.array([_grad_i(model, X[i], y[i], theta) for i in idx]).reshape(-1, p)
        delta = (new - table[idx]).sum(axis=0)
        reg = model.l2 * theta
        reg[Kd:] = 0.0
        v = theta - gamma * (delta / (b * n) + avg + reg)
        w = v[:Kd]
        v[:Kd] = np.sign(w) * np.maximum(np.abs(w) - gamma * model.l1, 0.0)
        theta = v
        avg = avg + delta / n
        table[idx] = new
    return theta


@pytest.mark.parametrize(
    "loss, K, sparse, P",
    [
        ("logistic", None, False, 1),
        ("logistic", None, True, 1),
        ("squares", None, False, 1),
        ("softmax", 3, True, 1),
        ("logistic", None, True, 3),  # a synchronous round over 3 blocks, combined
    ],
)
def test_saga_matches_classic_saga(loss, K, sparse, P) -> None:
    rng = np.random.default_rng(0)
    n, d, b, gamma, seed, rounds = 45, 4, 0.3, 0.2, 5, 30
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < 0.7)
    y = rng.standard_normal(n) if loss == "squares" else rng.integers(0, K or 2, n).astype(float)
    model = LinearModel(loss, d, K, l2=0.05, l1=0.01)
    bounds = np.linspace(0, n, P + 1).astype(int)
    blocks = [
        Block(sp.csr_matrix(X[lo:hi]) if sparse else X[lo:hi], y[lo:hi], int(lo))
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    rule = saga(model, block_rows=[blk.rows for blk in blocks], batch_fraction=b, step=gamma)
    theta = init_params(model)
    state = rule.init(theta)
    for k in range(rounds):
        msgs = []
        for p, blk in enumerate(blocks):
            local = sample_rows(seed, p, k, blk.rows, b)
            old = rule.scalars_for(state, p, local)
            delta, new = saga_task_gradient(model, blk, theta, local, old)
            msgs.append(_msg(p, local, delta, new, old))
        theta, state = rule.update(combine_saga_messages(msgs), state, theta)
    ref = _classic_saga(
        model, X, y, n, P, b, gamma, seed, rounds, [(blk.row_offset, blk.rows) for blk in blocks]
    )
    np.testing.assert_allclose(theta, ref, rtol=1e-12, atol=1e-12)
    # The scalar table reproduces the classic table's average exactly.
    table_avg = np.zeros(model.num_params)
    for p, blk in enumerate(blocks):
        from async_spark.models import gradient_from_scalars

        table_avg += gradient_from_scalars(model, blk, state.table[p])
    np.testing.assert_allclose(state.avg, table_avg / n, rtol=1e-11, atol=1e-13)


def test_saga_converges_to_sklearn_optimum_on_breast_cancer() -> None:
    from sklearn.linear_model import LogisticRegression

    P, b, l2 = 4, 0.2, 1e-2
    source, desc = open_dataset("builtin:breast_cancer", P, loss="logistic", standardize=True)
    blocks = [source.load(p) for p in range(P)]
    model = LinearModel("logistic", desc.d, l2=l2)
    # Step 0.1: the theory-safe 1/(3 (L_max + l2)) = 0.003 on these rows (max ||x||^2 = 422
    # after standardization) is ~30x smaller and would need ~30x more updates.
    rule = saga(model, block_rows=desc.rows_per_block, batch_fraction=b, step=0.1)
    theta = init_params(model)
    state = rule.init(theta)
    for k in range(5000):  # asynchronous-style: one block's result per update
        p = k % P
        blk = blocks[p]
        local = sample_rows(0, p, k // P, blk.rows, b)
        old = rule.scalars_for(state, p, local)
        delta, new = saga_task_gradient(model, blk, theta, local, old)
        theta, state = rule.update(_msg(p, local, delta, new, old), state, theta)
    X = np.vstack([blk.X for blk in blocks])
    y = np.concatenate([blk.y for blk in blocks])
    sk = LogisticRegression(C=1.0 / (desc.n * l2), tol=1e-12, max_iter=10_000).fit(X, y)
    f_star = objective(model, pack_params(model, sk.coef_[0], sk.intercept_[0]), blocks)
    gap = (objective(model, theta, blocks) - f_star) / f_star
    assert gap <= 1e-6, gap


def test_table_conflict_is_refused() -> None:
    model = LinearModel("squares", 2)
    rule = saga(model, block_rows=[4], batch_fraction=1.0, step=0.1)
    theta = init_params(model)
    state = rule.init(theta)
    rows = np.array([0, 1])
    old = rule.scalars_for(state, 0, rows)
    msg = _msg(0, rows, np.ones(3), np.array([1.0, 2.0]), old)
    theta, state = rule.update(msg, state, theta)
    with pytest.raises(ValueError, match="two tasks were in flight on the same rows"):
        rule.update(msg, state, theta)  # the same rows, dispatched with the old scalars


def test_update_returns_a_new_state_and_leaves_the_old_one_valid() -> None:
    """No hidden mutation: replaying an update from the same state gives the same result, and
    only the touched block's table is a new array (the others are shared, O(N/P) per update)."""
    model = LinearModel("logistic", 2)
    rule = saga(model, block_rows=[3, 2], batch_fraction=1.0, step=0.1)
    theta = init_params(model)
    state = rule.init(theta)
    before = [t.copy() for t in state.table]
    msg = _msg(1, np.array([0, 1]), np.ones(3), np.array([0.5, -0.5]))
    theta1, state1 = rule.update(msg, state, theta)
    theta2, state2 = rule.update(msg, state, theta)
    assert all(np.array_equal(a, b) for a, b in zip(state.table, before, strict=True))
    assert np.array_equal(theta1, theta2) and np.array_equal(state1.table[1], state2.table[1])
    np.testing.assert_array_equal(state1.table[1], [0.5, -0.5])
    assert state1.table[0] is state.table[0] and state1.table[1] is not state.table[1]


def test_each_block_table_is_labelled_by_the_result_that_last_wrote_it() -> None:
    """The labels resident workers hold their tables by (engine.task.HeldRows): -1 at the
    start, then the block_task of the result that wrote the block; a message without one gets
    a fresh negative label; a synchronous round labels each of its blocks; a restored state
    without labels (an older checkpoint) counts as -1 everywhere."""
    from async_spark.solvers.checkpoint import _state_parts, state_from_parts

    model = LinearModel("logistic", 2)
    rule = saga(model, block_rows=[3, 2, 2], batch_fraction=1.0, step=0.1)
    theta = init_params(model)
    state = rule.init(theta)
    assert state.origins.tolist() == [-1, -1, -1]
    msg = _msg(1, np.array([0]), np.ones(3), np.array([0.5]))._replace(block_tasks=(7,))
    _, s1 = rule.update(msg, state, theta)
    assert s1.origins.tolist() == [-1, 7, -1] and state.origins.tolist() == [-1, -1, -1]
    _, s2 = rule.update(_msg(1, np.array([1]), np.ones(3), np.array([0.25])), s1, theta)
    _, s3 = rule.update(_msg(1, np.array([1]), np.ones(3), np.array([0.25])), s2, theta)
    assert s2.origins[1] < -1 and s3.origins[1] < -1 and s2.origins[1] != s3.origins[1]
    round_ = combine_saga_messages(
        [
            _msg(b, np.array([0]), np.ones(3), np.array([1.0]))._replace(block_tasks=(10 + b,))
            for b in (0, 2)
        ]
    )
    _, s4 = rule.update(round_, s3, theta)
    assert s4.origins.tolist() == [10, s3.origins[1], 12]
    arrays, scalars = _state_parts(s4)
    del arrays["origins"]
    restored = state_from_parts(rule.init(theta), arrays, scalars)
    assert restored.origins.tolist() == [-1, -1, -1] and restored.step == s4.step
    np.testing.assert_array_equal(restored.table[2], s4.table[2])


def test_message_shapes_are_checked() -> None:
    model = LinearModel("softmax", 2, 3)
    rule = saga(model, block_rows=[4], batch_fraction=1.0, step=0.1)
    theta = init_params(model)
    state = rule.init(theta)
    assert state.table[0].shape == (4, 3) and state.avg.shape == (9,)
    with pytest.raises(ValueError, match=r"new_scalars must have shape \(2, 3\), got \(2,\)"):
        rule.update(_msg(0, np.array([0, 1]), np.zeros(9), np.zeros(2)), state, theta)
    blk = Block(np.ones((4, 2)), np.zeros(4), 0)
    with pytest.raises(ValueError, match=r"old_scalars must have shape \(2, 3\)"):
        saga_task_gradient(model, blk, theta, np.array([0, 1]), np.zeros(2))
    delta, new = saga_task_gradient(model, blk, theta, np.array([], dtype=int), np.zeros((0, 3)))
    assert np.all(delta == 0.0) and new.shape == (0, 3)

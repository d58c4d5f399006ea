"""Losses, gradients and regularizers against finite differences and plain numpy loops."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from async_spark.data.blocks import Block
from async_spark.models import (
    LinearModel,
    block_gradient_sum,
    block_loss_sum,
    elastic_net,
    full_gradient,
    gradient_from_scalars,
    init_params,
    max_squared_row_norm,
    objective,
    pack_params,
    prox_penalty,
    regularizer,
    sample_scalars,
    sample_smoothness,
    split_params,
)

CASES = [
    ("logistic", None, True),
    ("logistic", None, False),
    ("squares", None, True),
    ("softmax", 3, True),
    ("softmax", 4, False),
]


def _data(loss: str, K: int | None, rows: int = 23, d: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, d)) * (rng.random((rows, d)) < 0.6)
    if loss == "logistic":
        y = rng.integers(0, 2, rows).astype(float)
    elif loss == "squares":
        y = rng.standard_normal(rows)
    else:
        y = rng.integers(0, K, rows).astype(float)
    return X, y


def _model(loss, K, fit, d=6, l2=0.3, l1=0.0):
    return LinearModel(loss, d, K, l2=l2, l1=l1, fit_intercept=fit)


def _theta(model, seed=1):
    theta = np.random.default_rng(seed).standard_normal(model.num_params)
    if not model.fit_intercept:
        theta[model.outputs * model.num_features :] = 0.0
    return theta


def _loop_loss_and_grad(model, X, y, theta):
    """Plain per-sample loop (the textbook formulas), no vectorization."""
    W, b = (
        theta[: model.outputs * model.num_features].reshape(model.outputs, -1),
        theta[-model.outputs :],
    )
    total, grad = 0.0, np.zeros_like(theta)
    for x, t in zip(X, y, strict=True):
        z = W @ x + b
        if model.loss == "logistic":
            p = 1.0 / (1.0 + np.exp(-z[0]))
            total += -(t * np.log(p) + (1 - t) * np.log(1 - p))
            r = np.array([p - t])
        elif model.loss == "squares":
            total += 0.5 * (z[0] - t) ** 2
            r = np.array([z[0] - t])
        else:
            e = np.exp(z - z.max())
            p = e / e.sum()
            total += -np.log(p[int(t)])
            r = p.copy()
            r[int(t)] -= 1.0
        grad[: W.size] += np.outer(r, x).ravel()
        if model.fit_intercept:
            grad[W.size :] += r
    return total, grad


@pytest.mark.parametrize("loss, K, fit", CASES)
def test_against_plain_loop(loss, K, fit) -> None:
    X, y = _data(loss, K)
    model = _model(loss, K, fit)
    theta = _theta(model)
    block = Block(X, y, 0)
    total, grad = _loop_loss_and_grad(model, X, y, theta)
    assert block_loss_sum(model, block, theta) == pytest.approx(total, rel=1e-12)
    np.testing.assert_allclose(
        block_gradient_sum(model, block, theta), grad, rtol=1e-11, atol=1e-12
    )
    rows = np.array([0, 3, 4, 10, 22])
    t_s, g_s = _loop_loss_and_grad(model, X[rows], y[rows], theta)
    assert block_loss_sum(model, block, theta, rows) == pytest.approx(t_s, rel=1e-12)
    np.testing.assert_allclose(
        block_gradient_sum(model, block, theta, rows), g_s, rtol=1e-11, atol=1e-12
    )


@pytest.mark.parametrize("loss, K, fit", CASES)
def test_gradient_matches_finite_differences(loss, K, fit) -> None:
    X, y = _data(loss, K)
    model = _model(loss, K, fit, l2=0.7)
    theta = _theta(model, 2)
    blocks = [Block(X[:10], y[:10], 0), Block(X[10:], y[10:], 10)]
    g = full_gradient(model, theta, blocks)
    eps = 1e-6
    fd = np.zeros_like(theta)
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = eps
        fd[j] = (objective(model, theta + e, blocks) - objective(model, theta - e, blocks)) / (
            2 * eps
        )
    if not fit:
        fd[model.outputs * model.num_features :] = 0.0  # intercept fixed at 0
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("loss, K, fit", CASES)
def test_dense_and_sparse_paths_agree(loss, K, fit) -> None:
    X, y = _data(loss, K, rows=40)
    model = _model(loss, K, fit)
    theta = _theta(model)
    dense, csr = Block(X, y, 0), Block(sp.csr_matrix(X), y, 0)
    rows = np.array([1, 2, 3, 17, 39])
    for r in (None, rows):
        assert block_loss_sum(model, csr, theta, r) == pytest.approx(
            block_loss_sum(model, dense, theta, r), rel=1e-13
        )
        np.testing.assert_allclose(
            block_gradient_sum(model, csr, theta, r),
            block_gradient_sum(model, dense, theta, r),
            rtol=1e-12,
            atol=1e-13,
        )
        np.testing.assert_allclose(
            sample_scalars(model, csr, theta, r), sample_scalars(model, dense, theta, r), rtol=1e-12
        )


@pytest.mark.parametrize("loss, K, fit", CASES)
def test_an_implicit_center_reads_every_row_minus_the_center(loss, K, fit) -> None:
    """``center`` on a CSR block gives the losses, gradients and scalars of the dense matrix
    ``X - 1 c^T`` (the plain loop on it is the reference); the CSR block is never densified."""
    X, y = _data(loss, K, rows=40)
    c = np.random.default_rng(5).standard_normal(X.shape[1])
    if not fit:  # without an intercept to absorb it, a shift would change the model
        with pytest.raises(ValueError, match="center needs fit_intercept=True"):
            LinearModel(loss, 6, K, fit_intercept=False, center=c)
        return
    centered = LinearModel(loss, 6, K, l2=0.3, center=c)
    theta = _theta(centered)
    csr = Block(sp.csr_matrix(X), y, 0)
    total, grad = _loop_loss_and_grad(centered, X - c, y, theta)
    assert block_loss_sum(centered, csr, theta) == pytest.approx(total, rel=1e-12)
    np.testing.assert_allclose(block_gradient_sum(centered, csr, theta), grad, atol=1e-11)
    plain = _model(loss, K, fit)
    shifted = Block(X - c, y, 0)
    rows = np.array([0, 3, 4, 21, 39])
    for r in (None, rows):
        scalars = sample_scalars(centered, csr, theta, r)
        np.testing.assert_allclose(scalars, sample_scalars(plain, shifted, theta, r), atol=1e-12)
        np.testing.assert_allclose(
            gradient_from_scalars(centered, csr, scalars, r),
            gradient_from_scalars(plain, shifted, scalars, r),
            atol=1e-11,
        )
    assert centered.center == tuple(c.tolist()) and hash(centered)  # compares and hashes
    # a center moves the margins: without it the same CSR block gives other losses
    assert abs(block_loss_sum(plain, csr, theta) - total) > 1e-6


def test_a_center_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="center must be 6 finite numbers"):
        LinearModel("logistic", 6, center=np.zeros(5))
    with pytest.raises(ValueError, match="center must be 6 finite numbers"):
        LinearModel("logistic", 6, center=[0.0] * 5 + [np.nan])


@pytest.mark.parametrize("loss, K, fit", CASES)
def test_glm_trick_rebuilds_gradients(loss, K, fit) -> None:
    X, y = _data(loss, K)
    model = _model(loss, K, fit)
    theta = _theta(model)
    block = Block(sp.csr_matrix(X), y, 0)
    rows = np.array([2, 5, 6])
    phi = sample_scalars(model, block, theta, rows)
    assert phi.shape == (3, *model.scalar_shape)
    np.testing.assert_allclose(
        gradient_from_scalars(model, block, phi, rows),
        block_gradient_sum(model, block, theta, rows),
        rtol=1e-13,
        atol=1e-14,
    )
    assert np.all(gradient_from_scalars(model, block, phi[:0], rows[:0]) == 0.0)


def test_objective_and_regularizer() -> None:
    X, y = _data("logistic", None)
    model = LinearModel("logistic", 6, l2=0.5, l1=0.25)
    theta = _theta(model)
    w, b = split_params(model, theta)
    assert isinstance(b, float) and w.shape == (6,)
    assert regularizer(model, theta) == pytest.approx(0.25 * w @ w + 0.25 * np.abs(w).sum())
    total, _ = _loop_loss_and_grad(model, X, y, theta)
    blocks = [Block(X[:5], y[:5], 0), Block(X[5:], y[5:], 5)]
    assert objective(model, theta, blocks) == pytest.approx(total / 23 + regularizer(model, theta))
    np.testing.assert_array_equal(pack_params(model, w, b), theta)
    # Softmax layout: W (K, d) row-major, then b (K,).
    sm = LinearModel("softmax", 6, 3)
    th = np.arange(sm.num_params, dtype=float)
    W, bb = split_params(sm, th)
    np.testing.assert_array_equal(W, th[:18].reshape(3, 6))
    np.testing.assert_array_equal(bb, th[18:])
    assert sm.num_params == 21 and init_params(sm).shape == (21,)


def test_prox_l1_soft_thresholds_weights_only() -> None:
    model = LinearModel("squares", 3, l1=2.0)
    theta = np.array([3.0, -0.5, -4.0, 10.0])
    np.testing.assert_array_equal(prox_penalty(model, theta, 0.5), [2.0, 0.0, -3.0, 10.0])
    plain = LinearModel("squares", 3)
    assert prox_penalty(plain, theta, 0.5) is theta


def test_penalty_scale_penalizes_the_original_columns_weights() -> None:
    """With penalty_scale s the penalty is that of W / s; the rules split it into a uniform
    gradient part and a prox, whose sum must be the whole penalty's proximal-gradient step."""
    from scipy.optimize import minimize_scalar

    from async_spark.models import penalty_gradient, regularizer_gradient, uniform_l2

    s = np.array([0.5, 2.0, 4.0])
    model = LinearModel("softmax", 3, num_classes=2, l2=0.3, l1=0.2, penalty_scale=s)
    rng = np.random.default_rng(0)
    theta = rng.standard_normal(model.num_params)
    W = theta[:6].reshape(2, 3)
    assert regularizer(model, theta) == pytest.approx(
        0.15 * np.sum((W / s) ** 2) + 0.2 * np.sum(np.abs(W / s))
    )
    assert uniform_l2(model) == pytest.approx(0.3 / 16)
    eps = 1e-6
    smooth = LinearModel("softmax", 3, num_classes=2, l2=0.3, penalty_scale=s)
    numeric = [
        (regularizer(smooth, theta + eps * e) - regularizer(smooth, theta - eps * e)) / (2 * eps)
        for e in np.eye(theta.size)
    ]
    np.testing.assert_allclose(penalty_gradient(model, theta), numeric, atol=1e-7)
    # a gradient step on the uniform part, then the prox of the rest, per weight
    step, lu = 0.7, uniform_l2(model)
    moved = prox_penalty(model, theta - step * regularizer_gradient(model, theta), step)
    for k in range(6):
        j = k % 3

        def one(u, v=theta[k] * (1 - step * lu), j=j):
            rest = 0.5 * (0.3 / s[j] ** 2 - lu) * u**2 + 0.2 * abs(u) / s[j]
            return (u - v) ** 2 / (2 * step) + rest

        best = minimize_scalar(one, bounds=(-10, 10), method="bounded", options={"xatol": 1e-12})
        assert moved[k] == pytest.approx(best.x, abs=1e-7)
    np.testing.assert_array_equal(moved[6:], theta[6:])  # intercepts untouched
    with pytest.raises(ValueError, match="penalty_scale must be 3 finite numbers > 0"):
        LinearModel("squares", 3, penalty_scale=[1.0, 0.0, 1.0])
    assert model == LinearModel("softmax", 3, num_classes=2, l2=0.3, l1=0.2, penalty_scale=s)


def test_elastic_net() -> None:
    assert elastic_net(0.2, 0.25) == pytest.approx((0.05, 0.15))
    with pytest.raises(ValueError, match=r"l1_ratio must be in \[0, 1\], got 1.5"):
        elastic_net(1.0, 1.5)


@pytest.mark.parametrize("loss, K", [("logistic", None), ("squares", None), ("softmax", 3)])
def test_sample_smoothness_bounds_hessian(loss, K) -> None:
    X, y = _data(loss, K, rows=8)
    model = _model(loss, K, True, l2=0.0)
    L = sample_smoothness(model, max_squared_row_norm([Block(X, y, 0)]))
    rng = np.random.default_rng(5)
    eps = 1e-5
    for i in range(8):
        blk = Block(X[i : i + 1], y[i : i + 1], 0)
        theta = rng.standard_normal(model.num_params) * 0.3
        H = np.zeros((theta.size, theta.size))
        for j in range(theta.size):
            e = np.zeros_like(theta)
            e[j] = eps
            H[:, j] = (
                block_gradient_sum(model, blk, theta + e)
                - block_gradient_sum(model, blk, theta - e)
            ) / (2 * eps)
        assert np.linalg.eigvalsh((H + H.T) / 2).max() <= L * (1 + 1e-6)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (
            {"loss": "hinge", "num_features": 3},
            r"loss must be one of logistic, squares, softmax, got 'hinge'",
        ),
        ({"loss": "squares", "num_features": 0}, r"num_features must be an integer >= 1, got 0"),
        (
            {"loss": "softmax", "num_features": 3},
            r"num_classes must be an integer >= 2 for softmax, got None",
        ),
        (
            {"loss": "logistic", "num_features": 3, "num_classes": 3},
            r"num_classes must be None or 2",
        ),
        (
            {"loss": "squares", "num_features": 3, "l2": -1},
            r"l2 must be a finite number >= 0, got -1",
        ),
        (
            {"loss": "squares", "num_features": 3, "l1": float("nan")},
            r"l1 must be a finite number >= 0",
        ),
    ],
)
def test_model_validation(kwargs, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        LinearModel(**kwargs)


def test_shape_checks() -> None:
    model = LinearModel("logistic", 4)
    X, y = np.ones((3, 4)), np.ones(3)
    with pytest.raises(ValueError, match=r"theta must have shape \(5,\), got \(4,\)"):
        block_loss_sum(model, Block(X, y, 0), np.zeros(4))
    with pytest.raises(ValueError, match="X has 3 columns, the model 4 features"):
        block_loss_sum(model, Block(np.ones((3, 3)), y, 0), np.zeros(5))
    sm = LinearModel("softmax", 4, 3)
    with pytest.raises(ValueError, match=r"class indices in \[0, 3\)"):
        block_loss_sum(sm, Block(X, np.array([0.0, 1.0, 3.0]), 0), np.zeros(15))


def test_take_rows_selects_rows_in_order_with_repeats_dense_and_csr() -> None:
    from async_spark.models.linear import take_rows

    rng = np.random.default_rng(3)
    X = rng.standard_normal((50, 7))
    rows = np.array([4, 0, 49, 4, 17], dtype=np.int64)
    got = take_rows(X, rows)
    assert got.shape == (5, 7) and np.array_equal(got, X[rows])
    got[0, 0] = 1e9  # a copy: the block is not changed through it
    assert X[4, 0] != 1e9
    S = sp.random(50, 7, density=0.3, format="csr", random_state=3)
    assert np.array_equal(take_rows(S, rows).toarray(), S.toarray()[rows])
    assert take_rows(X, np.zeros(0, dtype=np.int64)).shape == (0, 7)

"""Momentum update rules against plain numpy loops, torch.optim.SGD, and bad parameters."""

from __future__ import annotations

import numpy as np
import pytest

from async_spark.optim import (
    APGState,
    Box,
    HeavyBallState,
    NesterovState,
    RobustMomentumState,
    accelerated_projected_gradient,
    heavy_ball,
    momentum_parameters,
    momentum_rule,
    nesterov,
    robust_momentum,
    robust_momentum_parameters,
)


def _quadratic(d: int = 5, kappa: float = 50.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    lam = np.geomspace(1.0 / kappa, 1.0, d)
    U, _ = np.linalg.qr(rng.standard_normal((d, d)))
    Q = (U * lam) @ U.T
    b = rng.standard_normal(d)
    x0 = rng.standard_normal(d)
    return Q, b, x0


def _run(rule, grad, x0, steps):
    params = x0.copy()
    state = rule.init(params)
    out = [params]
    for _ in range(steps):
        params, state = rule.update(grad, state, params)
        out.append(params)
    return np.array(out), state


def test_heavy_ball_matches_numpy_loop_with_schedules():
    Q, b, x0 = _quadratic()
    alpha = lambda k: 0.5 / (1 + 0.01 * k)  # noqa: E731
    beta = lambda k: 0.8 * k / (k + 1)  # noqa: E731
    iters, state = _run(heavy_ball(alpha, beta), lambda x: Q @ x - b, x0, 40)
    x_prev, x = x0.copy(), x0.copy()
    for k in range(40):
        x, x_prev = x - alpha(k) * (Q @ x - b) + beta(k) * (x - x_prev), x
        np.testing.assert_allclose(iters[k + 1], x, rtol=1e-13, atol=1e-13)
    assert isinstance(state, HeavyBallState) and state.step == 40
    np.testing.assert_allclose(state.prev, x_prev)


def test_nesterov_matches_paper_form():
    """y_k = (1+b) x_k - b x_{k-1}, x_{k+1} = y_k - a grad f(y_k); params are y, state.x is x."""
    Q, b, x0 = _quadratic()
    a, beta = momentum_parameters("ag", 1 / 50, 1.0)
    rule = nesterov(a, beta)
    params, state = x0.copy(), rule.init(x0)
    x_prev, x = x0.copy(), x0.copy()
    for _ in range(200):
        y = (1 + beta) * x - beta * x_prev
        np.testing.assert_allclose(params, y, rtol=1e-12, atol=1e-12)
        x_prev, x = x, y - a * (Q @ y - b)
        params, state = rule.update(Q @ params - b, state, params)
        np.testing.assert_allclose(state.x, x, rtol=1e-12, atol=1e-12)
    assert isinstance(state, NesterovState)
    # converges to the minimizer
    np.testing.assert_allclose(state.x, np.linalg.solve(Q, b), rtol=1e-6, atol=1e-6)


def test_apg_matches_numpy_loop_and_stays_feasible():
    Q, b, x0 = _quadratic(seed=1)
    box = Box(-0.3, 0.4)
    a = 0.9
    beta = lambda k: k / (k + 3)  # noqa: E731
    rule = accelerated_projected_gradient(a, beta, box)
    params = x0.copy()
    state = rule.init(params)
    x = np.clip(x0, -0.3, 0.4)
    np.testing.assert_allclose(state.x, x)
    y = x0.copy()
    for k in range(50):
        x_new = np.clip(y - a * (Q @ y - b), -0.3, 0.4)
        y = x_new + beta(k) * (x_new - x)
        x = x_new
        params, state = rule.update(lambda v: Q @ v - b, state, params)
        np.testing.assert_allclose(state.x, x, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(params, y, rtol=1e-12, atol=1e-12)
        assert np.all(state.x >= -0.3) and np.all(state.x <= 0.4)
    assert isinstance(state, APGState)


def test_robust_momentum_matches_numpy_loop_and_rate():
    mu, L = 0.02, 1.0
    kappa = L / mu
    rho = 0.5 * ((1 - 1 / np.sqrt(kappa)) + (1 - 1 / kappa))
    a, beta, gamma = robust_momentum_parameters(mu, L, rho)
    Q, b, x0 = _quadratic(kappa=kappa)
    rule = robust_momentum(mu, L, rho)
    params, state = x0.copy(), rule.init(x0)
    x_prev, x = x0.copy(), x0.copy()
    for _ in range(30):
        y = x + gamma * (x - x_prev)
        x_prev, x = x, x + beta * (x - x_prev) - a * (Q @ y - b)
        params, state = rule.update(Q @ params - b, state, params)
        np.testing.assert_allclose(state.x, x, rtol=1e-12, atol=1e-12)
    assert isinstance(state, RobustMomentumState)
    # Worst-case rate over the spectrum [mu, L] is at most rho (Cyrus et al. 2018).
    lam = np.linspace(mu, L, 2001)
    s = 1 + beta - a * lam * (1 + gamma)
    p = beta - a * lam * gamma
    roots = np.abs(np.stack([np.roots([1, si, pi]) for si, pi in zip(-s, p, strict=True)]))
    assert roots.max() <= rho + 1e-9


def test_callable_and_array_gradient_agree_and_chains_vectorize():
    Q, b, _ = _quadratic()
    rng = np.random.default_rng(3)
    X0 = rng.standard_normal((4, 5))
    a, beta = momentum_parameters("hb", 1 / 50, 1.0)
    for rule in (heavy_ball(a, beta), nesterov(*momentum_parameters("ag", 1 / 50, 1.0))):
        stacked, _ = _run(rule, lambda X: X @ Q - b, X0, 25)
        for i in range(4):
            single, _ = _run(rule, lambda x: Q @ x - b, X0[i], 25)
            np.testing.assert_allclose(stacked[:, i], single, rtol=1e-12, atol=1e-12)


def test_float32_is_kept():
    Q, b, x0 = _quadratic()
    x0 = x0.astype(np.float32)
    for rule in (heavy_ball(0.1, 0.5), nesterov(0.1, 0.5), robust_momentum(0.02, 1.0, 0.9)):
        params, state = rule.update((Q @ x0 - b).astype(np.float32), rule.init(x0), x0)
        assert params.dtype == np.float32


def test_momentum_rule_from_curvature():
    assert isinstance(momentum_rule("hb", 0.1, 1.0).init(np.zeros(2)), HeavyBallState)
    assert isinstance(momentum_rule("ag", 0.1, 1.0).init(np.zeros(2)), NesterovState)
    assert isinstance(momentum_rule("ag", 0.1, 1.0, prox=Box(0, 1)).init(np.zeros(2)), APGState)
    with pytest.raises(ValueError, match="prox"):
        momentum_rule("hb", 0.1, 1.0, prox=Box(0, 1))


def test_torch_sgd_nesterov_is_ag_and_plain_is_heavy_ball():
    torch = pytest.importorskip("torch")
    Q, b, x0 = _quadratic(d=4, seed=5)
    lr, mom = 0.7, 0.6
    Qt = torch.tensor(Q, dtype=torch.float64)
    bt = torch.tensor(b, dtype=torch.float64)
    for nest, rule in ((True, nesterov(lr, mom)), (False, heavy_ball(lr, mom))):
        p = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.SGD([p], lr=lr, momentum=mom, dampening=0.0, nesterov=nest)
        params, state = x0.copy(), rule.init(x0)
        for _ in range(30):
            opt.zero_grad()
            loss = 0.5 * p @ Qt @ p - bt @ p
            loss.backward()
            opt.step()
            params, state = rule.update(Q @ params - b, state, params)
            np.testing.assert_allclose(p.detach().numpy(), params, rtol=1e-10, atol=1e-12)


def test_shape_mismatch_is_refused():
    rule = heavy_ball(0.1, 0.5)
    with pytest.raises(ValueError, match="grad must have the shape"):
        rule.update(np.zeros(3), rule.init(np.zeros(2)), np.zeros(2))


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: heavy_ball(0.0, 0.5), "alpha"),
        (lambda: heavy_ball(-1.0, 0.5), "alpha"),
        (lambda: heavy_ball(float("nan"), 0.5), "alpha"),
        (lambda: heavy_ball(0.1, 1.0), "beta"),
        (lambda: heavy_ball(0.1, -0.1), "beta"),
        (lambda: nesterov(0.1, 1.5), "beta"),
        (lambda: nesterov("x", 0.5), "alpha"),
        (lambda: accelerated_projected_gradient(0.1, 0.5, "box"), "prox"),
        (lambda: robust_momentum(0.1, 1.0, 0.1), "rho"),
        (lambda: robust_momentum(0.0, 1.0, 0.9), "mu"),
        (lambda: robust_momentum(1.0, 1.0, 0.5), "L"),
        (lambda: momentum_rule("sgd", 0.1, 1.0), "method"),
    ],
)
def test_bad_parameters_are_refused(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_bad_schedule_value_is_refused_at_its_step():
    rule = nesterov(0.1, lambda k: 0.5 if k < 3 else 1.2)
    params, state = np.ones(2), rule.init(np.ones(2))
    for _ in range(3):
        params, state = rule.update(params, state, params)
    with pytest.raises(ValueError, match=r"beta\(3\) must be in \[0, 1\)"):
        rule.update(params, state, params)


def test_restarted_nesterov_matches_numpy_loop_and_beats_plain_ag_with_a_mistuned_beta():
    """O'Donoghue & Candès's gradient restart: y_{k+1} = x_{k+1} when (y_k - x_{k+1}).(x_{k+1}
    - x_k) > 0. With beta tuned for kappa = 10^4 on a problem of kappa 50, plain AG ripples;
    restarted, it converges much sooner. A restart that tested the sign the other way, or
    dropped the momentum always (gradient descent), fails the count below."""
    Q, b, x0 = _quadratic(kappa=50.0)
    a, beta = momentum_parameters("ag", 1e-4, 1.0)  # beta ~ 0.98: for kappa 10^4
    star = np.linalg.solve(Q, b)
    rule = nesterov(a, beta, restart=True)
    params, state = x0.copy(), rule.init(x0)
    x, y, restarts = x0.copy(), x0.copy(), 0
    for _ in range(300):
        x_new = y - a * (Q @ y - b)
        fired = (y - x_new) @ (x_new - x) > 0
        restarts += bool(fired)
        y = x_new if fired else x_new + beta * (x_new - x)
        x = x_new
        params, state = rule.update(Q @ params - b, state, params)
        np.testing.assert_allclose(params, y, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(state.x, x, rtol=1e-12, atol=1e-12)
    assert 0 < restarts < 300

    def steps_to(rule, tol=1e-8):
        p, s = x0.copy(), rule.init(x0)
        for k in range(5000):
            p, s = rule.update(Q @ p - b, s, p)
            if np.linalg.norm(s.x - star) < tol:
                return k
        return 5000

    plain, restarted = steps_to(nesterov(a, beta)), steps_to(nesterov(a, beta, restart=True))
    gd = steps_to(nesterov(a, 0.0))
    assert restarted < plain / 3 and restarted < gd / 3, (restarted, plain, gd)


def test_restart_is_decided_per_chain_and_apg_restarts_on_the_gradient_mapping():
    """A stack of chains restarts each chain on its own test; APG with a prox that changes
    nothing is restarted AG."""
    Q, b, x0 = _quadratic(kappa=50.0)
    a, beta = momentum_parameters("ag", 1e-4, 1.0)
    X0 = np.stack([x0, -2.0 * x0, x0[::-1]])
    stacked = _run(nesterov(a, beta, restart=True), lambda X: X @ Q - b, X0, 120)[0]
    for c in range(3):
        alone = _run(nesterov(a, beta, restart=True), lambda x: Q @ x - b, X0[c], 120)[0]
        np.testing.assert_allclose(stacked[:, c], alone, rtol=1e-12, atol=1e-12)
    apg = accelerated_projected_gradient(a, beta, lambda v, step: v, restart=True)
    ag = nesterov(a, beta, restart=True)
    np.testing.assert_allclose(
        _run(apg, lambda x: Q @ x - b, x0, 120)[0], _run(ag, lambda x: Q @ x - b, x0, 120)[0]
    )

"""Damping / learning-rate schedules, switch rules, layer assignment and the local communicator."""

from __future__ import annotations

import math

import pytest
import torch

from async_spark.hylo import (
    EpochWindowRule,
    GeometricDamping,
    GradNormChangeRule,
    LocalCommunicator,
    contiguous_assignment,
    greedy_assignment,
    inverse_cost,
    makespan,
    warmup_multistep,
)


def test_geometric_damping_matches_recursion():
    s = GeometricDamping(start=1.5, target=0.1, warmup_steps=4, decay_updates=10, update_every=2)
    alpha = 2 * math.log10(15) / 10
    assert s.alpha == pytest.approx(alpha)
    lam, expected = 1.5, {}
    for t in range(30):
        if t >= 4 and (t - 4) % 2 == 0:
            lam = (1 - alpha) * lam + alpha * 0.1
        expected[t] = lam if t >= 4 else 1.5
    for t in range(30):
        assert s(t) == pytest.approx(expected[t], rel=1e-12)
    assert GeometricDamping(0.03, 0.03)(1000) == pytest.approx(0.03)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"start": 0.0, "target": 0.1}, "start must be a finite number > 0"),
        ({"start": 1.0, "target": -1.0}, "target must be a finite number > 0"),
        (
            {"start": 1.0, "target": 0.1, "decay_updates": 0},
            "decay_updates must be an integer >= 1",
        ),
        ({"start": 1.0, "target": 0.1, "warmup_steps": -1}, "warmup_steps must be an integer >= 0"),
    ],
)
def test_geometric_damping_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GeometricDamping(**kwargs)


def test_warmup_multistep():
    f = warmup_multistep(4, milestones=[10, 20], gamma=0.5)
    assert [f(t) for t in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    assert f(10) == 0.5 and f(25) == 0.25
    with pytest.raises(ValueError, match="gamma"):
        warmup_multistep(1, gamma=0.0)


def test_epoch_window_rule():
    r = EpochWindowRule([(0, 2), (5, 6)])
    assert [r.choose("l", e, 1.0) for e in range(7)] == [
        "kid",
        "kid",
        "kis",
        "kis",
        "kis",
        "kid",
        "kis",
    ]
    with pytest.raises(ValueError, match="windows"):
        EpochWindowRule([(3, 1)])


def test_grad_norm_change_rule():
    r = GradNormChangeRule(threshold=0.2)
    assert r.choose("a", 0, 1.0) == "kid"  # no history
    assert r.choose("a", 0, 1.1) == "kis"  # +10 %
    assert r.choose("a", 0, 2.0) == "kid"  # +82 %
    assert r.choose("b", 0, 1.0) == "kid"  # per layer
    s = GradNormChangeRule(threshold=0.2)
    s.load_state_dict(r.state_dict())
    assert s.choose("a", 0, 2.1) == "kis"
    with pytest.raises(ValueError, match="threshold"):
        GradNormChangeRule(threshold=0)


def test_greedy_assignment_balances_better_than_contiguous():
    costs = [inverse_cost(64, d, d) for d in (10, 10, 10, 10, 400, 400, 10, 10)]
    g = greedy_assignment(costs, 2)
    c = contiguous_assignment(len(costs), 2)
    assert makespan(costs, g, 2) < makespan(costs, c, 2)
    assert makespan(costs, g, 2) <= 4 / 3 * (sum(costs) / 2) + max(costs)
    assert greedy_assignment(costs, 2) == g  # deterministic
    assert set(greedy_assignment([1.0] * 3, 8)) == {0, 1, 2}  # no rank gets two while one idles
    assert contiguous_assignment(54, 64)[-1] == 53  # the original leaves ranks idle


def test_assignment_bad_arguments():
    with pytest.raises(ValueError, match="world_size must be an integer >= 1"):
        greedy_assignment([1.0], 0)
    with pytest.raises(ValueError, match="costs must be finite"):
        greedy_assignment([float("nan")], 1)


def test_local_communicator():
    c = LocalCommunicator()
    t = torch.arange(3.0)
    assert c.rank == 0 and c.world_size == 1
    assert c.all_gather_flat(t)[0] is t
    assert c.broadcast(t, 0) is t
    with pytest.raises(ValueError, match="src"):
        c.broadcast(t, 1)

"""Straggler models: seeded, reproducible, and distributed as ASYNC describes (no Spark)."""

from __future__ import annotations

import numpy as np
import pytest

from async_spark.engine import StragglerModel, parse_stragglers


def test_cloud_model_picks_a_quarter_of_blocks_and_its_delay_law():
    m = StragglerModel("cloud", seed=1)
    slow = m.straggling_blocks(32)
    assert len(slow) == 8
    b = min(slow)
    factors = np.array([m.delay(b, k, 32, 1.0).sleep_seconds for k in range(4000)])
    assert factors.min() >= 1.5 and factors.max() <= 10.0
    heavy = factors > 2.5
    assert abs(heavy.mean() - 0.2) < 0.03  # probability 0.2 of U(2.5, 10)
    assert abs(factors[~heavy].mean() - 2.0) < 0.05
    fast = next(i for i in range(32) if i not in slow)
    assert m.delay(fast, 0, 32, 1.0).sleep_seconds == 0.0
    # reproducible from (seed, block, task)
    assert m.delay(b, 17, 32, 1.0) == StragglerModel("cloud", seed=1).delay(b, 17, 32, 1.0)


def test_intensity_model_delays_block_zero_only():
    m = parse_stragglers("intensity:0.6")
    assert m.delay(0, 3, 8, 0.5).sleep_seconds == pytest.approx(0.3)
    assert m.delay(1, 3, 8, 0.5).sleep_seconds == 0.0
    assert m.delay(0, 3, 8, None).sleep_seconds == 0.0  # still warming up


def test_slow_executor_model_scales_compute_on_one_executor():
    d = parse_stragglers("slow-executor:3").delay(0, 0, 4, None, slow_executor="h:1")
    assert d.extra_seconds("h:1", 0.5) == pytest.approx(1.0)
    assert d.extra_seconds("h:2", 0.5) == 0.0


@pytest.mark.parametrize(
    "text", ["intensity:-1", "slow-executor:0.5", "cloudy", "intensity:abc", "random"]
)
def test_bad_straggler_models_are_refused(text):
    with pytest.raises(ValueError, match="straggler|intensity|factor"):
        parse_stragglers(text)

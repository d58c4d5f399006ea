"""The asynchronous default step: one task's mini-batch step, reduced for the updates in flight."""

from __future__ import annotations

import pytest

from async_spark.models import LinearModel, sample_smoothness
from async_spark.optim.steps import asynchronous_step, auto_step, minibatch_smoothness

MODEL = LinearModel("logistic", 30, l2=1e-3)
ROW_NORM, N, GRAM = 420.0, 569, 13.0  # breast cancer, standardized


def _step(delay, batch=14.0):
    return asynchronous_step(
        "saga", MODEL, ROW_NORM, n=N, batch=batch, gram_max=GRAM, max_delay=delay
    )


def test_the_formula_term_by_term():
    L_max = sample_smoothness(MODEL, ROW_NORM) + MODEL.l2
    L = 0.25 * GRAM + MODEL.l2
    one_row = 1 / (3 * L_max)
    batch = 1 / (3 * minibatch_smoothness(L_max, L, N, 14.0))
    for delay in (1, 3, 7, 100):
        assert _step(delay) == pytest.approx(max(one_row, min(batch, 1 / (4 * L * delay))))
    assert _step(0) == pytest.approx(batch)  # nothing in flight: a fresh mini-batch step


def test_it_shrinks_with_the_updates_in_flight_down_to_the_one_row_step():
    steps = [_step(d) for d in (0, 1, 3, 15, 10_000)]
    assert steps == sorted(steps, reverse=True)
    assert steps[-1] == pytest.approx(auto_step("saga", MODEL, ROW_NORM))
    # On this data the default is far above the one-row step (the old default): 8x at P = 4.
    assert _step(3) > 5 * auto_step("saga", MODEL, ROW_NORM)


def test_sgd_takes_the_larger_sgd_constants():
    sgd = asynchronous_step("sgd", MODEL, ROW_NORM, n=N, batch=14.0, gram_max=GRAM, max_delay=3)
    assert sgd >= _step(3)

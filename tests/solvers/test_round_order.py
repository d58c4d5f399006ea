"""A synchronous round's combined message does not depend on the order its results arrived in
(the loop combines them in block order), so a seeded run resumed from a checkpoint, or run on
another transport, ends bit-identical whatever the arrival order."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from async_spark.engine.engine import TaskResult
from async_spark.solvers.loop import Messages
from async_spark.solvers.methods import METHODS, _SAGAMemo

BLOCKS = 4
ORDERS = list(itertools.permutations(range(BLOCKS)))


def _result(block: int, payload) -> TaskResult:
    return TaskResult(block, 0, 0, payload, 100 + block, 1, "driver", 0.0, 0.0, 0.0)


def _vectors(seed: int, dim: int = 64) -> list[np.ndarray]:
    # magnitudes spread over 16 decades: a floating-point sum of these depends on its order
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(dim) * 10.0 ** rng.integers(-8, 8, dim) for _ in range(BLOCKS)]


def _round(name: str):
    """(payloads, memos) of one round of ``name``'s tasks, one per block."""
    grads = _vectors(3)
    if METHODS[name].family.computation == "saga":
        rng = np.random.default_rng(4)
        memos = []
        payloads = []
        for b in range(BLOCKS):
            rows = np.sort(rng.choice(50, 5, replace=False))
            memos.append(_SAGAMemo(rows))
            payloads.append((grads[b], rng.standard_normal(5)))
        return payloads, memos
    return grads, [None] * BLOCKS


def _flat(message) -> list[np.ndarray]:
    """Every array and number of a (nested) message, in order."""
    out: list[np.ndarray] = []
    for part in message:
        if isinstance(part, tuple):
            out.extend(np.asarray(p) for p in part)
        elif part is not None:
            out.append(np.asarray(part))
    return out


def _combined(name: str, order) -> list[np.ndarray]:
    payloads, memos = _round(name)
    messages = Messages(METHODS[name].family, synchronous=True)
    for block in order:
        messages.dispatched(block, 100 + block, memos[block])
    out = None
    for block in order:
        assert out is None  # nothing is applied before the round is complete
        out = messages.accept(_result(block, payloads[block]), live_blocks=BLOCKS)
    assert out is not None
    return _flat(out)


@pytest.mark.parametrize("name", ["sgd", "saga", "hb"])
def test_a_round_is_combined_in_block_order_whatever_the_arrival_order(name):
    first = _combined(name, range(BLOCKS))
    for order in ORDERS:
        got = _combined(name, order)
        assert len(got) == len(first)
        for a, b in zip(first, got, strict=True):
            np.testing.assert_array_equal(a, b)


def test_the_order_matters_to_a_floating_point_sum():
    """Why the test above can fail: summed in arrival order, the round's gradients give other
    sums for other orders."""
    grads = _vectors(3)
    sums = {np.sum([grads[b] for b in order], axis=0).tobytes() for order in ORDERS}
    assert len(sums) > 1

"""Policies: parsing, validation tables, dispatch and acceptance decisions (no Spark)."""

from __future__ import annotations

import pytest

from async_spark.engine import PartialBarrier, Policy, PolicyError, parse_policy


@pytest.mark.parametrize(
    ("make", "names"),
    [
        (lambda: PartialBarrier(0.0), "beta"),
        (lambda: PartialBarrier(1.5), "beta"),
        (lambda: PartialBarrier(-0.2), "beta"),
        (lambda: Policy.asynchronous(tau=-1), "tau"),
        (lambda: Policy.stale_synchronous(-1), "ssp"),
        (lambda: Policy.sync().validate(0), "num_blocks"),
        (lambda: Policy.sync().validate(-3), "num_blocks"),
        (lambda: Policy.sync().validate(4, max_in_flight=2), "never dispatch"),
        (lambda: Policy.asynchronous().validate(4, max_in_flight=0), "max_in_flight"),
        (lambda: Policy.asynchronous().validate(4, max_in_flight=5), "max_in_flight"),
        (lambda: parse_policy("barrier:2"), "beta"),
        (lambda: parse_policy("tau:-3"), "tau"),
        (lambda: parse_policy("tau:x"), "tau:x"),
        (lambda: parse_policy("fast"), "unknown policy"),
        (lambda: parse_policy(""), "non-empty"),
    ],
)
def test_bad_configuration_is_refused_naming_the_parameter(make, names):
    with pytest.raises(PolicyError, match=names):
        make()


def test_parse_round_trip():
    p = parse_policy("barrier:0.7+tau:8")
    assert p.barrier == PartialBarrier(0.7) and p.tau == 8 and p.ssp is None
    assert str(p) == "barrier:0.7+tau:8"
    assert parse_policy("sync").synchronous
    assert not parse_policy("async").synchronous
    assert str(parse_policy("async")) == "async"
    assert parse_policy("ssp:2").ssp.s == 2


def _select(policy, ready, live=8, running=0, clocks=None, max_in_flight=8):
    clocks = clocks if clocks is not None else [0] * live
    return policy.select(ready, live, running, clocks, min(clocks), max_in_flight)


def test_partial_barrier_waits_for_ceil_beta_p():
    p = Policy.partial_barrier(0.7)  # ceil(0.7*8) = 6
    assert _select(p, [0, 1, 2, 3, 4]) == []
    assert _select(p, [0, 1, 2, 3, 4, 5]) == [0, 1, 2, 3, 4, 5]
    sync = Policy.sync()
    assert _select(sync, list(range(7))) == []
    assert _select(sync, list(range(8))) == list(range(8))


def test_async_dispatches_any_idle_block_within_slots():
    p = Policy.asynchronous()
    assert _select(p, [3]) == [3]
    assert _select(p, [1, 2, 3], running=6) == [1, 2]


def test_ssp_holds_back_blocks_ahead_of_the_slowest():
    p = Policy.stale_synchronous(1)
    clocks = [0, 1, 2, 1]
    assert _select(p, [1, 2, 3], live=4, clocks=clocks, max_in_flight=4) == [1, 3]


def test_staleness_bound_accepts_and_obsoletes():
    p = Policy.asynchronous(tau=2)
    assert p.accepts(0) and p.accepts(2) and not p.accepts(3)
    assert not p.obsolete(2) and p.obsolete(3)
    assert Policy.asynchronous().accepts(10**6)

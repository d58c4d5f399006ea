"""HistoryStore: lazy handles, refcounts, pins, bounded live count (no Spark)."""

from __future__ import annotations

import pytest

from async_spark.engine import HistoryStore


class CountingPublisher:
    def __init__(self):
        self.live = set()
        self.n = 0

    def create(self, model):
        self.n += 1
        self.live.add(self.n)
        return (self.n, model)

    def destroy(self, handle):
        self.live.remove(handle[0])


def test_handles_are_lazy_refcounted_and_collected():
    pub = CountingPublisher()
    h = HistoryStore(pub)
    h.publish(0, "m0")
    assert pub.n == 0  # nothing shipped until a task needs it
    a = h.acquire(0)
    b = h.acquire(0)
    assert a is b and pub.n == 1
    h.publish(1, "m1")
    assert h.held_versions == [0, 1]  # version 0 still read by two tasks
    h.release(0)
    h.release(0)
    assert h.held_versions == [1] and pub.live == set()


def test_pinned_version_survives_until_unpinned():
    pub = CountingPublisher()
    h = HistoryStore(pub)
    h.publish(0, "m0")
    h.pin(0)
    h.acquire(0)
    h.release(0)
    h.publish(1, "m1")
    assert h.model(0) == "m0" and h.live_handles == 1
    h.unpin(0)
    assert h.live_handles == 0
    with pytest.raises(KeyError):
        h.model(0)


def test_live_handles_stay_bounded_over_a_long_run():
    pub = CountingPublisher()
    h = HistoryStore(pub)
    h.publish(0, 0)
    in_flight = []
    for v in range(1, 2000):
        in_flight.append(h.acquire(h.current))
        if len(in_flight) > 4:
            h.release(in_flight.pop(0)[1])
        h.publish(v, v)
        assert len(pub.live) <= 6
    for handle in in_flight:
        h.release(handle[1])
    h.close()
    assert pub.live == set()


def test_misuse_is_refused():
    h = HistoryStore(CountingPublisher())
    h.publish(3, "x")
    with pytest.raises(ValueError, match="not newer"):
        h.publish(3, "y")
    with pytest.raises(ValueError, match="without acquire"):
        h.release(3)
    with pytest.raises(ValueError, match="not pinned"):
        h.unpin(3)

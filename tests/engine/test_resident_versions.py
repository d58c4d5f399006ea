"""The driver's ledger of the model versions resident workers hold (no Spark: pure bookkeeping).

Each test replays what the transport does per ticket — ``base`` under its lock, ``part``, then
``hold`` — against a worker-side store rebuilt with the worker's own ``apply_delta``, so a ledger
that picked a wrong base, kept a copy that the caller's in-place change reached, or freed a copy a
worker still uses would hand the worker a model that differs from the driver's.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from async_spark.engine.resident_versions import DELTA_MIN_SIZE, VersionLedger
from async_spark.engine.resident_worker import apply_delta


class _Worker:
    """What a worker's store does with a ticket's model part (the newest ``keep`` versions)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.models: OrderedDict[int, np.ndarray] = OrderedDict()
        self.held: OrderedDict[int, None] = OrderedDict()  # the driver's mirror of it

    def receive(self, version: int, mode: str, base: int | None, part) -> np.ndarray:
        if mode == "held":
            self.models.move_to_end(version)
        else:
            model = part if mode == "full" else apply_delta(self.models[base], *part)
            self.models[version] = np.array(model, copy=True)
            while len(self.models) > self.keep:
                self.models.popitem(last=False)
        return self.models[version]


def _ticket(ledger: VersionLedger, worker: _Worker, version: int, model) -> str:
    held, base_version, base = ledger.base(worker.held, version)
    mode, sent_base, part = ("held", None, None) if held else ledger.part(model, base_version, base)
    got = worker.receive(version, mode, sent_base, part)
    ledger.hold(worker.held, version, model, mode)
    np.testing.assert_array_equal(got, model)  # bit for bit what the driver published
    assert list(worker.held) == list(worker.models)  # the mirror follows the worker's store
    return mode


def test_full_then_held_then_a_delta_against_the_newest_held_version():
    ledger, worker = VersionLedger(max_versions=4), _Worker(4)
    v0 = np.linspace(0.0, 1.0, 4 * DELTA_MIN_SIZE)
    assert _ticket(ledger, worker, 0, v0) == "full"
    assert _ticket(ledger, worker, 0, v0) == "held"
    v1 = v0.copy()
    v1[[3, 700, 4000]] += 1.0  # a few entries change: the delta is smaller
    assert _ticket(ledger, worker, 1, v1) == "delta"
    assert ledger.counts == {"full": 1, "delta": 1, "held": 1}
    dense = v1 + 1.0  # every entry changes: in full
    assert _ticket(ledger, worker, 2, dense) == "full"


def test_small_models_and_other_dtypes_travel_in_full():
    ledger, worker = VersionLedger(max_versions=4), _Worker(4)
    small = np.zeros(DELTA_MIN_SIZE - 1)
    assert _ticket(ledger, worker, 0, small) == "full"
    small2 = small.copy()
    small2[0] = 1.0
    assert _ticket(ledger, worker, 1, small2) == "full"
    assert ledger.copies_kept == 0  # small versions are not copied
    big = np.zeros(2 * DELTA_MIN_SIZE)
    assert _ticket(ledger, worker, 2, big) == "full"
    assert _ticket(ledger, worker, 3, big.astype(np.float32)) == "full"  # base's dtype differs
    assert _ticket(ledger, worker, 4, big.reshape(2, -1)) == "full"  # and its shape


def test_the_base_is_the_published_array_even_if_the_caller_changes_it_in_place():
    ledger, worker = VersionLedger(max_versions=4), _Worker(4)
    model = np.arange(2 * DELTA_MIN_SIZE, dtype=np.float64)
    assert _ticket(ledger, worker, 0, model) == "full"
    model[5] = -1.0  # the caller reuses its array for version 1
    assert _ticket(ledger, worker, 1, model) == "delta"  # against the copy of version 0
    model[9] = -2.0
    assert _ticket(ledger, worker, 2, model) == "delta"


def test_evicted_and_released_versions_free_their_copies_only_when_no_worker_holds_them():
    ledger = VersionLedger(max_versions=2)
    a, b = _Worker(2), _Worker(2)
    models = [np.full(2 * DELTA_MIN_SIZE, float(v)) for v in range(4)]
    for v in range(2):
        _ticket(ledger, a, v, models[v])
    _ticket(ledger, b, 0, models[0])
    assert ledger.copies_kept == 2
    _ticket(ledger, a, 2, models[2])  # a drops version 0; b still holds it
    assert list(a.held) == [1, 2] and ledger.copies_kept == 3
    ledger.release(b.held)  # b is gone: version 0 is held by nobody
    assert not b.held and ledger.copies_kept == 2
    ledger.release(a.held)
    assert ledger.copies_kept == 0


def test_a_ticket_to_a_closed_connection_is_counted_and_changes_no_mirror():
    ledger, worker = VersionLedger(max_versions=4), _Worker(4)
    model = np.zeros(2 * DELTA_MIN_SIZE)
    ledger.hold(worker.held, 0, model, "full", live=False)
    assert ledger.counts["full"] == 1 and not worker.held and ledger.copies_kept == 0


@pytest.mark.parametrize("seed", range(3))
def test_a_random_stream_of_versions_to_three_workers_arrives_bit_exact(seed):
    rng = np.random.default_rng(seed)
    ledger = VersionLedger(max_versions=3)
    workers = [_Worker(3) for _ in range(3)]
    published: list[np.ndarray] = [rng.standard_normal(3 * DELTA_MIN_SIZE)]
    for _ in range(60):
        if rng.random() < 0.5:  # a new version: a few entries, or all of them, change
            nxt = published[-1].copy()
            idx = rng.integers(0, nxt.size, 1 if rng.random() < 0.7 else nxt.size)
            nxt[idx] = rng.standard_normal(idx.size)
            published.append(nxt)
        w = workers[int(rng.integers(0, 3))]
        # tickets carry the newest version or one a worker holds (a stale read)
        version = len(published) - 1 if rng.random() < 0.8 or not w.held else next(iter(w.held))
        _ticket(ledger, w, version, published[version])
    assert set(ledger.counts) == {"full", "delta", "held"} and ledger.counts["delta"] > 0
    for w in workers:
        ledger.release(w.held)
    assert ledger.copies_kept == 0

"""SchedulerCore: staleness, accounting, retries, SSP and barrier guarantees (no Spark)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from async_spark.engine import BlockStatus, Policy, SchedulerCore, TaskStatus


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_staleness_counts_versions_published_since_dispatch():
    core = SchedulerCore(4, Policy.sync())
    tickets = core.next_dispatches()
    assert [t.block for t in tickets] == [0, 1, 2, 3]
    assert {t.version for t in tickets} == {0}
    # Apply each result as it arrives: the i-th result has staleness i.
    for i, t in enumerate(reversed(tickets)):
        d = core.complete(t.task_id, TaskStatus.OK)
        assert d.accepted and d.staleness == i
        core.advance()
    assert core.staleness_histogram == {0: 1, 1: 1, 2: 1, 3: 1}
    assert core.accounting_closes()


def test_sync_round_never_mixes_versions():
    core = SchedulerCore(3, Policy.sync())
    rng = np.random.default_rng(0)
    for _ in range(20):
        round_ = core.next_dispatches()
        assert len(round_) == 3 and len({t.version for t in round_}) == 1
        assert core.next_dispatches() == []  # nothing until the whole round is back
        for i in rng.permutation(3):
            core.complete(round_[i].task_id, TaskStatus.OK)
            if core.in_flight:
                assert core.next_dispatches() == []
        core.advance()
    assert core.counts["accepted"] == 60


def test_staleness_bound_rejects_and_marks_obsolete_tasks():
    core = SchedulerCore(2, Policy.asynchronous(tau=1))
    a, b = core.next_dispatches()
    core.complete(a.task_id, TaskStatus.OK)
    assert core.advance() == []  # b has staleness 1 so far: still acceptable
    a2 = core.next_dispatches()[0]
    obsolete = core.advance()  # b now at staleness 2 > tau
    assert obsolete == [b]
    assert core.advance() == [a2]  # b is not reported twice; a2 (version 1) is now 2 behind
    d = core.complete(b.task_id, TaskStatus.OK)  # won the race against cancellation
    assert not d.accepted and d.staleness == 3
    d2 = core.complete(a2.task_id, TaskStatus.CANCELLED)
    assert not d2.accepted
    assert core.counts["rejected"] == 1 and core.counts["cancelled"] == 1
    assert core.accounting_closes()


def test_failed_block_backs_off_then_is_given_up():
    clock = FakeClock()
    core = SchedulerCore(2, Policy.asynchronous(), max_retries=2, backoff=1.0, clock=clock)
    t0, t1 = core.next_dispatches()
    core.complete(t0.task_id, TaskStatus.FAILED)
    assert core.status(0) is BlockStatus.FAILED
    assert core.next_dispatches() == []  # backoff 1 s not elapsed
    clock.t = 1.0
    (r1,) = core.next_dispatches()
    assert r1.block == 0 and r1.retry
    core.complete(r1.task_id, TaskStatus.FAILED)
    assert core.next_retry_due() == pytest.approx(3.0)  # doubled: 2 s
    clock.t = 3.0
    (r2,) = core.next_dispatches()
    core.complete(r2.task_id, TaskStatus.FAILED)  # third failure in a row > max_retries=2
    assert core.status(0) is BlockStatus.DEAD
    assert core.live_blocks == 1
    core.complete(t1.task_id, TaskStatus.OK)
    assert [t.block for t in core.next_dispatches()] == [1]
    assert core.counts["failed"] == 3 and core.accounting_closes()


def test_success_resets_the_failure_streak():
    clock = FakeClock()
    core = SchedulerCore(1, Policy.asynchronous(), max_retries=1, backoff=0.0, clock=clock)
    for _ in range(5):
        (t,) = core.next_dispatches()
        core.complete(t.task_id, TaskStatus.FAILED)
        (t,) = core.next_dispatches()
        core.complete(t.task_id, TaskStatus.OK)
    assert core.status(0) is BlockStatus.IDLE and core.live_blocks == 1


def test_sync_round_retries_the_failed_block_alone():
    clock = FakeClock()
    core = SchedulerCore(3, Policy.sync(), backoff=0.0, clock=clock)
    t = core.next_dispatches()
    core.complete(t[0].task_id, TaskStatus.OK)
    core.complete(t[1].task_id, TaskStatus.FAILED)
    core.complete(t[2].task_id, TaskStatus.OK)
    (retry,) = core.next_dispatches()
    assert retry.block == 1 and retry.version == 0


def test_ssp_bound_holds_in_a_random_run():
    rng = np.random.default_rng(3)
    s = 2
    core = SchedulerCore(5, Policy.stale_synchronous(s))
    running = []
    for _ in range(400):
        for t in core.next_dispatches():
            clocks = [b["finished"] for b in core.snapshot()["blocks"]]
            assert clocks[t.block] - min(clocks) <= s
            running.append(t)
        # block 0 is slow: it finishes rarely
        weights = np.array([0.1 if t.block == 0 else 1.0 for t in running])
        k = rng.choice(len(running), p=weights / weights.sum())
        core.complete(running.pop(k).task_id, TaskStatus.OK)
        core.advance()
    clocks = [b["finished"] for b in core.snapshot()["blocks"]]
    assert max(clocks) - min(clocks) <= s + 1


def test_snapshot_reports_per_block_statistics():
    core = SchedulerCore(2, Policy.asynchronous())
    for _ in range(10):
        for t in core.next_dispatches():
            core.complete(t.task_id, TaskStatus.OK, duration=0.1 * (t.block + 1), executor="e")
    snap = core.snapshot()
    assert snap["blocks"][1]["mean_task_seconds"] == pytest.approx(0.2)
    assert snap["blocks"][0]["executor"] == "e"
    assert snap["counts"]["accepted"] == 20 and snap["counts"]["in_flight"] == 0


def test_complete_unknown_task_raises():
    core = SchedulerCore(1, Policy.asynchronous())
    with pytest.raises(KeyError):
        core.complete(99, TaskStatus.OK)


def test_invalid_results_are_rejected_and_a_repeat_offender_quarantined():
    core = SchedulerCore(2, Policy.asynchronous(), max_invalid=2)
    for expected in (BlockStatus.IDLE, BlockStatus.QUARANTINED):
        t = next(t for t in core.next_dispatches() if t.block == 0)
        d = core.complete(t.task_id, TaskStatus.OK, valid=False)
        assert not d.accepted and core.status(0) is expected
    assert core.live_blocks == 1 and core.counts["rejected"] == 2
    assert core.snapshot()["counts"]["invalid"] == 2
    assert all(t.block == 1 for t in core.next_dispatches())


def test_fewer_slots_than_blocks_serve_every_block_in_turn():
    core = SchedulerCore(5, Policy.asynchronous(), max_in_flight=2)
    served = []
    for _ in range(20):
        for t in core.next_dispatches():
            served.append(t.block)
            core.complete(t.task_id, TaskStatus.OK)
    assert sorted(set(served)) == [0, 1, 2, 3, 4]
    assert max(served.count(b) for b in range(5)) - min(served.count(b) for b in range(5)) <= 1


@pytest.mark.parametrize("policy", ["async", "sync", "tau:2", "ssp:1", "barrier:0.5"])
def test_incremental_block_sets_match_a_full_scan(policy):
    """The idle/failed sets and the live count, kept in step with every status change, equal
    what a scan of the blocks finds, through random outcomes (OK, invalid, cancelled, failed)."""
    from async_spark.engine import parse_policy

    now = [0.0]
    core = SchedulerCore(
        8, parse_policy(policy), max_retries=2, backoff=0.1, max_invalid=2, clock=lambda: now[0]
    )
    rng = np.random.default_rng(1)
    running: list = []
    for _ in range(400):
        running += core.next_dispatches()
        if running and rng.random() < 0.8:
            t = running.pop(int(rng.integers(len(running))))
            kind = rng.choice(["ok", "ok", "ok", "invalid", "cancelled", "failed"])
            status = {"cancelled": TaskStatus.CANCELLED, "failed": TaskStatus.FAILED}.get(
                str(kind), TaskStatus.OK
            )
            if core.complete(t.task_id, status, valid=kind != "invalid").accepted:
                core.advance()
        now[0] += float(rng.random()) * 0.2
        statuses = [core.status(i) for i in range(8)]
        assert core._idle == {i for i, s in enumerate(statuses) if s is BlockStatus.IDLE}
        assert core._failed == {i for i, s in enumerate(statuses) if s is BlockStatus.FAILED}
        given_up = {BlockStatus.DEAD, BlockStatus.QUARANTINED}
        assert core.live_blocks == sum(s not in given_up for s in statuses)
        assert core.given_up_blocks() == [i for i, s in enumerate(statuses) if s in given_up]
        assert core.in_flight == sum(s is BlockStatus.RUNNING for s in statuses)
        live_clocks = [core._blocks[i].clock for i, s in enumerate(statuses) if s not in given_up]
        assert core._live_clocks == Counter(live_clocks)
        by_clock: dict[int, set[int]] = {}
        for i in core._idle:
            by_clock.setdefault(core._blocks[i].clock, set()).add(i)
        assert core._idle_by_clock == by_clock
        if core.live_blocks == 0:
            break
    assert core.counts["dispatched"] > 50


def test_barrier_with_ssp_counts_held_back_idle_blocks():
    """Idle blocks ahead of the SSP bound still count toward a partial barrier (a review found
    that leaving them out stalled the run: every block idle and nothing dispatched)."""
    from async_spark.engine import parse_policy

    core = SchedulerCore(4, parse_policy("barrier:0.5+ssp:1"))
    t = {x.block: x for x in core.next_dispatches()}
    core.complete(t[3].task_id, TaskStatus.CANCELLED)
    for b in (0, 1, 2):
        core.complete(t[b].task_id, TaskStatus.OK)
    t = {x.block: x for x in core.next_dispatches()}
    assert sorted(t) == [0, 1, 2, 3]
    core.complete(t[3].task_id, TaskStatus.CANCELLED)
    core.complete(t[0].task_id, TaskStatus.OK)  # clocks 2, 1, 1, 0: block 0 is held back
    assert [x.block for x in core.next_dispatches()] == [3]


BAD_CORE_OPTIONS = [
    (dict(max_retries=-1), "max_retries"),
    (dict(max_retries=True), "max_retries"),
    (dict(backoff=-0.5), "backoff"),
    (dict(backoff=2.0, backoff_max=1.0), "backoff_max"),
    (dict(max_invalid=0), "max_invalid"),
    (dict(initial_version=-1), "initial_version"),
    (dict(initial_version=1.5), "initial_version"),
    (dict(block_tasks=[0, 1]), "block_tasks"),
    (dict(block_tasks=[0, -1, 0]), "block_tasks"),
]


@pytest.mark.parametrize(("options", "name"), BAD_CORE_OPTIONS)
def test_retry_backoff_and_resume_options_are_value_errors_not_policy_errors(options, name):
    """Retries, backoff and the state to resume from are no policy: a ValueError naming the
    option, never a PolicyError (which the front ends report as a --beta/--tau/--ssp problem)."""
    from async_spark.engine import PolicyError

    with pytest.raises(ValueError, match=name) as info:
        SchedulerCore(3, Policy.asynchronous(), **options)
    assert not isinstance(info.value, PolicyError)


def test_a_policy_that_cannot_dispatch_is_still_a_policy_error():
    from async_spark.engine import PartialBarrier, PolicyError

    with pytest.raises(PolicyError):
        SchedulerCore(3, Policy(barrier=PartialBarrier(1.0)), max_in_flight=1)

"""The engine on real Spark (the shared local[4,2] session): staleness, policies, failures,
cancellation, stragglers, accounting and resource release."""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
import pytest
from pyspark import cloudpickle

from async_spark.engine import AsyncEngine, Policy, StragglerModel, TaskStatus
from async_spark.engine.spark import SparkTransport

# Task functions below travel to the Python workers by value (the tests folder is not on their path).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.spark


def echo_task(block, model, args):
    """Returns what it read, so the test can check the version each task saw."""
    delay = (args or {}).get("sleep", {}).get(block, 0.0)
    if delay:
        time.sleep(delay)
    return {"block": block, "model_version": int(model[0]), "pid": os.getpid()}


def flaky_task(block, model, args):
    if block in args["always_fail"] or (block in args["fail_first"] and args["block_task"] < 2):
        raise RuntimeError(f"injected failure of block {block}")
    return block


def _engine(sc, task, policy, P=4, **kw):
    return AsyncEngine(
        SparkTransport(sc, pool="async"),
        task,
        num_blocks=P,
        policy=policy,
        initial_model=np.zeros(3),
        run_name="test",
        **kw,
    )


def test_sync_dispatch_gives_exact_staleness_and_one_version_per_round(sc):
    results = []
    with _engine(sc, echo_task, Policy.sync()) as eng:
        for r in eng.results():
            results.append(r)
            eng.publish(np.full(3, float(eng.version + 1)))  # the model holds its version
            if len(results) == 12:
                break
        assert eng.core.accounting_closes()
    for k in range(3):
        round_ = results[4 * k : 4 * k + 4]
        assert sorted(r.block for r in round_) == [0, 1, 2, 3]
        assert {r.version for r in round_} == {4 * k}  # a sync round never mixes versions
        # applying each result at once, the i-th of a round is exactly i versions stale
        assert [r.staleness for r in round_] == [0, 1, 2, 3]
        assert all(r.payload["model_version"] == r.version for r in round_)


def test_staleness_bound_cancels_a_straggler_and_never_accepts_older(sc):
    args = {"sleep": {3: 20.0}}  # block 3 would take 20 s
    eng = _engine(sc, echo_task, Policy.asynchronous(tau=2), task_args=lambda t: args)
    transport = eng.transport
    cancelled = []  # tickets the engine asked the transport to cancel
    cancel = transport.cancel

    def recording_cancel(ticket):
        cancelled.append(ticket)
        cancel(ticket)

    transport.cancel = recording_cancel
    tracker = sc.statusTracker()
    with eng:
        accepted = []
        for r in eng.results():
            accepted.append(r)
            eng.publish(np.full(3, float(eng.version + 1)))
            if len(accepted) == 30:
                break
        snap = eng.snapshot()
        # Spark's own account, while the run (and its run tag) is still alive: the straggler's
        # job, found by its per-task tag, ended (cancelled jobs end FAILED) and is not active.
        straggler = [t for t in cancelled if t.block == 3]
        assert straggler, cancelled
        tag = f"{transport.run_tag}-t{straggler[0].task_id}"
        deadline = time.monotonic() + 15.0
        while True:
            jobs = list(sc._jsc.sc().statusTracker().getJobIdsForTag(tag))
            infos = [tracker.getJobInfo(j) for j in jobs]
            done = jobs and all(i is not None and i.status == "FAILED" for i in infos)
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(jobs) == 1, (tag, jobs)  # the straggler's single-partition job
        assert infos[0].status == "FAILED", infos
        assert jobs[0] not in tracker.getActiveJobsIds()
    assert all(r.staleness <= 2 for r in accepted)
    assert 3 not in {r.block for r in accepted}
    assert snap["counts"]["cancelled"] >= 1  # the straggler's obsolete task was cancelled
    c = snap["counts"]
    assert c["dispatched"] == (
        c["accepted"] + c["rejected"] + c["cancelled"] + c["failed"] + c["in_flight"]
    )


def test_ssp_keeps_blocks_within_s_of_the_slowest(sc):
    args = {"sleep": {0: 0.4}}
    s = 1
    with _engine(sc, echo_task, Policy.stale_synchronous(s), task_args=lambda t: args) as eng:
        n = 0
        for _ in eng.results():
            finished = [b["finished"] for b in eng.snapshot()["blocks"]]
            assert max(finished) - min(finished) <= s + 1
            eng.publish(np.full(3, float(eng.version + 1)))
            n += 1
            if n == 16:
                break
    finished = [b["finished"] for b in eng.snapshot()["blocks"]]
    assert min(finished) >= 3  # the slow block made progress too


def test_failed_blocks_are_retried_then_given_up(sc, caplog):
    def task_args(ticket):
        return {"fail_first": {1}, "always_fail": {2}, "block_task": ticket.block_task}

    with _engine(
        sc, flaky_task, Policy.asynchronous(), task_args=task_args, max_retries=2, backoff=0.05
    ) as eng:
        seen = []
        for r in eng.results():
            seen.append(r.payload)
            eng.publish(np.full(3, float(eng.version + 1)))
            if seen.count(1) >= 2 and eng.live_blocks == 3:
                break
        snap = eng.snapshot()
    status = {b["block"]: b["status"] for b in snap["blocks"]}
    assert status[2] == "dead" and 2 not in seen
    assert seen.count(1) >= 2  # block 1 recovered after two failures
    assert snap["counts"]["failed"] == 2 + 3  # block 1 twice, block 2 max_retries + 1 times
    assert "injected failure of block" in eng.last_error  # the latest, whichever block
    assert "injected failure of block 2" in caplog.text
    c = snap["counts"]
    assert c["dispatched"] == (
        c["accepted"] + c["rejected"] + c["cancelled"] + c["failed"] + c["in_flight"]
    )


def test_intensity_straggler_sleeps_inside_the_task(sc):
    def busy(block, model, args):
        t = time.perf_counter()
        while time.perf_counter() - t < 0.05:
            pass
        return block

    model = StragglerModel("intensity", intensity=1.0)  # warm-up: round 2 (round 1 loads)
    with _engine(sc, busy, Policy.sync(), stragglers=model, warmup_tasks=4) as eng:
        results = []
        for r in eng.results():
            results.append(r)
            if len(results) % 4 == 0:
                eng.publish(np.zeros(3))
            if len(results) == 16:
                break
        mean = eng.mean_task_seconds
    assert mean is not None and 0.04 < mean < 0.5
    late = [r for r in results[8:] if r.block == 0]
    assert late and all(r.sleep_seconds == pytest.approx(mean) for r in late)
    assert all(r.sleep_seconds == 0 for r in results if r.block != 0)
    assert all(r.seconds >= r.sleep_seconds for r in late)


def test_long_run_returns_threads_and_broadcasts(sc):
    def broadcast_files():
        return len(os.listdir(sc._temp_dir)) if os.path.isdir(sc._temp_dir) else 0

    threads_before = threading.active_count()
    files_before = broadcast_files()
    with _engine(sc, echo_task, Policy.asynchronous(), P=4) as eng:
        n = 0
        for _ in eng.results():
            eng.publish(np.full(3, float(eng.version + 1)))
            n += 1
            assert eng.history.live_handles <= 4 + 1
            if n == 150:
                break
    assert eng.history.live_handles == 0
    assert eng.history.created == eng.history.destroyed > 0
    assert eng.core.in_flight == 0 and eng.core.accounting_closes()
    deadline = time.monotonic() + 10
    while threading.active_count() > threads_before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert threading.active_count() <= threads_before
    assert broadcast_files() <= files_before


def test_inline_publisher_and_pinned_history(sc):
    transport = SparkTransport(sc, publisher="inline")
    with AsyncEngine(
        transport, echo_task, num_blocks=2, policy=Policy.sync(), initial_model=np.zeros(3)
    ) as eng:
        eng.pin(0)
        out = []
        for r in eng.results():
            out.append(r)
            if len(out) % 2 == 0:
                eng.publish(np.full(3, float(eng.version + 1)))
            if len(out) == 6:
                break
        assert eng.history.model(0)[0] == 0.0  # pinned old version still readable
        eng.unpin(0)
    assert [r.payload["model_version"] for r in out] == [0, 0, 1, 1, 2, 2]


def test_closing_mid_run_cancels_in_flight_work(sc):
    args = {"sleep": {0: 30.0, 1: 30.0}}
    eng = _engine(sc, echo_task, Policy.asynchronous(), P=2, task_args=lambda t: args)
    eng.start()
    start = time.monotonic()
    eng._dispatch()
    time.sleep(1.0)
    eng.close()
    assert time.monotonic() - start < 20
    assert eng.core.counts["cancelled"] == 2 and eng.core.in_flight == 0
    assert eng.core.accounting_closes()


def test_status_enum_is_shared():
    assert TaskStatus("ok") is TaskStatus.OK


def test_partial_barrier_dispatches_rounds_of_at_least_ceil_beta_p(sc):
    args = {"sleep": {0: 0.3, 1: 0.05, 2: 0.02, 3: 0.01}}
    with _engine(sc, echo_task, Policy.partial_barrier(0.5), task_args=lambda t: args) as eng:
        sizes = []
        dispatch = eng.core.next_dispatches

        def recording():
            tickets = dispatch()
            if tickets:
                sizes.append(len(tickets))
            return tickets

        eng.core.next_dispatches = recording
        for i, _ in enumerate(eng.results()):
            eng.publish(np.full(3, float(eng.version + 1)))
            if i == 24:
                break
    assert sizes[0] == 4 and all(s >= 2 for s in sizes)  # ceil(0.5 * 4) = 2
    assert any(s < 4 for s in sizes)  # rounds start before the slowest block is back

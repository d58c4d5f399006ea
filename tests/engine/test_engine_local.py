"""AsyncEngine with the in-process LocalTransport: the same loop as on Spark, no JVM."""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import pytest

from async_spark.engine import AsyncEngine, EngineError, LocalTransport, Policy, TaskStatus
from async_spark.engine.engine import finite_payload
from async_spark.engine.transport import Outcome


def slow_block_task(block, model, args):
    time.sleep(0.05 if block == 0 else 0.005)
    return float(model)


def test_local_transport_runs_the_engine_loop_with_a_staleness_bound():
    with AsyncEngine(
        LocalTransport(),
        slow_block_task,
        num_blocks=3,
        policy=Policy.asynchronous(tau=3),
        initial_model=0.0,
    ) as eng:
        got = []
        for r in eng.results():
            assert r.staleness <= 3
            got.append(r.block)
            eng.publish(float(eng.version + 1))
            if len(got) == 40:
                break
    assert set(got) >= {1, 2}
    assert eng.core.accounting_closes() and eng.core.in_flight == 0


class InstantTransport(LocalTransport):
    """Every task finishes inside submit: its outcome is waiting before the engine looks."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[int]] = []  # the versions the tickets of each batch() read
        self._batch: list[int] | None = None
        self.batched = 0  # batch() contexts entered

    def start(self, num_blocks, slots, run_name, *, task_fn=None) -> None:
        self.run_name = run_name

    @contextlib.contextmanager
    def batch(self):
        self.batched += 1
        self._batch = []
        yield
        self.batches.append(self._batch)
        self._batch = None

    def submit(self, ticket, call) -> None:
        if self._batch is None:  # a lone ticket goes straight to submit: a batch of its own
            self.batches.append([ticket.version])
        else:
            self._batch.append(ticket.version)
        reports = call(iter([ticket.block]))
        self.outcomes.put(Outcome(ticket, TaskStatus.OK, reports[0], 0.0))


def _batches(policy, publish_every: int, results: int) -> list[list[int]]:
    """The versions the tickets of each batch() read, over ``results`` results of 4 blocks."""
    return _batches_on(InstantTransport(), policy, publish_every, results)


def _batches_on(transport, policy, publish_every: int, results: int) -> list[list[int]]:
    task = lambda block, model, args: float(model)  # noqa: E731
    with AsyncEngine(transport, task, num_blocks=4, policy=policy, initial_model=0.0) as eng:
        for n, _ in enumerate(eng.results(), start=1):
            if n % publish_every == 0:
                eng.publish(float(eng.version + 1))
            if n == results:
                break
    return transport.batches


def test_the_tickets_of_one_dispatch_go_to_the_transport_in_one_batch():
    """A synchronous round's 4 tickets are submitted inside one ``batch()`` (the resident
    transport then joins a worker's tickets into one write); an asynchronous run dispatches
    each block as its result is taken, reading the version published just before (a lone
    ticket is submitted without a batch)."""
    assert _batches(Policy.sync(), 4, 12) == [[0] * 4, [1] * 4, [2] * 4]
    assert _batches(Policy.asynchronous(), 1, 6) == [[0] * 4, [1], [2], [3], [4], [5]]
    with_batch = InstantTransport()
    _batches_on(with_batch, Policy.asynchronous(), 1, 6)
    assert with_batch.batched == 1  # the first dispatch (4 blocks); every other went alone


class ArrivalsTransport(InstantTransport):
    """An instant transport that says when outcomes wait, as the resident one does: the engine
    takes every waiting result before it dispatches again."""

    def outcome_waiting(self) -> bool:
        return not self.outcomes.empty()


def test_results_that_arrived_together_are_all_taken_before_one_joined_dispatch():
    """With outcomes waiting, the engine accounts and yields each of them (the update rule
    publishes after every one) and only then dispatches, once, inside one ``batch()``: every
    freed block reads the version published after the last of them (dispatching after each
    result would give [[0] * 4, [1], [2], [3], ...], one write per ticket)."""
    assert _batches_on(ArrivalsTransport(), Policy.asynchronous(), 1, 12) == [
        [0] * 4,
        [4] * 4,
        [8] * 4,
    ]
    # a synchronous round is the same either way
    assert _batches_on(ArrivalsTransport(), Policy.sync(), 4, 12) == [[0] * 4, [1] * 4, [2] * 4]


def test_every_block_failing_raises_with_the_last_error():
    def broken(block, model, args):
        raise ValueError(f"bad block {block}")

    eng = AsyncEngine(
        LocalTransport(),
        broken,
        num_blocks=2,
        policy=Policy.asynchronous(),
        initial_model=None,
        max_retries=1,
        backoff=0.0,
    )
    with eng, pytest.raises(EngineError, match="bad block"):
        for _ in eng.results():
            pass
    assert eng.core.counts["failed"] == 4


def test_stop_from_another_thread_ends_the_stream():
    eng = AsyncEngine(
        LocalTransport(), slow_block_task, num_blocks=2, policy=Policy.sync(), initial_model=0.0
    )
    timer = threading.Timer(0.3, eng.stop)
    with eng:
        timer.start()
        n = sum(1 for _ in eng.results())
    assert n >= 2 and eng.core.accounting_closes()


def test_trajectory_is_written_as_jsonl(tmp_path):
    with AsyncEngine(
        LocalTransport(), slow_block_task, num_blocks=2, policy=Policy.sync(), initial_model=0.0
    ) as eng:
        for i, _ in enumerate(eng.results()):
            if i == 5:
                break
    path = tmp_path / "t.jsonl"
    eng.write_trajectory(path)
    lines = path.read_text().splitlines()
    assert len(lines) >= 6 and '"staleness"' in lines[0]


def test_bad_engine_arguments_are_refused():
    with pytest.raises(ValueError, match="warmup_tasks"):
        AsyncEngine(
            LocalTransport(),
            slow_block_task,
            num_blocks=2,
            policy=Policy.sync(),
            initial_model=0.0,
            warmup_tasks=0,
        )
    with pytest.raises(ValueError, match="max_retries"):
        AsyncEngine(
            LocalTransport(),
            slow_block_task,
            num_blocks=2,
            policy=Policy.sync(),
            initial_model=0.0,
            max_retries=-1,
        )


def nan_for_block_one(block, model, args):
    return np.array([np.nan if block == 1 else 1.0, 2.0])


def test_non_finite_results_are_rejected_and_the_block_quarantined(caplog):
    with AsyncEngine(
        LocalTransport(),
        nan_for_block_one,
        num_blocks=3,
        policy=Policy.asynchronous(),
        initial_model=0.0,
        max_invalid=2,
    ) as eng:
        got = []
        for r in eng.results():
            got.append(r.block)
            eng.publish(float(eng.version + 1))
            if len(got) == 20:
                break
    assert 1 not in got and eng.snapshot()["counts"]["invalid"] == 2
    assert eng.core.status(1).value == "quarantined"
    assert "quarantined" in caplog.text


@pytest.mark.parametrize(
    "payload, finite",
    [
        (np.array([1.0, 2.0]), True),
        (np.array([1.0, np.nan]), False),
        (np.array([1.0, -np.inf], dtype=np.float32), False),
        (np.array([np.inf, -np.inf]), False),
        # finite entries whose sum overflows are finite
        (np.array([1.7e308, 1.7e308]), True),
        (np.array([6e4, 6e4], dtype=np.float16), True),
        (np.array([1.7e308, 1.7e308, np.nan]), False),
        (np.full((3, 4), 2.0), True),
        (np.array([[1.0, 2.0], [np.inf, 0.0]]), False),
        (np.array([[1.0, 2.0], [3.0, np.nan]]).T, False),  # not contiguous
        (np.array([1 + 2j, complex(0, np.inf)]), False),
        (np.array([np.timedelta64(1, "s"), np.timedelta64("NaT")]), False),
        (np.arange(5), True),
        (np.array([True, False]), True),
        (np.zeros((0, 3)), True),
        (float("inf"), False),
        (np.float32("nan"), False),
        (3, True),
        ((np.ones(2), [0.5, {"a": np.array([np.nan])}]), False),
        ((np.ones(2), [0.5, {"a": np.array([1.0])}]), True),
        (None, True),
    ],
)
def test_finite_payload_checks_every_float_nested_anywhere(payload, finite):
    assert finite_payload(payload) is finite

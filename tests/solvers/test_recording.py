"""The recorder's trace: column-wise while the run goes, the same dicts as ever when read."""

from __future__ import annotations

import math
import time

import numpy as np

from async_spark.solvers.recording import Recorder, TraceView


class _SumEvaluator:
    """F(theta) = sum(theta), or NaN where theta holds a NaN (a diverged snapshot)."""

    def objectives(self, thetas):
        return np.atleast_2d(thetas).sum(axis=1)

    def evaluate(self, thetas, gradients=()):
        """... and, as the optimality norm of the rows asked, their first entry."""
        thetas = np.atleast_2d(thetas)
        return self.objectives(thetas), np.array([thetas[i][0] for i in gradients])


def _run(models):
    rec = Recorder(_SumEvaluator(), eval_every=1.0, initial_theta=np.zeros(2))
    for now, version, staleness, block, model in models:
        rec.update(now, version, staleness, block, np.asarray(model, dtype=float))
    return rec


def test_the_finished_trace_has_every_record_sorted_with_the_snapshots_objectives():
    rec = _run(
        [
            (0.5, 1, 0, 0, [1.0, 0.0]),
            (1.2, 2, 1, 1, [2.0, 0.0]),  # a snapshot (eval_every 1 s)
            (1.2, 3, 0, None, [3.0, 0.0]),  # same time: kept after version 2
        ]
    )
    rec.rejected([(0.9, 2, 5, 1, False, "exec"), (0.7, 1, 0, 0, True, "exec")])
    rejected = {
        "seconds": 0.9,
        "version": 2,
        "staleness": 5,
        "block": 1,
        "objective": None,
        "accepted": False,
    }
    assert rec.trace[-1] == rejected
    record = rec.finish(wall=1.5, version=3, model=np.array([3.0, 1.0]))
    assert isinstance(record.trace, TraceView) and len(record.trace) == 5
    assert list(record.trace) == [
        {"seconds": 0.0, "version": 0, "staleness": 0, "block": None, "objective": 0.0},
        {"seconds": 0.5, "version": 1, "staleness": 0, "block": 0, "objective": None},
        rejected,  # a rejected result never takes the objective of its version's snapshot
        {"seconds": 1.2, "version": 2, "staleness": 1, "block": 1, "objective": 2.0},
        {"seconds": 1.2, "version": 3, "staleness": 0, "block": None, "objective": 4.0},
    ]
    assert record.trace[-1]["objective"] == 4.0 and record.trace[1:3] == list(record.trace)[1:3]
    record.trace[1]["objective"] = 99.0  # a read is a copy
    assert record.trace[1]["objective"] is None
    assert record.final_objective == 4.0


def test_a_nan_objective_stays_nan_and_a_resumed_trace_comes_back_whole():
    rec = _run([(1.5, 1, 0, 0, [math.nan, 0.0])])
    record = rec.finish(wall=2.0, version=1, model=np.array([math.nan, 0.0]))
    assert math.isnan(record.trace[1]["objective"])  # not turned into "no objective"
    resumed = Recorder(_SumEvaluator(), eval_every=1.0, initial_theta=np.zeros(2), trace=rec.trace)
    assert resumed.trace == rec.trace


def test_the_first_and_last_snapshots_give_the_start_and_final_optimality_norms():
    rec = _run([(1.5, 1, 0, 0, [4.0, 1.0]), (2.7, 2, 0, 1, [7.0, 0.0])])
    done = rec.finish(3.0, 3, np.array([9.0, 2.0]))  # a final model after the last snapshot
    assert done.start_gradient_norm == 0.0  # the initial theta, zeros
    assert done.gradient_norm == 9.0 and done.final_objective == 11.0
    assert [v for _, _, v in done.snapshots] == [0.0, 5.0, 7.0, 11.0]


class _OffsetEvaluator(_SumEvaluator):
    """A side evaluator that tells its values apart: sum(theta) + 100."""

    def objectives(self, thetas):
        return np.atleast_2d(thetas).sum(axis=1) + 100.0


def test_side_evaluated_snapshots_keep_their_values_and_the_norms_come_from_the_first_and_last():
    asked = []

    class Recording(_SumEvaluator):
        def evaluate(self, thetas, gradients=()):
            asked.append((np.array(thetas), tuple(gradients)))
            return super().evaluate(thetas, gradients)

    rec = Recorder(
        Recording(), eval_every=1.0, initial_theta=np.full(2, 0.5), target_objective=-1e9
    )
    rec.evaluate_side_with(_OffsetEvaluator())
    for k in range(1, 6):
        rec.update(float(k), k, 0, 0, np.array([float(k), 1.0]))
        if k in (2, 3):  # these two by the side thread, before the run goes on
            deadline = time.monotonic() + 10
            while len(rec.side.values) < k - 1 and time.monotonic() < deadline:
                time.sleep(0.001)
    rec.close()
    side = dict(rec.side.values)
    assert side and 0 not in side
    done = rec.finish(5.5, 6, np.array([8.0, 0.0]))
    values = [v for _, _, v in done.snapshots]
    for i, v in enumerate(values):  # a side value is kept; the rest come from the job
        assert v == side.get(i, float(np.sum(rec.snapshots[i][2])))
    ((thetas, positions),) = asked
    assert positions == (0, len(thetas) - 1)
    assert len(thetas) == len(values) - len(side)  # the side's snapshots are not evaluated again
    assert done.start_gradient_norm == 0.5 and done.gradient_norm == 8.0


def test_a_run_without_updates_asks_for_one_snapshots_norm_twice():
    rec = Recorder(_SumEvaluator(), eval_every=1.0, initial_theta=np.full(2, 3.0))
    done = rec.finish(0.0, 0, np.full(2, 3.0))
    assert done.start_gradient_norm == done.gradient_norm == 3.0
    assert done.final_objective == 6.0 and len(done.snapshots) == 1

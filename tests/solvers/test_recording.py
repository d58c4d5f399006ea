"""The recorder's trace: column-wise while the run goes, the same dicts as ever when read."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

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


class _GradientEvaluator(_SumEvaluator):
    """F = 1 + sum(theta); its gradient's largest entry: theta's second entry (or a failure)."""

    def __init__(self, fail=False):
        self.fail = fail

    def objectives(self, thetas):
        return 1.0 + np.atleast_2d(thetas).sum(axis=1)

    def objective_and_norm(self, theta):
        if self.fail:
            raise RuntimeError("the evaluation job failed")
        return float(self.objectives(theta)[0]), float(theta[1])


def _wait(rec, seconds=5.0):
    deadline = time.monotonic() + seconds
    while rec.stop_reason() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return rec.stop_reason()


def test_the_convergence_test_stops_at_the_first_snapshot_that_passes_it():
    rec = Recorder(_GradientEvaluator(), eval_every=1.0, initial_theta=np.zeros(2), tol=1e-3)
    rec.update(1.0, 1, 0, 0, np.array([0.0, 0.5]))  # |g| 0.5 > 1e-3 x 1.5
    time.sleep(0.2)
    assert rec.stop_reason() is None
    rec.update(2.0, 2, 0, 0, np.array([0.0, 1e-4]))  # passes: 1e-4 <= 1e-3 x 1.0001
    assert _wait(rec) == "tolerance"
    rec.close()
    record = rec.finish(wall=2.5, version=3, model=np.array([0.0, 0.0]))
    assert record.tolerance == {
        "tol": 1e-3,
        "passed": {"seconds": 2.0, "version": 2, "objective": 1.0001, "gradient_max": 1e-4},
    }
    assert record.snapshots[2] == (2.0, 2, 1.0001)  # the side's value, reused


def test_a_failing_evaluation_turns_the_test_off_and_the_run_goes_on():
    """Only the convergence test asked for the evaluation: a failure is logged and said in the
    record, not raised into the training loop (with a target objective it is raised)."""
    rec = Recorder(
        _GradientEvaluator(fail=True), eval_every=1.0, initial_theta=np.zeros(2), tol=1e-3
    )
    rec.update(1.0, 1, 0, 0, np.array([0.0, 0.0]))
    time.sleep(0.3)
    assert rec.stop_reason() is None
    rec.close()
    record = rec.finish(wall=1.5, version=1, model=np.array([0.0, 0.0]))
    assert record.tolerance["passed"] is None
    assert record.tolerance["failed"] == "RuntimeError: the evaluation job failed"


def test_snapshots_decimate_with_a_side_evaluator_and_keep_its_values():
    """A long run keeps at most MAX_SNAPSHOTS snapshots with the convergence test on too; the
    values the side evaluated are found by version after the decimation."""
    from async_spark.solvers import recording

    rec = Recorder(_GradientEvaluator(), eval_every=1.0, initial_theta=np.zeros(2), tol=1e-9)
    for k in range(1, recording.MAX_SNAPSHOTS + 5):
        rec.update(rec.next_snapshot, k, 0, 0, np.array([float(k), 1.0]))
    assert len(rec.snapshots) <= recording.MAX_SNAPSHOTS
    rec.close()
    record = rec.finish(wall=1e6, version=10**6, model=np.array([0.0, 1.0]))
    expected = {0: 1.0, 10**6: 2.0}  # zeros at the start; [0, 1] at the end
    for _, version, value in record.snapshots:
        assert value == expected.get(version, version + 2.0), version  # the model [k, 1]


class _NoJob(_SumEvaluator):
    """An evaluator for a rule that knows its values: the model the norms are taken under, and
    an evaluation job that records what it was asked (it must not be asked for known values)."""

    def __init__(self):
        from async_spark.models.linear import LinearModel

        self.model = LinearModel(loss="squares", num_features=1, fit_intercept=True)
        self.asked = []

    def evaluate(self, thetas, gradients=()):
        self.asked.append((np.array(thetas), tuple(gradients)))
        return super().evaluate(thetas, gradients)


def test_a_rule_that_knows_its_values_needs_no_evaluation_job():
    """L-BFGS computes F and its gradient at every accepted point over every row: the recorder
    takes them (Exact) for its snapshots, the start's included once the first round evaluated
    it, and for the model returned; with all known, finish asks the evaluator nothing, and the
    norms are the known gradients' (2-norm in the record, as the evaluator's)."""
    from async_spark.solvers.recording import Exact

    ev = _NoJob()
    start = np.array([1.0, 0.0])
    rec = Recorder(ev, eval_every=1.0, initial_theta=start, exact_values=True)
    assert rec.side is None
    rec.update(0.5, 1, 0, None, start, Exact(7.0, np.array([3.0, -4.0])))  # the start evaluated
    rec.update(1.5, 2, 0, None, np.array([2.0, 0.0]), Exact(5.0, np.array([1.0, 0.0])))
    final = np.array([2.5, 0.5])
    rec.update(1.8, 3, 0, None, final, Exact(4.0, np.array([0.0, 0.1])))
    done = rec.finish(2.0, 3, final)
    assert ev.asked == []
    assert [(v, f) for _, v, f in done.snapshots] == [(0, 7.0), (2, 5.0), (3, 4.0)]
    assert done.final_objective == 4.0
    assert done.start_gradient_norm == 5.0 and done.gradient_norm == pytest.approx(0.1)
    assert [r["objective"] for r in done.trace] == [7.0, None, 5.0, 4.0]


def test_unknown_values_alone_go_to_the_evaluation_job():
    """A snapshot whose value the rule did not give (None: e.g. before its first round, or a
    resumed run's older snapshots) is evaluated, alone, with its gradient only if it is the first
    or the last; a final model other than the last known iterate is evaluated too."""
    from async_spark.solvers.recording import Exact

    ev = _NoJob()
    rec = Recorder(ev, eval_every=1.0, initial_theta=np.zeros(2), exact_values=True)
    rec.update(1.2, 1, 0, None, np.array([1.0, 1.0]), None)  # a snapshot, value unknown
    rec.update(2.4, 2, 0, None, np.array([2.0, 0.0]), Exact(9.0, np.array([0.0, 0.0])))
    done = rec.finish(3.0, 3, np.array([5.0, 0.0]))  # not the iterate of the last update
    ((thetas, positions),) = ev.asked
    np.testing.assert_array_equal(thetas, [[0.0, 0.0], [1.0, 1.0], [5.0, 0.0]])
    assert positions == (0, 2)  # the start's and the model's gradients; not the middle one's
    assert [f for _, _, f in done.snapshots] == [0.0, 2.0, 9.0, 5.0]
    assert done.start_gradient_norm == 0.0 and done.gradient_norm == 5.0


def test_a_known_value_that_passes_the_test_stops_the_run_at_that_update():
    """With known values the target and the convergence test need no side evaluation: checked
    at every update (not only at snapshots), and the update that passes becomes a snapshot."""
    from async_spark.solvers.recording import Exact

    ev = _NoJob()
    rec = Recorder(ev, eval_every=10.0, initial_theta=np.zeros(2), tol=1e-3, exact_values=True)
    rec.update(0.1, 1, 0, None, np.zeros(2), Exact(2.0, np.array([0.5, 0.0])))
    assert rec.stop_reason() is None
    rec.update(0.2, 2, 0, None, np.ones(2), Exact(1.0, np.array([-5e-4, 2e-4])))
    assert rec.stop_reason() == "tolerance"
    done = rec.finish(0.3, 2, np.ones(2))
    assert done.tolerance == {
        "tol": 1e-3,
        "passed": {"seconds": 0.2, "version": 2, "objective": 1.0, "gradient_max": 5e-4},
    }
    assert [(s, v, f) for s, v, f in done.snapshots] == [(0.0, 0, 2.0), (0.2, 2, 1.0)]
    assert ev.asked == []
    target = Recorder(
        _NoJob(),
        eval_every=10.0,
        initial_theta=np.zeros(2),
        target_objective=1.5,
        exact_values=True,
    )
    target.update(0.1, 1, 0, None, np.ones(2), Exact(1.4, np.zeros(2)))
    assert target.stop_reason() == "target_objective"

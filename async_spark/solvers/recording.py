"""What a run records: the trace, snapshots of the model, the off-clock evaluation, checkpoints.

The loop (:mod:`.loop`) tells a :class:`Recorder` about every update; the recorder appends one
trace record, takes a snapshot of the model every ``eval_every`` seconds of training, hands it to
a side evaluator when the run must stop at a target objective, and says when a checkpoint is due.
After training, :meth:`Recorder.finish` evaluates every snapshot in one Spark job (measuring never
slows the run it measures) and writes the objectives into the trace.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

import numpy as np

from async_spark.engine.columns import Columns
from async_spark.models.linear import smooth_optimality_norm

from .evaluate import EvaluationUnavailable, Evaluator, WorkerEvaluator

__all__ = ["Exact", "Recorder", "RunRecord", "SnapshotEvaluator", "TraceView", "tolerance_met"]

log = logging.getLogger(__name__)

MAX_SNAPSHOTS = 400  # snapshots kept in memory for evaluation (decimated beyond)


def tolerance_met(objective: float, gradient_max: float, tol: float) -> bool:
    r"""The convergence test of pyspark.ml's L-BFGS (Breeze's gradient test, relative):
    :math:`\max_j |g_j| \le \mathrm{tol} \cdot |F(\theta)|`, with :math:`g` the smallest
    subgradient of the run's objective :math:`F` (its gradient without :math:`\ell_1`).
    Never met by a NaN (a norm not collected) or where ``tol`` is 0."""
    return tol > 0 and gradient_max <= tol * abs(objective)


class Exact(NamedTuple):
    """An iterate's objective and the smooth part's gradient (with the l2 penalty's), as a rule
    that computed them over every row holds them (:meth:`~.methods.Family.exact`)."""

    objective: float
    gradient: np.ndarray


class SnapshotEvaluator:
    """Evaluates snapshots in a side thread (newest first) so that the run can stop at a
    target objective or, with ``tol``, once a snapshot passes :func:`tolerance_met`;
    ``reason`` says which (``"target_objective"`` or ``"tolerance"``), ``passed`` holds the
    snapshot that passed the convergence test: ``(version, seconds, objective, gradient max)``;
    ``values`` the objectives evaluated, by the snapshots' model versions."""

    def __init__(
        self,
        evaluator: Evaluator | WorkerEvaluator,
        target: float | None,
        tol: float | None = None,
    ) -> None:
        self.evaluator = evaluator
        self.target = target
        self.tol = tol
        self.reached = threading.Event()
        self.reason: str | None = None
        self.passed: tuple[int, float, float, float] | None = None
        self.values: dict[int, float] = {}
        self._queue: queue.Queue[tuple[int, float, np.ndarray] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="async-spark-eval", daemon=True)
        self.error: BaseException | None = None
        self.failed: str | None = None  # why the convergence test stopped (tol only)
        self._thread.start()

    def submit(self, version: int, seconds: float, theta: np.ndarray) -> None:
        self._queue.put((version, seconds, theta))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            # Evaluate only the newest snapshot waiting: older ones are done after training.
            while True:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    return
                item = nxt
            version, seconds, theta = item
            try:
                if self.tol:
                    value, norm = self.evaluator.objective_and_norm(theta)
                else:
                    value, norm = float(self.evaluator.objectives(theta[None, :])[0]), math.nan
            except EvaluationUnavailable:
                continue  # evaluated after training instead
            except BaseException as exc:  # noqa: BLE001 - reported by the training loop
                if self.target is None:
                    # only the convergence test asked: the run goes on to its other limits,
                    # and its summary says why no snapshot passed
                    self.failed = f"{type(exc).__name__}: {str(exc)[:500]}"
                    log.warning("convergence test off for the rest of the run: %s", self.failed)
                    return
                self.error = exc
                self.reached.set()
                return
            self.values[version] = value
            if self.target is not None and value <= self.target:
                self.reason = "target_objective"
            elif self.tol and tolerance_met(value, norm, self.tol):
                self.reason = "tolerance"
                self.passed = (version, seconds, value, norm)
            if self.reason is not None:
                self.reached.set()
                return  # the run stops: nothing newer needs evaluating now

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=600)


class TraceView(Sequence[dict[str, Any]]):
    """A finished run's trace: records stored column-wise, read as the trace's dicts
    (``seconds``, ``version``, ``staleness``, ``block``, ``objective``, and ``accepted: False``
    for a rejected result). A new dict at each read: mutating one changes nothing."""

    def __init__(self, columns: Columns) -> None:
        self._columns = columns

    def __len__(self) -> int:
        return len(self._columns)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return _record(self._columns[i])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (_record(row) for row in self._columns)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TraceView | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TraceView({len(self)} records)"


@dataclass
class RunRecord:
    """What the recording of a finished run holds."""

    trace: Sequence[dict[str, Any]]
    snapshots: list[tuple[float, int, float]]  # (seconds, version, objective)
    final_objective: float
    time_to_target: float | None
    # the optimality norm (models.linear.optimality_norm) of the first and the last snapshot
    start_gradient_norm: float | None = None
    gradient_norm: float | None = None
    # the convergence test (tol) and the snapshot that passed it (Recorder._tolerance)
    tolerance: dict[str, Any] | None = None


#: The trace's columns: seconds, version, staleness, block (or None), objective, whether there is
#: an objective (it may be NaN itself), accepted.
_TRACE_KINDS = "fiinfbb"


def _row(
    seconds: float,
    version: int,
    staleness: int,
    block: int | None,
    objective: float | None,
    accepted: bool = True,
) -> tuple[Any, ...]:
    has = objective is not None
    return (seconds, version, staleness, block, objective if has else 0.0, has, accepted)


def _row_of(record: dict[str, Any]) -> tuple[Any, ...]:
    return _row(
        record["seconds"],
        record["version"],
        record["staleness"],
        record["block"],
        record["objective"],
        record.get("accepted", True),
    )


def _record(row: tuple[Any, ...]) -> dict[str, Any]:
    seconds, version, staleness, block, objective, has_objective, accepted = row
    out = {
        "seconds": seconds,
        "version": version,
        "staleness": staleness,
        "block": block,
        "objective": objective if has_objective else None,
    }
    if not accepted:
        out["accepted"] = False
    return out


class Recorder:
    """The trace, the snapshots and the checkpoint cadence of one run.

    Parameters
    ----------
    evaluator : Evaluator
        Computes objectives of snapshots (after training; during it too with a target).
    eval_every : float
        Seconds of training between snapshots.
    target_objective : float, optional
        Evaluate snapshots as they are taken, in a side thread, so the run can stop there.
    tol : float, optional
        Evaluate snapshots with their gradients as they are taken, in a side thread, so the run
        can stop once one passes :func:`tolerance_met` (0 or None: no test).
    checkpoint_every, checkpoint_seconds : optional
        A checkpoint is due every so many updates, or seconds of training.
    trace, snapshots : optional
        A resumed run's records so far.
    exact_values : bool
        The run's rule gives each iterate's objective and gradient (:class:`Exact`, passed to
        :meth:`update` and :meth:`finish`): the target and the convergence test are checked on
        them after every update, a snapshot whose value is known is not evaluated again, and a
        run whose snapshots are all known needs no evaluation job.
    """

    def __init__(
        self,
        evaluator: Evaluator,
        *,
        eval_every: float,
        initial_theta: np.ndarray,
        target_objective: float | None = None,
        tol: float | None = None,
        checkpoint_every: int | None = None,
        checkpoint_seconds: float | None = None,
        trace: list[dict[str, Any]] | None = None,
        snapshots: list[tuple[float, int, np.ndarray]] | None = None,
        now: float = 0.0,
        exact_values: bool = False,
    ) -> None:
        self.evaluator = evaluator
        self.target = target_objective
        self.tol = tol or None
        self.exact_values = exact_values
        self._known: dict[int, Exact] = {}  # by snapshot version
        self._exact: tuple[np.ndarray, Exact] | None = None  # the latest iterate's, and it
        self._reason: str | None = None  # target or tolerance met on an exact value
        self._passed: tuple[int, float, float, float] | None = None
        # one record per update (and rejected result), column-wise: a long run's trace in
        # 41 bytes a record rather than a dict's ~300
        self._trace = Columns(_TRACE_KINDS, (_row_of(r) for r in trace or ()))
        self.snapshots: list[tuple[float, int, np.ndarray]] = (
            [(0.0, 0, np.array(initial_theta))] if snapshots is None else list(snapshots)
        )
        self.eval_every = eval_every
        self.next_snapshot = (self.snapshots[-1][0] if self.snapshots else 0.0) + eval_every
        self.checkpoint_every = checkpoint_every
        self.checkpoint_seconds = checkpoint_seconds
        self.last_checkpoint = now
        target = None if target_objective is None else float(target_objective)
        testing = target is not None or bool(tol)
        self.side = (
            SnapshotEvaluator(evaluator, target, tol or None)
            if testing and not exact_values
            else None
        )

    @property
    def trace(self) -> list[dict[str, Any]]:
        """The records so far, as the trace's dicts (a new list at each call)."""
        return [_record(row) for row in self._trace]

    @property
    def checkpoints(self) -> bool:
        return self.checkpoint_every is not None or self.checkpoint_seconds is not None

    def update(
        self,
        now: float,
        version: int,
        staleness: int,
        block: int | None,
        model: np.ndarray,
        exact: Exact | None = None,
    ) -> None:
        """One applied update; ``model`` is the iterate to snapshot when one is due, ``exact``
        its objective and gradient when the rule knows them (``exact_values``)."""
        self._trace.append(_row(round(now, 6), version, int(staleness), block, None))
        met = False
        if exact is not None:
            if self._exact is None:  # the first known value: the start's, once evaluated
                start_version, start = self.snapshots[0][1:]
                if start_version not in self._known and np.array_equal(start, model):
                    self._known[start_version] = exact
            self._exact = (model, exact)
            met = self._test_exact(version, now, model, exact)
        if now < self.next_snapshot and not met:
            return
        self._take(now, version, model, exact)

    def _test_exact(self, version: int, now: float, model: np.ndarray, exact: Exact) -> bool:
        """The target and the convergence test on a known value (the side evaluator's tests,
        without its evaluation); True when one is met (the run stops there)."""
        if self._reason is not None:
            return False
        if self.target is not None and exact.objective <= self.target:
            self._reason = "target_objective"
        elif self.tol:
            norm = self.gradient_norm(model, exact)
            if tolerance_met(exact.objective, norm, self.tol):
                self._reason = "tolerance"
                self._passed = (version, now, exact.objective, norm)
        return self._reason is not None

    def gradient_norm(self, model: np.ndarray, exact: Exact, order: float = math.inf) -> float:
        """The optimality norm of a known gradient, as the evaluator's (the test's: the largest
        entry; the summary's: ``order`` 2)."""
        return smooth_optimality_norm(self.evaluator.model, model, exact.gradient, order)

    def _take(self, now: float, version: int, model: np.ndarray, exact: Exact | None) -> None:
        self.snapshots.append((now, version, np.array(model)))
        if exact is not None:
            self._known[version] = exact
        if self.side is not None:
            self.side.submit(version, now, self.snapshots[-1][2])
        if len(self.snapshots) > MAX_SNAPSHOTS:
            # A long run keeps bounded memory: every other snapshot goes, and they are taken
            # half as often from now on (the first and last are kept).
            self.snapshots = self.snapshots[:-1:2] + self.snapshots[-1:]
            self.eval_every *= 2
        self.next_snapshot = now + self.eval_every

    def checkpoint_due(self, updates: int, now: float) -> bool:
        due = (self.checkpoint_every is not None and updates % self.checkpoint_every == 0) or (
            self.checkpoint_seconds is not None
            and now - self.last_checkpoint >= self.checkpoint_seconds
        )
        if due:
            self.last_checkpoint = now
        return due

    def evaluate_side_with(self, evaluator: WorkerEvaluator) -> None:
        """Evaluate the snapshots during training with ``evaluator`` (a resident run's workers),
        before the first one is taken; after training, :meth:`finish` still uses the run's
        evaluation job."""
        if self.side is not None:
            self.side.evaluator = evaluator

    def stop_reason(self) -> str | None:
        """``"target_objective"`` or ``"tolerance"`` once the side evaluator saw a snapshot
        that stops the run (or an update's known value did), else None (re-raises the side
        evaluator's error)."""
        if self._reason is not None:
            return self._reason
        if self.side is None or not self.side.reached.is_set():
            return None
        if self.side.error is not None:
            raise self.side.error
        return self.side.reason

    def close(self) -> None:
        if self.side is not None:
            self.side.close()

    @staticmethod
    def rejected_records(
        trajectory: Iterable[tuple[float, int, int, int, bool, str]],
    ) -> list[dict[str, Any]]:
        """The trace records of rejected results (staleness bound), marked as such."""
        return [
            {
                "seconds": round(seconds, 6),
                "version": version,
                "staleness": staleness,
                "block": block,
                "objective": None,
                "accepted": False,
            }
            for seconds, version, staleness, block, accepted, _ in trajectory
            if not accepted
        ]

    def rejected(self, trajectory: Iterable[tuple[float, int, int, int, bool, str]]) -> None:
        """Rejected results join the trace at the end of the run."""
        self._trace.extend(_row_of(r) for r in self.rejected_records(trajectory))

    def finish(self, wall: float, version: int, model: np.ndarray) -> RunRecord:
        """Off the clock: the last snapshot, every objective not known yet in one job (none
        when all are), the trace completed."""
        snapshots = self.snapshots
        if not snapshots or snapshots[-1][1] != version:
            snapshots.append((wall, version, np.array(model)))
            if self._exact is not None and np.array_equal(self._exact[0], model):
                self._known[version] = self._exact[1]  # the last update's iterate: the model
        seen = {} if self.side is None else dict(self.side.values)  # by version
        seen.update((v, e.objective) for v, e in self._known.items())
        values = {i: seen[v] for i, (_, v, _) in enumerate(snapshots) if v in seen}
        last = len(snapshots) - 1
        ends = {0: self._known.get(snapshots[0][1]), last: self._known.get(snapshots[last][1])}
        grads = {i: self.gradient_norm(snapshots[i][2], e, 2) for i, e in ends.items() if e}
        # the first and the last snapshot join the job unless their gradients are known: their
        # gradients come with it
        todo = sorted(
            {i for i in ends if i not in grads} | set(range(len(snapshots))) - set(values)
        )
        if todo:
            wanted = [j for j, i in enumerate(todo) if i in ends and i not in grads]
            objs, norms = self.evaluator.evaluate(
                np.stack([snapshots[i][2] for i in todo]), gradients=wanted
            )
            values.update((i, float(v)) for i, v in zip(todo, objs, strict=True) if i not in values)
            grads.update((todo[j], float(n)) for j, n in zip(wanted, norms, strict=True))
        by_version = {snapshots[i][1]: values[i] for i in range(len(snapshots))}
        rows = sorted(self._trace, key=lambda r: (r[0], r[1]))  # stable: ties keep their order
        finished = Columns(_TRACE_KINDS, [_row(0.0, 0, 0, None, values[0])])
        for seconds, v, staleness, block, objective, has, accepted in rows:
            if accepted and v in by_version:
                objective, has = by_version[v], True
            finished.append((seconds, v, staleness, block, objective, has, accepted))
        trace = TraceView(finished)
        time_to_target = None
        if self.target is not None:
            time_to_target = next(
                (s for i, (s, _, _) in enumerate(snapshots) if values[i] <= self.target), None
            )
        return RunRecord(
            trace=trace,
            snapshots=[(s, v, values[i]) for i, (s, v, _) in enumerate(snapshots)],
            final_objective=values[last],
            time_to_target=time_to_target,
            start_gradient_norm=_known(grads[0]),
            gradient_norm=_known(grads[last]),
            tolerance=self._tolerance(),
        )

    def _tolerance(self) -> dict[str, Any] | None:
        """The convergence test's record: its ``tol`` and the snapshot that passed it (None
        when none did)."""
        side = self.side
        if not self.tol:
            return None
        passed = None
        found = self._passed if side is None else side.passed
        if found is not None:
            version, seconds, objective, gradient_max = found
            passed = {
                "seconds": seconds,
                "version": version,
                "objective": objective,
                "gradient_max": gradient_max,
            }
        out: dict[str, Any] = {"tol": self.tol, "passed": passed}
        if side is not None and side.failed is not None:
            out["failed"] = side.failed
        return out


def _known(value: float) -> float | None:
    """A norm, or None where the evaluation skipped it (NaN: too large to collect)."""
    return None if math.isnan(value) else float(value)

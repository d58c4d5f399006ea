"""What runs inside the executor for one task: read the model, call the task function, time it.

Everything here is sent to executors, so it captures plain values only: the task function, a model
handle (``.value`` is the model), the block index and the delay the driver chose for this task.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from .stragglers import Delay

__all__ = [
    "HeldRows",
    "TaskReport",
    "executor_identity",
    "keeps_held_rows",
    "replace_field",
    "resolve_held",
    "run_task",
    "timed_task",
]

TaskFunction = Callable[[int, Any, Any], Any]
"""``task_fn(block, model, args) -> payload``; runs on an executor."""


class HeldRows(NamedTuple):
    """Rows of a per-block table that a task reads: SAGA's old scalars of the task's sample.

    The task function reads ``table[rows]``. A transport that keeps each
    block's table on the block's worker (the resident one, for a task function that says which
    rows it reads and writes: :func:`keeps_held_rows`) ships ``table`` once per worker and after
    that only ``origin``, a label of the table's content: the ``block_task`` of the task whose
    result last wrote the block's rows (negative before any). The worker draws the rows itself
    and keeps the rows its result writes as a pending patch, which the next ticket of the block
    commits (the driver applied the result: the table's origin is now that task's) or drops (it
    did not). Every other transport ships ``table[rows]`` in place of the whole value
    (:func:`resolve_held`), so the driver copies the rows only when they travel. ``table`` must
    not change after dispatch: a new content is a new array with a new origin.
    """

    origin: int
    table: Any  # ndarray (rows, ...) of the block
    rows: Any  # this task's row indices into table


def keeps_held_rows(task_fn: Any) -> bool:
    """Whether ``task_fn`` tells which rows of its block's table a task reads and writes:
    ``task_fn.held_rows(block, args, num_rows) -> row indices`` and
    ``task_fn.held_values(payload) -> the new values of those rows`` (what a worker needs to
    keep a :class:`HeldRows` table)."""
    return callable(getattr(task_fn, "held_rows", None)) and callable(
        getattr(task_fn, "held_values", None)
    )


def held_field(args: Any) -> int | None:
    """The index of the :class:`HeldRows` field of a named-tuple ``args``, or None."""
    if isinstance(args, tuple):
        for i, value in enumerate(args):
            if isinstance(value, HeldRows):
                return i
    return None


def replace_field(args: tuple[Any, ...], i: int, value: Any) -> tuple[Any, ...]:
    """``args`` (a tuple or named tuple) with field ``i`` set to ``value``."""
    values = list(args)
    values[i] = value
    return type(args)(*values) if hasattr(args, "_fields") else tuple(values)


def resolve_held(args: Any) -> Any:
    """``args`` with its :class:`HeldRows` field replaced by the rows the task reads
    (``table[rows]``, a copy): what a transport that keeps no tables on its workers ships."""
    i = held_field(args)
    if i is None:
        return args
    held = args[i]
    return replace_field(args, i, held.table[held.rows])


class TaskReport(NamedTuple):
    """What a task returns to the driver (besides its payload)."""

    task_id: int
    payload: Any
    compute_seconds: float  # model read + task function
    sleep_seconds: float  # straggler delay applied
    executor: str
    worker_pid: int


_identity: str | None = None


def executor_identity() -> str:
    """``host:pid`` of the JVM that runs this Python worker (one per executor; the driver's in local
    mode). PySpark tells a Python worker neither its executor id nor its JVM, so walk up the
    process tree: worker -> pyspark daemon -> JVM."""
    global _identity
    if _identity is None:
        pid = os.getppid()
        try:
            with open(f"/proc/{pid}/stat") as fh:
                # field 4 is the parent pid; the command name in field 2 may contain spaces
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            pass
        _identity = f"{socket.gethostname()}:{pid}"
    return _identity


def run_task(
    task_fn: TaskFunction,
    model_ref: Any,
    block: int,
    task_id: int,
    args: Any,
    delay: Delay,
    rows: Iterable[Any] = (),
) -> list[TaskReport]:
    """Body of one single-partition job. The block comes from the worker's cache through the task
    function, not from ``rows`` (the partition holds only its index)."""
    # Drain the partition's iterator: PySpark does not reuse a Python worker whose task left its
    # input unread, and a fresh worker has lost its block cache.
    for _ in rows:
        pass
    report = timed_task(task_fn, _model_reader(model_ref), block, task_id, args, delay)
    assert report is not None  # time.sleep is never interrupted
    return [report]


def _model_reader(model_ref: Any) -> Callable[[], Any]:
    return lambda: model_ref.value if model_ref is not None else None


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


def timed_task(
    task_fn: TaskFunction,
    read_model: Callable[[], Any],
    block: int,
    task_id: int,
    args: Any,
    delay: Delay,
    sleep: Callable[[float], bool] = _sleep,
) -> TaskReport | None:
    """Read the model, run the task function, apply the straggler delay, time it all.

    The compute time covers the model read and the task function; the delay then sleeps through
    ``sleep(seconds)``, which returns True when it was interrupted (a resident worker's
    cancellation): then the task reports nothing (None)."""
    start = time.perf_counter()
    model = read_model()
    payload = task_fn(block, model, args)
    compute = time.perf_counter() - start
    executor = executor_identity()
    extra = delay.extra_seconds(executor, compute)
    if extra > 0 and sleep(extra):
        return None
    return TaskReport(task_id, payload, compute, extra, executor, os.getpid())

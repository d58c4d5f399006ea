"""Per-block tables kept on resident workers (HeldRows, engine/tables.py).

The driver here plays SAGA's part with a toy task: each block has a table; a task reads some rows
of it (which rows depends on the task) and returns what it read and new values for those rows;
the driver applies some results (the table's label becomes that task's ``block_task``) and drops
others. Whatever happens — results dropped, a connection lost, the driver's mirror corrupted —
every task must read exactly the driver's table, on the resident transport (which keeps the
tables on its workers) as on the local one (which ships the rows).
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

import numpy as np
import pytest

from async_spark.engine import AsyncEngine, LocalTransport, Policy
from async_spark.engine.resident import ResidentTransport
from async_spark.engine.tables import DriverTables, TableInstruction, WorkerTables
from async_spark.engine.task import HeldRows, keeps_held_rows, resolve_held

P, ROWS = 4, 50


class Args(NamedTuple):
    block_task: int
    held: Any


class TableTask:
    """Reads rows ``block_task % 3, +3, ...`` of its block's table; writes old + 1 + block_task."""

    def held_rows(self, block: int, args: Any, num_rows: int) -> np.ndarray:
        return np.arange(args.block_task % 3, num_rows, 3)

    def held_values(self, payload: Any) -> np.ndarray:
        return payload[1]

    def __call__(self, block: int, model: Any, args: Any) -> Any:
        old = np.asarray(args.held)
        return old.copy(), old + 1.0 + args.block_task


def _register_by_value():
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def table_run(transport, updates=240, corrupt_at=(), disconnect_at=()):
    """Run until ``updates`` results; returns (mismatched reads, applied, dropped, core)."""
    task = TableTask()
    tables = [np.arange(ROWS, dtype=np.float64) * (b + 1) for b in range(P)]
    origins = [-1] * P
    rng = np.random.default_rng(3)

    def task_args(ticket):
        rows = task.held_rows(ticket.block, Args(ticket.block_task, None), ROWS)
        return Args(ticket.block_task, HeldRows(origins[ticket.block], tables[ticket.block], rows))

    mismatches = applied = dropped = 0
    with AsyncEngine(
        transport,
        task,
        num_blocks=P,
        policy=Policy.asynchronous(),
        initial_model=np.zeros(1),
        task_args=task_args,
        max_retries=5,
        backoff=0.01,
    ) as eng:
        for n, r in enumerate(eng.results(), start=1):
            read, new = r.payload
            rows = task.held_rows(r.block, Args(r.block_task, None), ROWS)
            mismatches += read.tobytes() != tables[r.block][rows].tobytes()
            if rng.random() < 0.6:  # the driver applies this result
                table = tables[r.block].copy()
                table[rows] = new
                tables[r.block], origins[r.block] = table, r.block_task
                applied += 1
            else:  # rejected (e.g. too stale): the worker must drop its patch
                dropped += 1
            if n in corrupt_at:
                # the mirror now says the worker holds another label and a patch it never made:
                # the next ticket of this block commits a task the worker does not know
                conn = transport._owners[r.block]
                with transport._lock:
                    conn.tables._origins[r.block] = -999
                    conn.tables._pending[r.block] = (10**9, origins[r.block])
            if n in disconnect_at:
                assert transport.disconnect(r.block) is not None
            eng.publish(np.zeros(1))
            if n == updates:
                break
        core = eng.core
        assert core.accounting_closes()
    return mismatches, applied, dropped, core


def test_only_a_task_function_that_names_its_rows_keeps_tables():
    assert keeps_held_rows(TableTask())
    assert not keeps_held_rows(lambda block, model, args: None)
    assert not ResidentTransport(object()).keeps_tables(lambda block, model, args: None)
    assert ResidentTransport(object()).keeps_tables(TableTask())
    assert not LocalTransport().keeps_tables(TableTask())
    table = np.arange(6.0)
    args = Args(2, HeldRows(7, table, np.array([1, 4])))
    resolved = resolve_held(args)
    assert type(resolved) is Args and resolved.held.tolist() == [1.0, 4.0]
    assert resolve_held((1, 2)) == (1, 2)


def test_the_mirror_and_the_worker_follow_the_same_rules():
    """held / commit / full, and what a reply changes, without Spark."""
    driver, worker, task = DriverTables(), WorkerTables(), TableTask()
    table0 = np.zeros(6)

    def ticket(task_id, block_task, origin, table):
        ins, sent = driver.instruct(task_id, 0, block_task, 1, HeldRows(origin, table, None))
        ins = TableInstruction.from_header(ins.to_header())  # through the header
        held = worker.apply(0, ins, sent)
        args, rows = worker.task_args(task, 0, Args(block_task, None), ins, held)
        return ins, args, rows

    ins, args, rows = ticket(1, 0, -1, table0)
    assert ins.mode == "full" and args.held.tolist() == [0.0, 0.0]  # rows 0 and 3
    payload = task(0, None, args)
    worker.keep(task, 0, 1, rows, payload)
    driver.on_reply("result", 1)
    # the driver applies task 1's result: label 0 (its block_task), rows 0 and 3 now 1.0
    table1 = table0.copy()
    table1[rows] = payload[1]
    ins, args, rows = ticket(2, 1, 0, table1)
    assert ins.mode == "commit" and ins.commit_task == 1
    assert args.held.tolist() == [0.0, 0.0]  # rows 1 and 4, untouched
    worker.keep(task, 0, 2, rows, task(0, None, args))
    driver.on_reply("result", 2)
    ins, args, _ = ticket(3, 2, 0, table1)  # task 2's result dropped: same label
    assert ins.mode == "held" and args.held.tolist() == [0.0, 0.0]  # rows 2 and 5
    driver.on_reply("cancelled", 3)
    ins, args, _ = ticket(4, 3, 0, table1)
    assert ins.mode == "held" and args.held.tolist() == [1.0, 1.0]  # rows 0 and 3: committed
    driver.on_reply("error", 4)  # the worker's table may be anything now: full next time
    assert ticket(5, 4, 0, table1)[0].mode == "full"
    with pytest.raises(ValueError, match="no patch of task 99"):
        worker.apply(0, TableInstruction(1, "commit", 5, 99), None)
    with pytest.raises(ValueError, match="labelled 0, the ticket reads 5"):
        worker.apply(0, TableInstruction(1, "held", 5, None), None)
    with pytest.raises(ValueError, match="no table is held for block 1"):
        worker.apply(1, TableInstruction(1, "held", 0, None), None)
    for bad in (
        [1, "held", 0],
        [1, "copy", 0, None],
        [1, "commit", 0, None],
        [-1, "held", 0, None],
    ):
        with pytest.raises(ValueError, match="table instruction"):
            TableInstruction.from_header(bad)


@pytest.mark.spark
@pytest.mark.parametrize("kind", ["local", "resident"])
def test_every_task_reads_the_drivers_table_whatever_the_driver_applies(spark, kind):
    _register_by_value()
    transport = ResidentTransport(spark) if kind == "resident" else LocalTransport()
    mismatches, applied, dropped, core = table_run(transport)
    assert mismatches == 0
    assert applied > 100 and dropped > 50
    if kind == "resident":
        counts = transport.stats
        # each block's table travelled once; then only labels: commits after an applied result,
        # "held" after a dropped one
        assert counts["table_full"] == P, counts
        assert counts["table_commit"] >= applied - P and counts["table_held"] >= dropped - P
        assert core.snapshot()["counts"]["failed"] == 0


@pytest.mark.spark
def test_a_lost_connection_or_a_wrong_mirror_resends_the_table_and_nothing_is_misread(spark):
    _register_by_value()
    transport = ResidentTransport(spark)
    mismatches, applied, _, core = table_run(
        transport, updates=300, corrupt_at=(60, 200), disconnect_at=(120,)
    )
    assert mismatches == 0 and applied > 100
    counts = transport.stats
    # the two corrupted mirrors failed one task each (the worker refused the commit); their
    # retries and the reconnected worker's blocks got their tables again in full
    assert core.snapshot()["counts"]["failed"] >= 2
    assert counts["table_full"] >= P + 3, counts

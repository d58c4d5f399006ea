"""Per-block tables kept on resident workers: the worker's store and the driver's mirror of it.

A task whose args hold a :class:`~.task.HeldRows` (SAGA's old scalars of its sample) reads rows
of its block's table. The resident transport ships that table to a worker once; after that a
ticket carries only an instruction (:class:`TableInstruction`) about the block's table:

- ``full``: here is the table, labelled ``origin`` (the first ticket of the block on this
  connection, or after anything went wrong);
- ``held``: use the table you hold, labelled ``origin``; drop the patch your last task of this
  block left (the driver did not apply its result: rejected, cancelled, or never sent);
- ``commit``: apply the patch that task ``commit_task`` left (the driver applied its result,
  which is what changed the label to ``origin``), then use the table.

Both sides follow the same rules, so the driver knows what each worker holds without asking.
The worker checks every instruction against what it holds; a mismatch fails that task (an
``error`` frame), and the driver then sends the block's table in full with the retry. Labels are
the ``block_task`` of the task whose result wrote the table, so they never repeat within a run,
nor across a resumed one. The driver's own table stays the reference (checkpoints, a lost
worker): only the outbound copy of the rows is saved, not the inbound one.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .task import HeldRows, replace_field

__all__ = ["TABLE_MODES", "DriverTables", "TableInstruction", "WorkerTables"]

TABLE_MODES = ("full", "held", "commit")


class TableInstruction(NamedTuple):
    """What a ticket says about its block's table (the header's ``"s"`` field)."""

    field: int  # the index of the HeldRows field in the task's args
    mode: str  # one of TABLE_MODES
    origin: int  # the label of the table the task must read
    commit_task: int | None  # mode "commit": the task whose pending patch to apply

    @classmethod
    def from_header(cls, value: Any) -> TableInstruction:
        """Read a header's ``"s"`` list (ValueError when it is malformed)."""
        if not (isinstance(value, list) and len(value) == 4):
            raise ValueError("a table instruction needs [field, mode, origin, commit_task]")
        field, mode, origin, commit_task = value
        if type(field) is not int or field < 0 or mode not in TABLE_MODES:
            raise ValueError(f"bad table instruction {value!r}")
        if type(origin) is not int or (mode == "commit") != (type(commit_task) is int):
            raise ValueError(f"bad table instruction {value!r}")
        return cls(field, mode, origin, commit_task)

    def to_header(self) -> list[Any]:
        return [self.field, self.mode, self.origin, self.commit_task]


class DriverTables:
    """The driver's mirror of the tables one worker connection holds.

    Not thread-safe: the transport calls it under its lock."""

    def __init__(self) -> None:
        self._origins: dict[int, int] = {}  # block -> the label of the table the worker holds
        self._pending: dict[int, tuple[int, int]] = {}  # block -> (task id, block_task)
        self._tasks: dict[int, tuple[int, int]] = {}  # task id -> (block, block_task)

    def instruct(
        self, task_id: int, block: int, block_task: int, field: int, held: HeldRows
    ) -> tuple[TableInstruction, Any]:
        """The instruction for a ticket, and the table to send with it (None unless ``full``)."""
        have = self._origins.get(block)
        pending = self._pending.pop(block, None)  # the worker drops or applies it now
        if have == held.origin:
            instruction = TableInstruction(field, "held", held.origin, None)
        elif have is not None and pending is not None and pending[1] == held.origin:
            instruction = TableInstruction(field, "commit", held.origin, pending[0])
        else:
            instruction = TableInstruction(field, "full", held.origin, None)
        self._origins[block] = held.origin
        self._tasks[task_id] = (block, block_task)
        return instruction, held.table if instruction.mode == "full" else None

    def on_reply(self, kind: str, task_id: int) -> None:
        """A worker's reply to a ticket: a ``result`` leaves a patch that a later ticket may
        commit; an ``error`` may mean the worker's table is not what this mirror says (it will
        get the table in full next time); ``cancelled`` changes nothing."""
        entry = self._tasks.pop(task_id, None)
        if entry is None:
            return
        block, block_task = entry
        if kind == "result":
            self._pending[block] = (task_id, block_task)
        elif kind == "error":
            self._origins.pop(block, None)
            self._pending.pop(block, None)


class WorkerTables:
    """The tables a resident worker holds, with the patch each block's last task left.

    Used by the worker's compute thread only (tickets are applied in the order they came)."""

    def __init__(self) -> None:
        self._tables: dict[int, list[Any]] = {}  # block -> [origin, table]
        self._pending: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}  # block -> patch

    def clear(self) -> None:
        """A new connection: the driver's mirror starts empty, so does this store."""
        self._tables.clear()
        self._pending.clear()

    def apply(self, block: int, instruction: TableInstruction, table: Any) -> np.ndarray:
        """Follow ``instruction`` for ``block``; the table the task reads (ValueError when the
        instruction does not match what this worker holds)."""
        pending = self._pending.pop(block, None)
        held = self._tables.get(block)
        if instruction.mode == "full":
            if not isinstance(table, np.ndarray) or table.ndim < 1:
                raise ValueError("a full table instruction needs the table")
            self._tables[block] = [instruction.origin, table]
            return table
        if held is None:
            raise ValueError(f"no table is held for block {block}")
        if instruction.mode == "commit":
            if pending is None or pending[0] != instruction.commit_task:
                raise ValueError(
                    f"block {block}: no patch of task {instruction.commit_task} to commit"
                )
            _, rows, values = pending
            held[1][rows] = values
            held[0] = instruction.origin
        elif held[0] != instruction.origin:
            raise ValueError(
                f"block {block}: the table held is labelled {held[0]}, the ticket reads "
                f"{instruction.origin}"
            )
        return held[1]  # type: ignore[no-any-return]

    def task_args(
        self, task_fn: Any, block: int, args: Any, instruction: TableInstruction, table: Any
    ) -> tuple[Any, np.ndarray]:
        """``args`` with the rows the task reads in its HeldRows field, and those rows."""
        rows = np.asarray(task_fn.held_rows(block, args, table.shape[0]), dtype=np.int64)
        if instruction.field >= len(args):
            raise ValueError(f"the args have no field {instruction.field}")
        # a copy of the rows: the table may change later
        return replace_field(args, instruction.field, table[rows]), rows

    def keep(self, task_fn: Any, block: int, task_id: int, rows: np.ndarray, payload: Any) -> None:
        """The patch a successful task leaves (its rows, and their new values read from its
        payload by ``task_fn.held_values``), until the next ticket of its block."""
        self._pending[block] = (task_id, rows, np.asarray(task_fn.held_values(payload)))

"""Errors raised for bad input data."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["DataError", "OPTION", "rows_cannot_fill"]

# In a DataError's ``problem``, marks the option its fix is about; each front end names it.
OPTION = "{option}"


class DataError(ValueError):
    """Input data that cannot be used: malformed, out of range, non-finite or inconsistent.

    The message always names where the problem is: the file and 1-based line number (text
    formats), the file and column (Parquet), or the array (in-memory input).

    Parameters
    ----------
    message : str
        The message, in the words of the library's functions (``num_blocks=8``).
    option : str, optional
        The run option (a ``TrainConfig`` field, e.g. ``"partitions"``) that the fix is about.
    problem : str, optional
        The same message for a front end, with :data:`OPTION` where that option's name goes:
        :meth:`render` names it as the command line does (``--partitions``) or as the
        Estimators do (``numPartitions``).
    """

    def __init__(
        self, message: str, *, option: str | None = None, problem: str | None = None
    ) -> None:
        super().__init__(message)
        self.option = option
        self.problem = problem

    def render(self, name: Callable[[str], str]) -> str:
        """The message with the option named by ``name(field)`` (the plain message if none)."""
        if self.option is None or self.problem is None:
            return str(self)
        return self.problem.replace(OPTION, name(self.option))


def rows_cannot_fill(where: str, rows: int, blocks: int) -> DataError:
    """Fewer rows than blocks: rendered, the error says how many partitions the data can fill."""
    return DataError(
        f"{where}: {rows} rows cannot fill num_blocks={blocks} blocks",
        option="partitions",
        problem=f"{where}: {rows} row{'s' if rows != 1 else ''} cannot fill {blocks} partitions "
        f"(at least one row each): set {OPTION} to {rows} or fewer",
    )

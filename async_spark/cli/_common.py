"""What the subcommands of ``async-spark`` share: argument types, the Spark options, the session.

Every name here is public: a subcommand module imports only these, never another's private names.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "EXIT_USAGE",
    "HelpFormatter",
    "add_master_and_conf",
    "add_spark_arguments",
    "parse_float",
    "parse_int",
    "parse_step",
    "spark_session",
]

EXIT_USAGE = 2


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Help that ends each option with ``(default: ...)`` where the default says something.

    Left out for ``None`` (unset: the help says what happens then), ``False`` (a flag), an empty
    list (a repeatable option) and a help that already names its default.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        default = action.default
        text = action.help or ""
        if default is None or default is False or default is argparse.SUPPRESS:
            return action.help
        if (isinstance(default, list) and not default) or "default" in text:
            return action.help
        return super()._get_help_string(action)


def parse_int(text: str) -> int:
    """An integer option (``type=``): a clear message instead of argparse's ``invalid int``."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def parse_float(text: str) -> float:
    """A number option (``type=``)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def parse_step(text: str) -> float | str:
    """``--step``: a number or ``auto``."""
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None


def add_master_and_conf(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--master`` and ``--conf KEY=VALUE`` (repeatable), on a parser or an argument group."""
    p.add_argument(
        "--master", default=None, help="Spark master URL (default: spark-submit's, else local[*])"
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Spark configuration (repeatable)",
    )


def add_spark_arguments(p: argparse.ArgumentParser) -> None:
    """``--master``, ``--conf`` and ``--debug``: the options of every Spark subcommand."""
    add_master_and_conf(p)
    p.add_argument("--debug", action="store_true", help="show tracebacks")


@contextmanager
def spark_session(master: str | None, app_name: str, conf: list[str]) -> Iterator[Any]:
    """A session for one command; stopped at the end unless it was already running.

    A notebook's or a test's active session is reused and left running.
    """
    from pyspark.sql import SparkSession

    from async_spark.engine.session import build_session

    owned = SparkSession.getActiveSession() is None
    spark = build_session(master, app_name=app_name, conf=conf)
    try:
        yield spark
    finally:
        if owned:
            spark.stop()

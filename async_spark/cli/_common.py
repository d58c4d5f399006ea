"""What the subcommands of ``async-spark`` share: argument types, the Spark options, the session.

Every name here is public: a subcommand module imports only these, never another's private names.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from async_spark.data.blocks import private_directory

__all__ = [
    "EXIT_USAGE",
    "HelpFormatter",
    "add_master_and_conf",
    "add_spark_arguments",
    "check_executors_or_fail",
    "report_error",
    "log_path",
    "parse_float",
    "parse_int",
    "parse_step",
    "quiet_logging",
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


def add_master_and_conf(
    p: argparse.ArgumentParser | argparse._ArgumentGroup, *, remote: bool = False
) -> None:
    """``--master``, ``--remote`` and ``--conf KEY=VALUE`` (repeatable), on a parser or an
    argument group."""
    p.add_argument(
        "--master", default=None, help="Spark master URL (default: spark-submit's, else local[*])"
    )
    if remote:
        add_remote(p)
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Spark configuration (repeatable)",
    )


def add_remote(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--remote URL``: a Spark Connect session (commands that run on one)."""
    p.add_argument(
        "--remote",
        default=None,
        metavar="URL",
        help="Spark Connect server (sc://HOST:PORT, or local[N] to start one here; default: "
        "$SPARK_REMOTE if set); tasks must reach this machine: see docs/connect.md",
    )


def add_spark_arguments(p: argparse.ArgumentParser, *, remote: bool = False) -> None:
    """``--master``, ``--conf`` and ``--debug``: the options of every Spark subcommand (and
    ``--remote`` for those that run on Spark Connect)."""
    add_master_and_conf(p, remote=remote)
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def log_path(out: str | os.PathLike[str] | None, command: str) -> Path:
    """Where a command's Spark log goes: ``OUT/spark.log``, or a file under this user's private
    log folder in the temporary folder (created 0700, refused if another user could write it)
    when there is no output folder."""
    if out is not None:
        return Path(out) / "spark.log"
    folder = private_directory(
        Path(tempfile.gettempdir()) / f"async-spark-logs-{os.getuid()}", "log folder"
    )
    return folder / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"


# Log records that say nothing a user can act on; they go to the log file only.
_UNACTIONABLE = (("async_spark.engine.resident", "workers did not leave"),)


class _ConsoleFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "py.warnings":
            return False
        message = record.getMessage()
        return not any(
            record.name.startswith(name) and text in message for name, text in _UNACTIONABLE
        )


@contextmanager
def quiet_logging(path: Path | None) -> Iterator[None]:
    """Python logging for one command: the handlers already there (the console) keep warnings
    and errors, minus the records of ``_UNACTIONABLE`` and Python's ``warnings``; ``path`` gets
    everything from INFO up (async_spark's INFO lines: workers connecting, jobs launched)."""
    root = logging.getLogger()
    filt = _ConsoleFilter()
    handlers = list(root.handlers)
    levels = [h.level for h in handlers]
    for h in handlers:
        h.addFilter(filt)
        if h.level == logging.NOTSET:
            h.setLevel(logging.WARNING)  # async_spark at INFO below must not reach the console
    file_handler = None
    async_logger = logging.getLogger("async_spark")
    previous = async_logger.level
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(path, encoding="utf-8")
        file_handler.setLevel(logging.INFO)
        file_handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
        )
        root.addHandler(file_handler)
        async_logger.setLevel(logging.INFO)
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        async_logger.setLevel(previous)
        for h, level in zip(handlers, levels, strict=True):
            h.removeFilter(filt)
            h.setLevel(level)
        if file_handler is not None:
            root.removeHandler(file_handler)
            file_handler.close()


@contextmanager
def spark_session(
    master: str | None,
    app_name: str,
    conf: list[str],
    log_file: str | os.PathLike[str] | None = None,
    remote: str | None = None,
    connect: bool = False,
) -> Iterator[Any]:
    """A session for one command; stopped at the end unless it was already running.

    A notebook's or a test's active session is reused and left running. With ``log_file``, a
    JVM started here writes Spark's log (and, in local mode, the Python workers' stderr) there
    instead of the terminal. With ``connect`` (a command that runs on Spark Connect), ``remote``
    (else ``$SPARK_REMOTE``) makes it a Spark Connect session
    (:func:`async_spark.engine.connect.remote_session`).
    """
    from pyspark.sql import SparkSession

    from async_spark.engine.session import build_session, parse_conf_pairs

    remote = (remote or os.environ.get("SPARK_REMOTE") or None) if connect else None
    if remote is not None:
        from async_spark.engine.connect import remote_session

        if master is not None:
            raise ValueError(
                f"--master {master} and --remote {remote}: give one (a Spark Connect server "
                "runs its own master)"
            )
        spark = remote_session(remote, app_name=app_name, conf=parse_conf_pairs(conf))
        try:
            yield spark
        finally:
            spark.stop()
        return
    owned = SparkSession.getActiveSession() is None
    spark = build_session(master, app_name=app_name, conf=conf, log_file=log_file)
    try:
        yield spark
    finally:
        if owned:
            spark.stop()


def _usage_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean bad input, options or environment (exit code 2)."""
    from async_spark.engine.connect import ConnectUnsupported
    from async_spark.engine.session import ExecutorEnvironmentError, JavaNotFoundError
    from async_spark.reporting.tracking import TrackingError

    return (
        ValueError,
        ConnectUnsupported,
        OSError,
        ImportError,
        JavaNotFoundError,
        TrackingError,
        ExecutorEnvironmentError,
    )


def report_error(prog: str, exc: Exception, log: Path | None = None) -> int:
    """One line on stderr for a failed command, and its exit code.

    Bad input, options or environment: ``PROG: error: MESSAGE``, exit code 2. Anything else:
    ``PROG: failed (TYPE): MESSAGE``, exit code 1, with where Spark's log is when there is one.
    """
    import sys

    from async_spark.data.errors import DataError
    from async_spark.solvers.validation import flag_name

    usage = isinstance(exc, _usage_errors())
    text = exc.render(flag_name) if isinstance(exc, DataError) else str(exc)
    message = " ".join(text.split()) or type(exc).__name__
    kind = "error" if usage else f"failed ({type(exc).__name__})"
    where = "" if usage or log is None or not log.exists() else f" (Spark's log: {log})"
    print(f"{prog}: {kind}: {message}{where}", file=sys.stderr)
    return EXIT_USAGE if usage else 1


def check_executors_or_fail(spark: Any) -> None:
    """The executors' environment check (:func:`async_spark.engine.session.check_executors`)
    before any training; its ``ExecutorEnvironmentError`` names the fix."""
    from async_spark.engine.session import check_executors

    check_executors(spark)

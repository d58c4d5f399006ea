"""The ``async-spark`` command.

Subcommands, one module each:

- ``train``    — a linear model with any method of the table (SGD, SAGA, HB/AG/APG, DC-ASGD;
  synchronous and asynchronous) on Spark (:mod:`async_spark.cli.train`);
- ``momentum`` — the stochastic momentum reproduction (rates, invariant covariance, W2;
  :mod:`async_spark.cli.momentum`);
- ``score``    — a model written by ``train --out`` scored on other rows: accuracy, log loss, ROC
  area, RMSE (:mod:`async_spark.cli.score`);
- ``plot``     — figures of run directories (objective vs time and updates, staleness;
  :mod:`async_spark.cli.plot`);
- ``emulate``  — the same training on P emulated workers in virtual time (a cluster emulator;
  :mod:`async_spark.cli.emulate`);
- ``hylo``     — HyLo natural gradient on a reference deep model (PyTorch), here or with
  ``--spark`` as a Spark barrier stage (:mod:`async_spark.cli.hylo`).

``--mlflow`` (train, hylo) is in :mod:`async_spark.cli.tracking`; what the subcommands share is in
:mod:`async_spark.cli._common`; the main job (``jobs/main.py``: ASAGA beside SAGA and a report) is
:mod:`async_spark.cli.main_job`. This package is the only one of async_spark that uses argparse.

Bad input or options end with exit code 2 and one line on stderr naming the file and line or
the option and its allowed values; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import logging
import sys

from async_spark.cli._common import HelpFormatter, report_error
from async_spark.cli.emulate import add_emulate_arguments, run_emulate
from async_spark.cli.hylo import add_hylo_arguments, add_spark_hylo_arguments, run_hylo
from async_spark.cli.momentum import add_momentum_arguments, run_momentum
from async_spark.cli.plot import add_plot_arguments, run_plot
from async_spark.cli.score import add_score_arguments, run_score
from async_spark.cli.tracking import add_tracking_arguments
from async_spark.cli.train import add_train_arguments, run_train

__all__ = ["main", "build_parser", "add_train_arguments"]

DESCRIPTION = (
    "The async-spark command: asynchronous SGD/SAGA (ASYNC), stochastic momentum and HyLo "
    "natural gradient on PySpark."
)


def build_parser() -> argparse.ArgumentParser:
    """The ``async-spark`` parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="async-spark", description=DESCRIPTION, formatter_class=HelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, formatter_class=HelpFormatter)

    train = command(
        "train", "train a linear model with (a)synchronous SGD, SAGA, momentum or DC-ASGD on Spark"
    )
    add_train_arguments(train)
    add_tracking_arguments(train)
    add_momentum_arguments(command("momentum", "reproduce the stochastic momentum theory"))
    add_score_arguments(
        command("score", "a trained model's metrics on other rows (accuracy, log loss, RMSE, ...)")
    )
    add_plot_arguments(
        command("plot", "plot runs written by train --out (objective, staleness, block times)")
    )
    add_emulate_arguments(
        command(
            "emulate",
            "train on P emulated workers in virtual time; --calibrate measures the cost model",
        )
    )
    hylo = command("hylo", "HyLo natural gradient on a reference model (PyTorch)")
    add_hylo_arguments(hylo)
    add_spark_hylo_arguments(hylo)  # --spark: the same training as a Spark barrier stage
    add_tracking_arguments(hylo)
    hylo.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


HANDLERS = {
    "train": run_train,
    "momentum": run_momentum,
    "hylo": run_hylo,
    "plot": run_plot,
    "score": run_score,
    "emulate": run_emulate,
}


def main(argv: list[str] | None = None) -> int:
    """Run ``async-spark ARGV`` and return its exit code.

    0 on success, 2 on bad input or options, 1 on another failure, 130 when interrupted (a
    training stopped by SIGINT or SIGTERM returns 130 or 143 after writing its outputs).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return HANDLERS[args.command](args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if getattr(args, "debug", False):
            raise
        return report_error(f"async-spark {args.command}", exc, getattr(args, "log_file", None))

"""The ``async-spark`` command.

Subcommands:

- ``train``    — SGD / ASGD / SAGA / ASAGA on Spark (the main job; see ``async-spark train -h``);
- ``momentum`` — the stochastic momentum reproduction (rates, invariant covariance, W2);
- ``hylo``     — HyLo natural gradient on a reference deep model (PyTorch);
- ``plot``     — figures of run directories (objective vs time and updates, staleness);
- ``emulate``  — the same training on P emulated workers in virtual time (a cluster emulator).

Bad input or options end with exit code 2 and one line on stderr naming the file and line or
the option and its allowed values; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import signal
import sys
import threading

from async_spark.train_cli import _optional_int, add_train_arguments, run_train

__all__ = ["main", "build_parser", "add_train_arguments"]

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="async-spark", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser(
        "train", help="train a linear model with (a)synchronous SGD/SAGA on Spark"
    )
    add_train_arguments(train)
    from async_spark.tracking_cli import add_tracking_arguments

    add_tracking_arguments(train)
    mom = sub.add_parser("momentum", help="reproduce the stochastic momentum theory")
    mom.add_argument("--out", default=None, help="folder for figures.json and plots")
    mom.add_argument("--quick", action="store_true")
    mom.add_argument("--seed", type=_optional_int, default=0)
    mom.add_argument("--debug", action="store_true")
    plot = sub.add_parser(
        "plot", help="plot runs written by train --out (objective, staleness, block times)"
    )
    from async_spark.plots import add_plot_arguments

    add_plot_arguments(plot)
    from async_spark.emulate_cli import add_emulate_arguments

    add_emulate_arguments(
        sub.add_parser(
            "emulate",
            help="train on P emulated workers in virtual time; --calibrate measures the cost model",
        )
    )
    hylo = sub.add_parser("hylo", help="HyLo natural gradient on a reference model (PyTorch)")
    from async_spark.hylo.cli_args import add_arguments as add_hylo_arguments

    add_hylo_arguments(hylo)
    from async_spark.gpu.cli import add_spark_hylo_arguments

    add_spark_hylo_arguments(hylo)  # --spark: the same training as a Spark barrier stage
    add_tracking_arguments(hylo)
    hylo.add_argument("--debug", action="store_true")
    return parser


def run_momentum(args: argparse.Namespace) -> int:
    from async_spark.theory.reproduce import run_reproduction

    run_reproduction(out_dir=args.out, quick=args.quick, seed=args.seed)
    return 0


def run_hylo(args: argparse.Namespace) -> int:
    from async_spark.hylo.cli_args import config_from_args
    from async_spark.tracking_cli import finish, log_hylo_run, open_run

    run = open_run(args, f"hylo-{args.optimizer}", {"async_spark.command": "hylo"})
    if run is None:
        return _train_hylo(args)
    scratch = None
    if not args.out:  # MLflow keeps the outputs: write them somewhere
        import tempfile

        scratch = tempfile.TemporaryDirectory(prefix="async-spark-hylo-")
        args.out = scratch.name
    log = functools.partial(log_hylo_run, out_dir=args.out, params=config_from_args(args))
    # SIGTERM ends a tracked run like Ctrl-C: KILLED, with the epochs finished so far logged.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        try:
            code = _train_hylo(args)
        except KeyboardInterrupt:
            finish(run, log, "KILLED")
            raise
        except BaseException:
            finish(run, log, "FAILED")
            raise
        finish(run, log)
        return code
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if scratch is not None:
            scratch.cleanup()


def _train_hylo(args: argparse.Namespace) -> int:
    if getattr(args, "spark", False):
        from async_spark.gpu.cli import run_spark_hylo

        return run_spark_hylo(args)
    from async_spark.hylo.cli_args import config_from_args
    from async_spark.hylo.train import train

    summary = train(config_from_args(args))
    print(json.dumps(summary, indent=2, default=str))
    return 0


def run_plot(args: argparse.Namespace) -> int:
    from async_spark.plots import run_plot as _run_plot

    return _run_plot(args)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from async_spark.emulate_cli import run_emulate

    handlers = {
        "train": run_train,
        "momentum": run_momentum,
        "hylo": run_hylo,
        "plot": run_plot,
        "emulate": run_emulate,
    }
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if getattr(args, "debug", False):
            raise
        from async_spark.engine.session import JavaNotFoundError
        from async_spark.reporting.tracking import TrackingError

        usage = isinstance(
            exc, ValueError | OSError | ImportError | JavaNotFoundError | TrackingError
        )
        message = " ".join(str(exc).split()) or type(exc).__name__
        kind = "error" if usage else f"failed ({type(exc).__name__})"
        print(f"async-spark {args.command}: {kind}: {message}", file=sys.stderr)
        return EXIT_USAGE if usage else 1


if __name__ == "__main__":
    sys.exit(main())

"""``async-spark momentum``: the reproduction of the stochastic momentum paper's claims.

The experiments are :func:`async_spark.theory.reproduce.run_reproduction`, the figures
:func:`async_spark.reporting.momentum.plot_reproduction`; this module holds the options.
"""

from __future__ import annotations

import argparse

from async_spark.cli._common import parse_int

__all__ = ["add_momentum_arguments", "run_momentum"]


def add_momentum_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``async-spark momentum``."""
    p.add_argument("--out", default=None, help="folder for figures.json and plots")
    p.add_argument("--quick", action="store_true", help="small runs (seconds); noisier figures")
    p.add_argument(
        "--seed", type=parse_int, default=0, help="seed of every random draw (problems, noise)"
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def run_momentum(args: argparse.Namespace) -> int:
    """Run the reproduction: print its tables, write ``figures.json`` and plots into ``--out``."""
    from async_spark.reporting.momentum import plot_reproduction
    from async_spark.theory.reproduce import run_reproduction

    run_reproduction(out_dir=args.out, quick=args.quick, seed=args.seed, plot=plot_reproduction)
    return 0

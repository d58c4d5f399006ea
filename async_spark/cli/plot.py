"""``async-spark plot RUN_DIR [RUN_DIR ...] [--out FILE.png]``: figures of training runs.

The drawing is :func:`async_spark.reporting.plots.plot_runs`; this module holds the options.
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_plot_arguments", "run_plot"]


def add_plot_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``async-spark plot``."""
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="folders from train --out")
    p.add_argument(
        "--out",
        default=None,
        help="PNG to write (default: runs.png in the first RUN_DIR's parent folder)",
    )
    p.add_argument(
        "--label", action="append", default=None, help="legend label per RUN_DIR (repeatable)"
    )
    p.add_argument("--title", default=None, help="figure title")
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def run_plot(args: argparse.Namespace) -> int:
    """``async-spark plot``: write the PNG and print its path."""
    out = args.out
    if out is None:
        out = str(Path(args.run_dirs[0]).resolve().parent / "runs.png")
    from async_spark.reporting.plots import plot_runs

    path = plot_runs(args.run_dirs, out, labels=args.label, title=args.title)
    print(path)
    return 0

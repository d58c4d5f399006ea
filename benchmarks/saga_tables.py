"""SAGA's table kept on the resident workers vs its rows shipped with every ticket, side by side.

A tall problem, where a task's old scalars outweigh the model: ``builtin:synthetic`` with
n = 400 000 rows and d = 50 (about 10 nonzeros a row), 4 partitions on ``local[4]``, so that an
ASAGA task samples b N / P = 10 000 rows (the default b = 0.1) and reads 80 KB of old scalars
against a 408-byte model. Each repeat runs ASAGA with default options for a fixed training budget
on the resident transport twice: with the workers keeping their blocks' tables (the default,
``ResidentTransport(keep_tables=True)``: a ticket carries a label, see
``async_spark/engine/tables.py``) and with the rows shipped in every ticket (``keep_tables=False``,
what the other transports do); which goes first alternates between repeats. Reported per run:
updates made, updates per second of training, the bytes of an average ticket (the transport's
own count), the driver process's CPU time per update (every Python thread of the driver), and
the final objective. Figures: medians of the repeats with [min, max].

Usage: python benchmarks/saga_tables.py [--budget 8] [--repeats 3] [--master local[4]] [--smoke]
Last line: ``RESULT held_tables_vs_shipped_rows_updates <x>``: the median over the repeats of
the updates made with the tables kept over those made with the rows shipped, in the same repeat.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import format_median_range  # noqa: E402

from async_spark.data.dataset import open_dataset  # noqa: E402
from async_spark.engine import AsyncEngine, build_session  # noqa: E402
from async_spark.engine.resident import ResidentTransport  # noqa: E402
from async_spark.solvers import TrainConfig, train_linear  # noqa: E402

VARIANTS = ("tables kept", "rows shipped")


def run_once(spark, data, source_uri: str, keep: bool, budget: float) -> dict[str, float]:
    """One ASAGA run with default options on a resident transport that keeps tables or not."""
    transports: list[ResidentTransport] = []

    def engine(task_fn, **options):  # noqa: ANN001, ANN003, ANN202
        transport = ResidentTransport(spark, keep_tables=keep)
        transports.append(transport)
        return AsyncEngine(transport, task_fn, **options)

    cfg = TrainConfig(
        data=source_uri,
        method="asaga",
        partitions=4,
        l2=1e-4,
        quiet=True,
        time_budget=budget,
        eval_every=1.0,
    )
    cpu0 = time.process_time()
    result = train_linear(cfg, spark=spark, dataset=data, engine_factory=engine)
    cpu = time.process_time() - cpu0
    stats = transports[0].stats
    return {
        "updates": result.updates,
        "rate": result.updates / max(result.wall_seconds, 1e-9),
        "ticket_bytes": stats["ticket_bytes"] / max(1, stats["tickets"]),
        "cpu_us": 1e6 * cpu / max(1, result.updates),
        "final": result.final_objective,
        "table_full": stats["table_full"],
    }


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=8.0, help="training seconds per run")
    ap.add_argument("--repeats", type=int, default=None, help="default 3 (smoke: 1)")
    ap.add_argument("--master", default="local[4]")
    ap.add_argument("--smoke", action="store_true", help="a small problem, 1 s runs, 1 repeat")
    args = ap.parse_args(argv)
    repeats = args.repeats if args.repeats is not None else (1 if args.smoke else 3)
    if repeats < 1:
        ap.error(f"--repeats must be at least 1, got {repeats}")
    budget = 1.0 if args.smoke else args.budget
    n = 20_000 if args.smoke else 400_000
    uri = f"builtin:synthetic?n={n}&d=50&density=0.2&seed=1"
    spark = build_session(args.master, app_name="saga-tables", conf={"spark.ui.enabled": "false"})
    runs: list[dict[str, dict[str, float]]] = []
    try:
        data = open_dataset(uri, 4, standardize=True, loss="logistic")
        print(f"{uri}, 4 partitions, ASAGA defaults, {budget:g} s per run\n")
        print(
            "| repeat | variant | updates | updates/s | bytes/ticket | driver CPU/update | final |"
        )
        print("|---|---|---|---|---|---|---|")
        for rep in range(repeats):
            runs.append({})
            order = VARIANTS if rep % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                r = run_once(spark, data, uri, variant == "tables kept", budget)
                runs[-1][variant] = r
                print(
                    f"| {rep + 1} | {variant} | {r['updates']} | {r['rate']:.0f} | "
                    f"{r['ticket_bytes']:.0f} | {r['cpu_us']:.0f} µs | {r['final']:.6f} |",
                    flush=True,
                )
    finally:
        spark.stop()
    print(f"\nmedians [min, max] of {repeats} repeats:\n")
    print("| variant | updates/s | bytes/ticket | driver CPU/update (µs) |")
    print("|---|---|---|---|")
    for variant in VARIANTS:
        cells = [
            format_median_range((r[variant][key] for r in runs), spec)
            for key, spec in (("rate", ".0f"), ("ticket_bytes", ".0f"), ("cpu_us", ".0f"))
        ]
        print(f"| {variant} | {' | '.join(cells)} |")
    ratios = [r["tables kept"]["updates"] / max(1, r["rows shipped"]["updates"]) for r in runs]
    ratio = statistics.median(ratios)
    print(
        f"\nupdates, tables kept / rows shipped, by repeat: {', '.join(f'{x:.2f}' for x in ratios)}"
    )
    print(f"RESULT held_tables_vs_shipped_rows_updates {ratio:.3f}")
    return ratio


if __name__ == "__main__":
    main(sys.argv[1:])

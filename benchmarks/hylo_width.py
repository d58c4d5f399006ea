"""Cost of one training epoch on MNIST-1D as the CNN widens: SGD vs K-FAC vs HyLo, side by side.

Why: K-FAC preconditions with Kronecker factors sized by the layer (d_in x d_in and
d_out x d_out; applying them costs ~d_out d_in (d_in + d_out) per step), HyLo with a kernel sized
by the batch (applying it costs ~m d_out d_in for m kept rows).  On the published MNIST-1D CNN
(25 channels, layers of at most 126 inputs) both are cheap and K-FAC's better curvature wins
(``benchmarks/hylo_mnist1d.py``); as the channels grow K-FAC's cost grows one power of the width
faster than the forward/backward pass, HyLo's does not.  This script measures where that
crossover lies on this machine.

For each width (the channels of all three convolutions), every round trains each optimizer for
``--epochs`` epochs on MNIST-1D (same data, batch, threads, ``inv_update_steps``) and keeps the
median training seconds per epoch after the first (which pays one-time set-up); rounds
interleave the optimizers so load drifts hit all of them alike, and the medians over rounds are
reported with the ratios:

* ``kfac/hylo`` -- K-FAC's epoch cost over HyLo's: how many times more epochs HyLo may take to an
  accuracy and still tie K-FAC's time;
* ``hylo/sgd`` and ``kfac/sgd`` -- each preconditioner's overhead over plain SGD.

The settings are the tuned ones of ``hylo_mnist1d.py`` at 25 channels (cost barely depends on
them; a run that diverges stops the script rather than time fewer epochs).  HyLo here is the
hybrid method, whose per-epoch cost in epochs 2-3 depends on how many layers use KID (a QR per
inverse update) rather than KIS at that point of training.  Epochs to
an accuracy are not measured here (that needs a tuned sweep: run ``hylo_mnist1d.py --width W``).

Last line: ``RESULT kfac_vs_hylo_epoch_seconds <kfac/hylo at the widest width>``.

Usage::

    python benchmarks/hylo_width.py --quick
    python benchmarks/hylo_width.py --smoke   # seconds: widths 8 and 16, 1 round of 2 epochs
    python benchmarks/hylo_width.py --out runs/hylo_width.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import warnings
from typing import Any

from async_spark.hylo import HyLo
from async_spark.hylo import train as train_mod
from async_spark.hylo.models import build_model

OPTIMIZERS: dict[str, dict[str, Any]] = {
    "sgd": {"optimizer": "sgd", "lr": 0.1},
    "kfac": {"optimizer": "kfac", "lr": 0.1, "damping": 0.01},
    "hylo": {"optimizer": "hylo", "lr": 0.3, "damping": 0.03, "fisher_window": 10},
}


def _epoch_seconds(width: int, settings: dict[str, Any], args: argparse.Namespace) -> float:
    """Median training seconds per epoch, first epoch excluded."""
    cfg = {
        **settings,
        "model": "cnn1d",
        "width": width,
        "data": "builtin:mnist1d",
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "inv_update_steps": args.inv_update_steps,
        "threads": args.threads,
        "seed": 100,
    }
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as out:
        warnings.simplefilter("ignore")
        summary = train_mod.train({**cfg, "out": out})
        with open(os.path.join(out, "metrics.jsonl")) as f:
            recs = [json.loads(line) for line in f]
    if summary["diverged"] or len(recs) < args.epochs:
        # a diverged run stops early and would time fewer (and cheaper) epochs
        raise SystemExit(
            f"{settings['optimizer']} diverged at width {width} after {len(recs)} epochs: "
            "its epoch cost would not be comparable; lower its lr in OPTIMIZERS"
        )
    return statistics.median(r["epoch_seconds"] for r in recs[1:])


def _largest_layer(width: int) -> tuple[int, int]:
    """(d_in, d_out) of the CNN's layer with the most weights (bias column included)."""
    layers = HyLo(build_model("cnn1d", width)).layers
    biggest = max(layers, key=lambda ly: ly.d_in * ly.d_out)
    return biggest.d_in, biggest.d_out


def _widths(text: str) -> list[int]:
    try:
        widths = [int(t) for t in text.split(",") if t]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected widths like '25,128', got {text!r}") from e
    if not widths or min(widths) < 1:
        raise argparse.ArgumentTypeError(f"widths must be integers >= 1, got {text!r}")
    return widths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="widths 25,128, 2 rounds")
    ap.add_argument(
        "--smoke", action="store_true", help="widths 8,16, 1 round of 2 epochs (seconds)"
    )
    ap.add_argument("--widths", type=_widths, default=[25, 64, 128, 256, 512])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3, help="per run; the first is not counted")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--inv-update-steps", type=int, default=10, help="HyLo and K-FAC alike")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="write the table as JSON here")
    args = ap.parse_args()
    if args.quick:
        args.widths, args.rounds = [25, 128], 2
    if args.smoke:
        args.widths, args.rounds, args.epochs = [8, 16], 1, 2
    if args.epochs < 2 or args.rounds < 1:
        ap.error("--epochs must be >= 2 (the first is not counted) and --rounds >= 1")
    print(
        f"# MNIST-1D CNN, batch {args.batch_size}, inv_update_steps {args.inv_update_steps}, "
        f"{args.threads} thread(s), {args.rounds} rounds x {args.epochs} epochs"
    )
    print(
        f"{'width':>6}{'largest layer':>14}{'sgd ms':>9}{'kfac ms':>9}{'hylo ms':>9}"
        f"{'kfac/hylo':>11}{'hylo/sgd':>10}{'kfac/sgd':>10}"
    )
    table = []
    for width in args.widths:
        seconds: dict[str, list[float]] = {name: [] for name in OPTIMIZERS}
        for _ in range(args.rounds):
            for name, settings in OPTIMIZERS.items():
                seconds[name].append(_epoch_seconds(width, settings, args))
        med = {name: statistics.median(v) for name, v in seconds.items()}
        d_in, d_out = _largest_layer(width)
        row = {
            "width": width,
            "largest_layer": [d_in, d_out],
            "epoch_seconds": med,
            "kfac_over_hylo": med["kfac"] / med["hylo"],
            "hylo_over_sgd": med["hylo"] / med["sgd"],
            "kfac_over_sgd": med["kfac"] / med["sgd"],
        }
        table.append(row)
        print(
            f"{width:>6}{f'{d_in} x {d_out}':>14}{1e3 * med['sgd']:9.0f}{1e3 * med['kfac']:9.0f}"
            f"{1e3 * med['hylo']:9.0f}{row['kfac_over_hylo']:11.2f}{row['hylo_over_sgd']:10.2f}"
            f"{row['kfac_over_sgd']:10.2f}",
            flush=True,
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"settings": OPTIMIZERS, "args": vars(args), "table": table}, f, indent=1)
    widest = max(table, key=lambda r: r["width"])
    print(f"RESULT kfac_vs_hylo_epoch_seconds {widest['kfac_over_hylo']:.2f}")


if __name__ == "__main__":
    main()

"""Arguments of the ``async-spark hylo`` subcommand, kept next to :func:`~.train.train`.

Usage by the CLI (no torch import happens here, so the command's help stays fast)::

    sub = subparsers.add_parser("hylo", help="HyLo natural gradient on a reference model")
    add_arguments(sub)
    args = parser.parse_args()
    from async_spark.hylo.train import train
    summary = train(config_from_args(args))
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_arguments", "config_from_args"]

_OPTIMIZERS = ("hylo", "kis", "kid", "sngd", "kfac", "smw", "sgd")


def _windows(text: str) -> list[list[int]]:
    """Parse ``"0-10,35-40"`` into ``[[0, 10], [35, 40]]`` (half-open epoch windows)."""
    out = []
    for part in text.split(","):
        try:
            a, b = part.split("-")
            out.append([int(a), int(b)])
        except ValueError as e:
            raise argparse.ArgumentTypeError(
                f"--kid-epochs takes windows like '0-10,35-40', got {text!r}"
            ) from e
    return out


def _epochs(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t]
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"--lr-decay-epochs takes epochs like '30,60', got {text!r}"
        ) from e


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``hylo`` options to ``parser`` (defaults are :class:`~.train.TrainConfig`'s)."""
    p = parser
    p.add_argument("--model", choices=("cnn1d", "resnet32", "unet"), default="cnn1d")
    p.add_argument(
        "--width",
        type=int,
        default=None,
        help="channels of the model, an integer >= 1 (default: the published size: "
        "cnn1d 25, resnet32 16, unet 8)",
    )
    p.add_argument("--data", choices=("builtin:mnist1d", "synthetic"), default="builtin:mnist1d")
    p.add_argument("--optimizer", choices=_OPTIMIZERS, default="hylo")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=128, help="global batch size")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default per optimizer)")
    p.add_argument("--workers", type=int, default=1, help="torch processes on this machine")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--out", default=None, help="directory for summary.json, metrics.jsonl, model.pt"
    )
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--warmup-epochs", type=int, default=0, help="linear learning-rate warm-up")
    p.add_argument("--lr-decay-epochs", type=_epochs, default=[], help="e.g. '30,60'")
    p.add_argument("--lr-decay", type=float, default=0.1)
    p.add_argument("--damping", type=float, default=0.03, help="(start) damping")
    p.add_argument("--damping-target", type=float, default=None, help="geometric decay target")
    p.add_argument("--rank-ratio", type=float, default=0.1, help="rows kept by KIS/KID")
    p.add_argument("--inv-update-steps", type=int, default=10)
    p.add_argument(
        "--fisher-window",
        type=int,
        default=1,
        help="HyLo: kernel over the rows of the last W inverse updates (1 = the paper's)",
    )
    p.add_argument(
        "--factor-decay",
        type=float,
        default=0.0,
        help="kfac: running average of the factors, decay*old + (1-decay)*new (0 = newest only)",
    )
    p.add_argument(
        "--evals-per-epoch",
        type=int,
        default=1,
        help="test evaluations per epoch, an integer >= 1 (clock stopped; the times to an "
        "accuracy resolve 1/k epoch)",
    )
    p.add_argument(
        "--kid-epochs",
        type=_windows,
        default=None,
        help="hybrid: KID epoch windows like '0-10,35-40' (default: automatic switch)",
    )
    p.add_argument("--switch-threshold", type=float, default=0.1)
    p.add_argument("--kl-clip", type=float, default=1e-3)
    p.add_argument("--n-train", type=int, default=1024, help="synthetic training size")
    p.add_argument("--n-test", type=int, default=512, help="synthetic test size")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds for --workers > 1")
    return p


def config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The :func:`~.train.train` configuration (a dict) from parsed arguments."""
    keys = (
        "model width data optimizer epochs batch_size lr workers device seed out momentum "
        "weight_decay warmup_epochs lr_decay_epochs lr_decay damping damping_target rank_ratio "
        "inv_update_steps fisher_window factor_decay evals_per_epoch kid_epochs "
        "switch_threshold kl_clip n_train n_test threads timeout"
    ).split()
    return {k: getattr(args, k) for k in keys}

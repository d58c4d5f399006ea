"""``async-spark hylo``: HyLo natural gradient on a reference model, here or as a Spark stage.

:func:`add_hylo_arguments` adds the training options (defaults are
:class:`async_spark.hylo.train.TrainConfig`'s) and :func:`config_from_args` turns them into the
configuration of :func:`async_spark.hylo.train.train`; :func:`add_spark_hylo_arguments` adds
``--spark`` and the stage's options, and :func:`run_spark_hylo` runs the training on a Spark
barrier stage (``--workers`` ranks) and writes the same ``summary.json``, ``metrics.jsonl`` and
``model.pt`` into ``--out`` (also the entry of ``spark-submit jobs/train_hylo.py``).
No pyspark or torch import happens at parse time, so the command's help stays fast.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import threading
from typing import Any

from async_spark.cli._common import HelpFormatter, add_master_and_conf, spark_session
from async_spark.cli.tracking import finish, log_hylo_run, open_run

__all__ = [
    "add_hylo_arguments",
    "add_spark_hylo_arguments",
    "config_from_args",
    "parse_gpus",
    "run_hylo",
    "run_spark_hylo",
    "spark_hylo_parser",
    "train_hylo",
]

_OPTIMIZERS = ("hylo", "kis", "kid", "sngd", "kfac", "smw", "sgd", "adam")


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


def add_hylo_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``hylo`` training options to ``parser`` (defaults are ``TrainConfig``'s)."""
    p = parser
    p.add_argument(
        "--model",
        choices=("cnn1d", "resnet32", "unet", "autoencoder"),
        default="cnn1d",
        help="reference model (autoencoder: 784-1000-500-250-30 and its mirror, with "
        "--data builtin:digits)",
    )
    p.add_argument(
        "--activation",
        choices=("relu", "sigmoid"),
        default="relu",
        help="autoencoder: hidden units' nonlinearity",
    )
    p.add_argument(
        "--target-loss",
        type=float,
        default=None,
        help="autoencoder: training reconstruction loss whose time is reported",
    )
    p.add_argument(
        "--width",
        type=int,
        default=None,
        help="channels of the model, an integer >= 1 (default: the published size: "
        "cnn1d 25, resnet32 16, unet 8; autoencoder: first hidden layer, 1000)",
    )
    p.add_argument(
        "--data",
        choices=("builtin:mnist1d", "builtin:digits", "synthetic"),
        default="builtin:mnist1d",
        help="dataset (synthetic: random inputs of the model's shape, --n-train/--n-test rows)",
    )
    p.add_argument(
        "--optimizer",
        choices=_OPTIMIZERS,
        default="hylo",
        help="hylo (KID/KIS hybrid), kis, kid, sngd (exact), kfac, smw (ASDL), sgd (none), "
        "adam (none)",
    )
    p.add_argument("--epochs", type=int, default=10, help="training epochs")
    p.add_argument("--batch-size", type=int, default=128, help="global batch size")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default per optimizer)")
    p.add_argument("--workers", type=int, default=1, help="torch processes on this machine")
    p.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="torch device of each process"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the weights, batches and data")
    p.add_argument(
        "--out", default=None, help="directory for summary.json, metrics.jsonl, model.pt"
    )
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    p.add_argument("--weight-decay", type=float, default=5e-4, help="SGD weight decay")
    p.add_argument(
        "--warmup-epochs",
        type=_auto_or(int),
        default="auto",
        help="linear learning-rate warm-up epochs; auto: the model's default (hylo/defaults.py)",
    )
    p.add_argument(
        "--lr-decay-epochs",
        type=_epochs,
        default=[],
        help="epochs at which the learning rate is multiplied by --lr-decay, e.g. '30,60'",
    )
    p.add_argument(
        "--lr-decay", type=float, default=0.1, help="factor of each --lr-decay-epochs step"
    )
    p.add_argument(
        "--damping",
        type=_auto_or(float),
        default="auto",
        help="(start) damping; auto: the model's and optimizer's default (hylo/defaults.py)",
    )
    p.add_argument(
        "--damping-target",
        type=_auto_or(float),
        default="auto",
        help="geometric decay target of the damping; auto: the model's default",
    )
    p.add_argument("--rank-ratio", type=float, default=0.1, help="rows kept by KIS/KID")
    p.add_argument(
        "--inv-update-steps",
        type=int,
        default=10,
        help="steps between inverse updates; the inverses are reused in between",
    )
    p.add_argument(
        "--fisher-window",
        type=_auto_or(int),
        default="auto",
        help="HyLo: kernel over the rows of the last W inverse updates (1 is the paper's); "
        "auto: the model's default",
    )
    p.add_argument(
        "--factor-decay",
        type=float,
        default=0.0,
        help="kfac: running average of the factors, decay*old + (1-decay)*new; 0 keeps the newest",
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
    p.add_argument(
        "--switch-threshold",
        type=float,
        default=0.1,
        help="hybrid: relative gradient-norm change above which a layer uses KID",
    )
    p.add_argument(
        "--kl-clip",
        type=_auto_or(float),
        default="auto",
        help="KL clipping of the preconditioned step; auto: the model's default",
    )
    p.add_argument("--n-train", type=int, default=1024, help="synthetic training size")
    p.add_argument("--n-test", type=int, default=512, help="synthetic test size")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds for --workers > 1")
    return p


def _auto_or(kind: Any) -> Any:
    """An argument type: "auto" (the model's default, hylo/defaults.py) or a ``kind`` value."""

    def parse(text: str) -> Any:
        if text.strip().lower() == "auto":
            return "auto"
        return kind(text)

    parse.__name__ = getattr(kind, "__name__", "value")
    return parse


def config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The :func:`async_spark.hylo.train.train` configuration (a dict) from parsed arguments."""
    keys = (
        "model width data optimizer epochs batch_size lr workers device seed out momentum "
        "weight_decay warmup_epochs lr_decay_epochs lr_decay damping damping_target rank_ratio "
        "inv_update_steps fisher_window factor_decay evals_per_epoch kid_epochs "
        "switch_threshold kl_clip n_train n_test threads timeout activation target_loss"
    ).split()
    return {k: getattr(args, k) for k in keys}


def parse_gpus(text: str) -> float:
    """``--gpus-per-task``: a number > 0 (fractions allowed, whole numbers above 1)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not v > 0 or (v > 1 and v != int(v)):
        raise argparse.ArgumentTypeError(
            f"--gpus-per-task must be a fraction in (0, 1] or a whole number, got {text!r}"
        )
    return v


def add_spark_hylo_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--spark``, ``--launcher``, ``--master``, ``--conf`` and the stage's options."""
    g = parser.add_argument_group("Spark stage (with --spark)")
    g.add_argument(
        "--spark",
        action="store_true",
        help="run the --workers ranks as a Spark barrier stage (GPU executors with --device cuda)",
    )
    g.add_argument(
        "--launcher",
        choices=("barrier", "torchdistributor"),
        default="barrier",
        help="barrier: our barrier stage (ranks read their Spark partitions); "
        "torchdistributor: pyspark.ml.torch's TorchDistributor (torchrun per task)",
    )
    add_master_and_conf(g, remote=True)
    g.add_argument(
        "--gpus-per-task", type=parse_gpus, default=1.0, help="GPUs per rank (stage profile)"
    )
    g.add_argument("--cpus-per-task", type=int, default=1, help="CPUs per rank (stage profile)")
    g.add_argument(
        "--train-parquet",
        default=None,
        metavar="PATH",
        help="train on a Parquet dataset (features: flat numeric list, label) read by Spark",
    )
    g.add_argument("--test-parquet", default=None, metavar="PATH", help="its test set")
    return parser


def spark_hylo_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """The parser of ``spark-submit jobs/train_hylo.py``: the hylo and stage options, --debug."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=HelpFormatter
    )
    add_hylo_arguments(parser)
    add_spark_hylo_arguments(parser)
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def _session_conf(args: argparse.Namespace) -> list[str]:
    conf = list(args.conf or [])
    if getattr(args, "remote", None) or os.environ.get("SPARK_REMOTE"):
        return conf  # a Connect server has its own cluster configuration (not the client's)
    keys = {c.partition("=")[0].strip() for c in conf}
    if "spark.barrier.sync.timeout" not in keys:  # allGather must not wait a year
        conf.append(f"spark.barrier.sync.timeout={int(max(60, args.timeout))}s")
    if "spark.dynamicAllocation.enabled" not in keys:  # barrier stages need it off
        conf.append("spark.dynamicAllocation.enabled=false")
    return conf


def run_spark_hylo(args: argparse.Namespace) -> int:
    """Run the HyLo training of ``args`` on a Spark stage; print the summary as JSON."""
    config = config_from_args(args)
    if args.test_parquet and not args.train_parquet:
        raise ValueError("--test-parquet needs --train-parquet")
    from async_spark.engine.connect import is_connect
    from async_spark.engine.session import ENV_CHECK_MODULES, check_executors
    from async_spark.gpu.data import ShardSource, dataframe_shards
    from async_spark.gpu.hylo_stage import train_hylo_spark

    with spark_session(
        args.master, "async-spark hylo", _session_conf(args), remote=args.remote, connect=True
    ) as spark:
        # The ranks import the project and torch: executors without them fail here, with the fix.
        check_executors(spark, (*ENV_CHECK_MODULES, "torch"))
        source = None
        data: Any = None
        if args.train_parquet:
            source = ShardSource(
                kind="parquet",
                data=args.train_parquet,
                model=args.model,
                seed=args.seed,
                test_path=args.test_parquet,
            )
            config["data"] = "synthetic"  # placeholder for validation; the source decides
            if args.launcher == "barrier" and not is_connect(spark):  # Connect: ranks read it
                df = spark.read.parquet(args.train_parquet)
                data = dataframe_shards(df, args.workers)
        summary = train_hylo_spark(
            config,
            spark,
            launcher=args.launcher,
            source=source,
            data=data,
            gpus_per_task=args.gpus_per_task,
            cpus_per_task=args.cpus_per_task,
        )
    shown = {k: v for k, v in summary.items() if k != "rank_logs"}
    print(json.dumps(shown, indent=2, default=str))
    for _rank, lines in sorted(summary.get("rank_logs", {}).items()):
        for line in lines:
            print(line, file=sys.stderr)
    return 0


def run_hylo(args: argparse.Namespace) -> int:
    """``async-spark hylo``: :func:`train_hylo`, in an MLflow run with ``--mlflow``."""
    run = open_run(args, f"hylo-{args.optimizer}", {"async_spark.command": "hylo"})
    if run is None:
        return train_hylo(args)
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
            code = train_hylo(args)
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


def train_hylo(args: argparse.Namespace) -> int:
    """Train in this process (``--workers`` torch processes) or, with ``--spark``, on a stage."""
    if getattr(args, "spark", False):
        return run_spark_hylo(args)
    from async_spark.hylo.train import train

    summary = train(config_from_args(args))
    print(json.dumps(summary, indent=2, default=str))
    return 0

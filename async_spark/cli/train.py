"""``async-spark train``: its arguments, the run of each method, the table of results.

``async-spark emulate`` (:mod:`async_spark.cli.emulate`) takes the same training flags
(:func:`add_train_arguments`), builds its configurations with :func:`train_configs` and prints
the same table with :func:`print_results`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from async_spark.cli._common import (
    add_spark_arguments,
    check_executors_or_fail,
    log_path,
    parse_float,
    parse_int,
    parse_step,
    quiet_logging,
    spark_session,
)
from async_spark.cli.tracking import finish, open_runs

__all__ = ["add_train_arguments", "print_results", "run_train", "train_configs"]


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``async-spark train`` (shared with ``jobs/train_linear.py``)."""
    p.add_argument(
        "--data",
        default="builtin:synthetic",
        help="LIBSVM or Parquet path, or builtin:synthetic|breast_cancer|digits|mnist1d",
    )
    p.add_argument("--format", default="auto", help="libsvm | parquet | auto")
    p.add_argument(
        "--num-features",
        type=parse_int,
        default=None,
        help="d, an integer >= 1 (default: the largest LIBSVM index, or the vectors' size)",
    )
    p.add_argument(
        "--standardize",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="train on columns scaled to unit variance and centered (sparse data: implicitly, "
        "kept sparse), as pyspark.ml does; model.npz holds the weights for the raw columns "
        "either way",
    )
    p.add_argument(
        "--fit-intercept",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fit an intercept per output, as pyspark.ml's fitIntercept; --no-fit-intercept "
        "fits none (the model passes through the origin) and, with --standardize, scales the "
        "columns without centering them",
    )
    p.add_argument(
        "--penalty-on",
        default="standardized",
        help="standardized | original: with --standardize, penalize the weights of the "
        "standardized columns (as pyspark.ml, glmnet, and scikit-learn after StandardScaler) or "
        "of the original columns (scaling is then a preconditioner only: the minimizer is the "
        "raw problem's, as pyspark.ml's standardization=false)",
    )
    p.add_argument(
        "--step-safeguard",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="halve the step when the losses the tasks measure on their samples rise, and "
        "search an automatic step upward while they clearly fall for it (a synchronous "
        "momentum method's momentum retuned with it; not ahb/aag/aapg), and "
        "halve an automatic SGD or momentum step on plateaus (the summary's step_safeguard "
        "lists each change)",
    )
    p.add_argument(
        "--loss",
        default="auto",
        help="logistic | squares | softmax | auto: logistic for two label values, softmax for 3 "
        "or more integer classes, as pyspark.ml's family='auto' (real-valued labels: give "
        "squares)",
    )
    from async_spark.solvers.config import LINEAR_METHODS

    p.add_argument(
        "--method",
        default="auto",
        help=(
            f"auto | {' | '.join(LINEAR_METHODS)}, or a comma list (e.g. asaga,saga) to run side "
            "by side; auto (default): lbfgs, or asaga with an option only the stochastic methods "
            "take (--step, --step-rule, --batch-fraction, --beta, --tau, --ssp)"
        ),
    )
    p.add_argument(
        "--momentum",
        type=parse_float,
        default=None,
        help=(
            "beta in [0, 1) for hb/ag/apg with an explicit --step (default: from (mu, L) with "
            "an automatic --step)"
        ),
    )
    p.add_argument(
        "--momentum-damping",
        type=parse_float,
        default=None,
        help="c >= 0: asynchronous momentum uses beta / (1 + c * staleness) (default: 1 for ahb "
        "with an automatic step, else 0)",
    )
    p.add_argument(
        "--momentum-restart",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="restart the momentum of synchronous ag/apg with an automatic step when the step "
        "points against it (O'Donoghue & Candes; docs/steps.md)",
    )
    p.add_argument(
        "--block-weights",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="weigh each result of asgd and the asynchronous momentum methods by the inverse of "
        "its block's share of the recent results, so that a fast block does not count more "
        "(docs/steps.md)",
    )
    p.add_argument("--l2", type=parse_float, default=1e-4, help="L2 penalty (l2/2)*||w||^2, >= 0")
    p.add_argument(
        "--l1", type=parse_float, default=0.0, help="L1 penalty l1*||w||_1 on the weights, >= 0"
    )
    p.add_argument(
        "--step", type=parse_step, default="auto", help="step size > 0, or 'auto' from the data"
    )
    p.add_argument(
        "--step-rule",
        default=None,
        help="constant | sqrt | staleness (default: constant for SAGA, and for SGD with --step "
        "auto and the safeguard, which halves it on plateaus; else sqrt for SGD)",
    )
    p.add_argument(
        "--batch-fraction",
        type=parse_float,
        default=None,
        help="b in (0, 1]: fraction of its block a task samples (default: 0.1 for saga/asaga, "
        "1 (the whole block) for the other methods; docs/steps.md)",
    )
    p.add_argument(
        "--partitions",
        type=parse_int,
        default=None,
        help="P >= 1: number of blocks (default: the session's task slots, e.g. 2 on local[2])",
    )
    p.add_argument(
        "--beta",
        type=parse_float,
        default=None,
        help="partial barrier in (0, 1] (async methods; default: none, fully asynchronous)",
    )
    p.add_argument(
        "--tau",
        type=parse_int,
        default=None,
        help="staleness bound, an integer >= 0 (async methods; default: none)",
    )
    p.add_argument(
        "--ssp",
        type=parse_int,
        default=None,
        help="SSP slack, an integer >= 0 (async methods; default: none)",
    )
    p.add_argument(
        "--stragglers", default="none", help="none | intensity:C | cloud | slow-executor:F"
    )
    p.add_argument(
        "--straggler-base",
        type=parse_float,
        default=None,
        help="seconds > 0 that straggler delays are multiples of (default: median task time "
        "of a warm-up)",
    )
    p.add_argument(
        "--seed",
        type=parse_int,
        default=0,
        help="seed of the task samples and straggler delays, an integer >= 0",
    )
    p.add_argument(
        "--max-updates",
        type=parse_int,
        default=None,
        help="stop after this many model updates, an integer >= 1 (default: none)",
    )
    p.add_argument(
        "--time-budget",
        type=parse_float,
        default=None,
        help="seconds of training > 0 (default 20 when no other stop)",
    )
    p.add_argument(
        "--target-objective",
        type=parse_float,
        default=None,
        help="stop when the objective reaches this value, a finite number (default: none)",
    )
    p.add_argument(
        "--tol",
        type=parse_float,
        default=1e-6,
        help="stop once a snapshot's gradient passes the convergence test of pyspark.ml's L-BFGS "
        "(largest gradient entry <= tol x objective, checked on the workers at every snapshot), "
        "a finite number >= 0; 0: no test (default: 1e-6)",
    )
    p.add_argument(
        "--eval-every",
        type=parse_float,
        default=1.0,
        help="seconds > 0 between objective snapshots",
    )
    p.add_argument(
        "--publisher",
        default="broadcast",
        help="broadcast | inline: how model versions travel with --transport jobs",
    )
    p.add_argument(
        "--transport",
        default="resident",
        help="resident | jobs. resident: one Spark job of long-running tasks per run, tickets "
        "over an authenticated socket; jobs: one Spark job per task (falls back to it when "
        "resident tasks cannot start)",
    )
    p.add_argument(
        "--out",
        default=None,
        help="output folder: summary.json, trace.jsonl, model.npz (default: none, nothing written)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=parse_int,
        default=None,
        help="updates between checkpoints, an integer >= 1 (needs --out; default: none)",
    )
    p.add_argument(
        "--checkpoint-seconds",
        type=parse_float,
        default=None,
        help="seconds between checkpoints, > 0 (needs --out; default: none)",
    )
    p.add_argument(
        "--keep-checkpoints",
        type=parse_int,
        default=3,
        help="checkpoints to keep (>= 1); older ones are deleted",
    )
    p.add_argument(
        "--resume",
        default=None,
        metavar="DIR",
        help="continue the run saved in DIR/checkpoints (its configuration; outputs into DIR)",
    )
    p.add_argument(
        "--plot",
        action="store_true",
        help="draw objective.png into --out: the objective of every method against training "
        "seconds and updates (async-spark plot draws more panels)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_spark_arguments(p, remote=True)


def method_names(text: str) -> list[str]:
    """The methods of ``--method`` (a comma list), in order."""
    return [m.strip() for m in text.split(",") if m.strip()]


def train_configs(args: argparse.Namespace) -> list[Any]:
    """One validated ``TrainConfig`` per ``--method`` (each in ``--out/METHOD`` when several).

    Every option is checked by ``TrainConfig.validate`` (its ``ConfigError`` names the flag,
    with the closest choice for a misspelt name); only the command line's own options (the
    method list, ``--plot``) are checked here."""
    from async_spark.solvers.config import (
        LINEAR_METHODS,
        MOMENTUM_METHODS,
        SYNC_METHODS,
        ConfigError,
        TrainConfig,
    )

    methods = method_names(args.method)
    if not methods:
        raise ConfigError("method", f"must name at least one of {', '.join(LINEAR_METHODS)}")
    if getattr(args, "plot", False) and args.out is None and args.resume is None:
        raise ValueError("--plot needs --out DIR (the figure is written there)")
    configs = []
    for method in methods:
        out = args.out
        if out is not None and len(methods) > 1:
            out = str(Path(out) / method)
        cfg = TrainConfig(
            data=args.data,
            format=args.format,
            num_features=args.num_features,
            standardize=args.standardize,
            penalty_on=args.penalty_on,
            fit_intercept=args.fit_intercept,
            step_safeguard=args.step_safeguard,
            loss=args.loss,
            method=method,
            l2=args.l2,
            l1=args.l1,
            step=args.step,
            step_rule=args.step_rule,
            batch_fraction=args.batch_fraction,
            partitions=args.partitions,
            beta=None if method in SYNC_METHODS else args.beta,
            tau=None if method in SYNC_METHODS else args.tau,
            ssp=None if method in SYNC_METHODS else args.ssp,
            momentum=args.momentum if method in MOMENTUM_METHODS else None,
            momentum_damping=args.momentum_damping,
            momentum_restart=args.momentum_restart,
            block_weights=args.block_weights,
            stragglers=args.stragglers,
            straggler_base=args.straggler_base,
            seed=args.seed,
            max_updates=args.max_updates,
            time_budget=args.time_budget,
            target_objective=args.target_objective,
            tol=args.tol,
            eval_every=args.eval_every,
            out=out,
            quiet=args.quiet,
            publisher=args.publisher,
            transport=args.transport,
            checkpoint_every=args.checkpoint_every,
            checkpoint_seconds=args.checkpoint_seconds,
            keep_checkpoints=args.keep_checkpoints,
        )
        if len(methods) == 1:  # flags that do not apply to the method are errors, said clearly
            cfg.beta, cfg.tau, cfg.ssp = args.beta, args.tau, args.ssp
            cfg.momentum = args.momentum
        configs.append(cfg.validate())
    return configs


def _resume_config(args: argparse.Namespace) -> tuple[Any, Any]:
    import dataclasses

    from async_spark.solvers.checkpoint import load_latest
    from async_spark.solvers.config import TrainConfig

    ckpt = load_latest(args.resume)
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    stored = {k: v for k, v in ckpt.config.items() if k in names}
    if stored.get("data") == "arrays":
        raise ValueError(f"{ckpt.path}: a run on in-memory arrays cannot be resumed from the CLI")
    cfg = TrainConfig(**{**stored, "out": args.resume, "quiet": args.quiet})
    return cfg.validate(), ckpt


def _install_stop_handlers(stop: threading.Event, received: list[int]) -> dict[Any, Any]:
    """SIGINT/SIGTERM end the run cleanly (final checkpoint and outputs); a second one aborts."""

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        received.append(signum)
        stop.set()
        name = signal.Signals(signum).name
        print(f"\nstopping after the current update ({name})", file=sys.stderr)

    previous: dict[Any, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    return previous


def predicted_slots(master: str | None) -> int:
    """The task slots (Spark's default parallelism) a master URL promises: ``local[N]`` N,
    ``local[*]`` (and no master: spark-submit's default) the cores, ``local`` 1,
    ``local-cluster[W,C,M]`` max(W·C, 2); any other master 8, corrected once the session runs."""
    spec = master or "local[*]"
    local = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", spec)
    if local:
        n = local.group(1)
        return 1 if n is None else (os.cpu_count() or 1) if n == "*" else max(1, int(n))
    cluster = re.fullmatch(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]", spec)
    if cluster:
        return max(int(cluster.group(1)) * int(cluster.group(2)), 2)
    return 8


def run_train(args: argparse.Namespace) -> int:
    """Open the data once, then run each method on the same session and blocks."""
    from async_spark.solvers.linear import train_linear
    from async_spark.solvers.outputs import write_run

    resume = None
    if args.resume is not None:
        cfg, resume = _resume_config(args)
        configs = [cfg]
    else:
        configs = train_configs(args)
    from async_spark.engine.session import parse_conf_pairs
    from async_spark.solvers.tracking import log_linear_result

    parse_conf_pairs(args.conf)  # a malformed --conf is refused before anything is written

    # MLflow runs are opened first: a missing package or server fails before any data is read.
    tracked = open_runs(
        args, [(c.method, {"async_spark.command": "train", "method": c.method}) for c in configs]
    )
    rows: list[dict[str, Any]] = []
    results: list[Any] = []
    stop = threading.Event()
    received: list[int] = []
    status = "FAILED"
    out = args.resume if args.resume is not None else args.out
    args.log_file = log_path(out, "train")  # main() names it when the run fails
    try:
        # The data is opened (and checked) before Spark starts; without --partitions, P is the
        # task slots the master promises, checked against the session's once it runs.
        slots = predicted_slots(args.master)
        configs = [c if c.partitions else dataclasses.replace(c, partitions=slots) for c in configs]
        first = configs[0]
        dataset = first.open_data()
        if resume is not None:  # refuse a mismatch before Spark starts (P is stored)
            from async_spark.solvers.checkpoint import check_compatible
            from async_spark.solvers.linear import build_model

            check_compatible(resume, dataset[1], build_model(first, dataset[1]).num_params)
        previous = _install_stop_handlers(stop, received)
        try:
            with (
                quiet_logging(args.log_file),
                spark_session(
                    args.master,
                    "async-spark train",
                    args.conf,
                    log_file=args.log_file,
                    remote=args.remote,
                    connect=True,
                ) as spark,
            ):
                check_executors_or_fail(spark)
                if not args.partitions and resume is None:
                    actual = dataclasses.replace(configs[0], partitions=None).for_session(spark)
                    if actual.partitions != first.partitions:  # a master the guess missed
                        configs = [
                            dataclasses.replace(c, partitions=actual.partitions) for c in configs
                        ]
                        dataset = configs[0].open_data()
                for cfg, run in zip(configs, tracked, strict=True):
                    if stop.is_set():
                        break
                    result = train_linear(
                        cfg, spark=spark, dataset=dataset, resume=resume, stop=stop
                    )
                    if cfg.out is not None:
                        write_run(result, cfg.out)
                    rows.append(result.summary())
                    results.append(result)
                    finish(
                        run,
                        functools.partial(log_linear_result, result=result, out_dir=cfg.out),
                        "KILLED" if result.stopped_by == "interrupted" else "FINISHED",
                    )
                status = "KILLED"  # runs never started (stopped by a signal)
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        for run in tracked:
            if run is not None and not run.ended:
                finish(run, None, status)
    print_results(rows, results)
    if getattr(args, "plot", False) and results and all(r.config.out for r in results):
        from async_spark.reporting.plots import plot_objective

        dirs = [r.config.out for r in results]
        where = Path(dirs[0]) if len(dirs) == 1 else Path(dirs[0]).parent
        print(f"figure: {plot_objective(dirs, where / 'objective.png')}")
    if received:
        return 128 + received[0]  # 130 for SIGINT, 143 for SIGTERM
    return 0


def print_results(rows: list[dict[str, Any]], results: list[Any]) -> None:
    """The table of ``rows`` (the runs' summaries) and, for two runs, their common target; a
    run that ended above where it started is named on stderr."""
    _print_table(rows)
    if len(results) == 2:
        _print_common_target(*results)
    for r in results:
        line = worse_than_start(r)
        if line is not None:
            print(line, file=sys.stderr)


def worse_than_start(result: Any) -> str | None:
    """One line when ``result`` ended with an objective above its starting point's (a step too
    large for the data that the safeguard did not bring back), else None: exit 0 alone would
    hide that the model is worse than no training."""
    start, end = result.snapshots[0][2], result.final_objective
    if not end > start:
        return None
    step = result.config.step
    fix = (
        f"a smaller --step than {step:g}, or --step auto"
        if step != "auto"
        else "a smaller --step, or another --method"
    )
    return (
        f"async-spark: {result.config.method} ended above its starting objective ({end:.6g} > "
        f"{start:.6g}): its step is too large for this data; try {fix}"
    )


def method_line(summary: dict[str, Any]) -> str | None:
    """For a run whose method ``auto`` chose: which, why, and how to ask for another."""
    choice = summary.get("method_choice")
    if not choice:
        return None
    return (
        f"method: auto chose {choice['chose']} ({choice['why']}); --method names another, "
        "e.g. asaga for asynchronous updates past stragglers (docs/steps.md, 'The default method')"
    )


def loss_line(summary: dict[str, Any]) -> str | None:
    """For a run whose loss ``auto`` made softmax: integer labels may be a numeric target
    (counts, ratings), which the user must then name."""
    choice = summary.get("loss_choice")
    if not choice or choice["chose"] != "softmax":
        return None
    return (
        f"loss: auto chose softmax for the {summary['num_classes']} integer label values, as "
        "pyspark.ml's family='auto'; for a numeric target give --loss squares"
    )


def optimality_line(summary: dict[str, Any]) -> str | None:
    """How far the run's model is from the optimum, measured rather than guessed: the norm of
    the objective's gradient (with l1: its smallest subgradient) at the start and at the end,
    0 exactly at the optimum. None when the run has no such figures."""
    end, start = summary.get("gradient_norm"), summary.get("gradient_norm_start")
    if end is None or start is None:
        return None
    what = "smallest subgradient" if summary.get("l1") else "gradient"
    fell = f" ({end / start:.2g} of the start's)" if start > 0 else ""
    return (
        f"optimality: {summary['method']}'s {what} norm {start:.3g} at the start, {end:.3g} at the "
        f"end{fell}; 0 at the optimum"
    )


def convergence_hint(summary: dict[str, Any]) -> str | None:
    """One line when the convergence test was on and no snapshot passed it before the run's
    budget ended it: what else to try (None otherwise, and for L-BFGS, which has no faster
    alternative here)."""
    tolerance = summary.get("tolerance")
    if (
        not tolerance
        or tolerance.get("passed") is not None
        or summary.get("stopped_by") not in ("time_budget", "max_updates")
        or summary.get("method") == "lbfgs"
    ):
        return None
    end, start = summary.get("gradient_norm"), summary.get("gradient_norm_start")
    where = f" (gradient at {end / start:.2g} of the start's)" if end and start else ""
    return (
        f"not converged: {summary['method']} ended at its {summary['stopped_by'].replace('_', ' ')}"
        f"{where} before a snapshot passed --tol {tolerance['tol']:g}. With a small --l2 or "
        "sparse standardized columns the stochastic methods need many passes over the data; "
        "--method lbfgs (or ag) converges in far fewer, or give a larger --time-budget "
        "(docs/steps.md, 'When a run does not converge')"
    )


def _stopped_by(summary: dict[str, Any]) -> str:
    """Why the run ended; for the convergence test, with the snapshot that passed it."""
    reason = str(summary.get("stopped_by", "-"))
    passed = (summary.get("tolerance") or {}).get("passed")
    if reason == "tolerance" and passed:
        return f"tol (max |gradient| {passed['gradient_max']:.2g} at {passed['seconds']:.1f} s)"
    return reason.replace("_", " ")


def _print_common_target(a: Any, b: Any) -> None:
    """One sentence: how soon the run that ended lower reached the other's final objective."""
    from async_spark.reporting.plots import Run
    from async_spark.reporting.report import compare

    def run(r: Any) -> Run:
        return Run(Path(r.config.out or "."), r.config.method, r.summary(), r.trace)

    ahead, behind = (a, b) if a.final_objective <= b.final_objective else (b, a)
    print(compare(run(ahead), run(behind)).sentence)


def _print_table(rows: list[dict[str, Any]]) -> None:
    header = f"{'method':7s} {'updates':>8s} {'rejected':>8s} {'seconds':>8s} {'objective':>12s} {'staleness':>9s} {'to target':>9s}  stopped by"
    print(header)
    for r in rows:
        ttt = "-" if r["time_to_target"] is None else f"{r['time_to_target']:.2f}"
        print(
            f"{r['method']:7s} {r['updates']:8d} {r['rejected']:8d} {r['wall_seconds']:8.2f} "
            f"{r['final_objective']:12.6g} {r['mean_staleness']:9.2f} {ttt:>9s}  "
            f"{_stopped_by(r)}"
        )
    if len(rows) == 2 and rows[0]["final_objective"] and rows[1]["final_objective"]:
        a, b = rows
        print(
            f"{a['method']} made {a['updates'] / max(a['wall_seconds'], 1e-9):.1f} updates/s, "
            f"{b['method']} {b['updates'] / max(b['wall_seconds'], 1e-9):.1f} updates/s "
            f"(stragglers: {a['stragglers']})"
        )
    if rows:
        print(objective_line(rows[0]))
    for r in rows:
        for line in (method_line(r), loss_line(r), optimality_line(r), convergence_hint(r)):
            if line is not None:
                print(line)
    summary = {r["method"]: r["final_objective"] for r in rows}
    print("RESULT " + json.dumps(summary))


_LOSS_NAMES = {"logistic": "logistic loss", "softmax": "cross-entropy", "squares": "squared loss"}


def objective_line(summary: dict[str, Any]) -> str:
    """The objective the table's figures are of. A user who scores the model with another tool
    (scikit-learn penalizes the raw columns' weights) must know which columns are penalized:
    on raw data whose scales differ the two optima are far apart."""
    loss = _LOSS_NAMES.get(summary["loss"], summary["loss"])
    classes = summary.get("num_classes")
    terms = [
        f"mean {loss}"
        + (f" over {classes} classes" if summary["loss"] == "softmax" and classes else "")
    ]
    if summary["l2"]:
        terms.append(f"{summary['l2']:g}/2 ||w||^2")
    if summary["l1"]:
        terms.append(f"{summary['l1']:g} ||w||_1")
    text = "objective: " + " + ".join(terms)
    if summary.get("fit_intercept") is False:
        text += " (no intercept)"
    if len(terms) == 1:
        return text
    if summary["standardize"] and summary["penalty_on"] == "standardized":
        return (
            text + ", w the weights of the standardized columns (as pyspark.ml; "
            "--penalty-on original penalizes the raw columns' weights, as scikit-learn)"
        )
    return text + ", w the weights of the raw columns (as scikit-learn)"

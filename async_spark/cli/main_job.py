"""The main job: ASAGA beside SAGA under stragglers on built-in data, and a report a person reads.

``bash scripts/run-main.sh`` (or ``spark-submit jobs/main.py``) runs it:

1. **setup**, timed and kept out of the training clocks: the Spark session; the executors'
   environment check; the data — ``builtin:synthetic`` (rcv1-like sparse logistic regression)
   generated and scanned on the driver, standardized as every run is by default; a warm-up run
   that generates each block once in the Python workers (and the host's block cache), so that
   neither method's clock pays for data generation;
2. **training**: ASAGA, then SAGA, on the same session and blocks, each for ``--time-budget``
   seconds of training, under ASYNC's ``cloud`` straggler model (25% of the blocks sleep 1.5-10x
   ``--straggler-base``); then, for reference, each method of ``--also`` the same way (default
   ``lbfgs``, the method ``async-spark train`` chooses when none is named, so that the report
   shows what a user's default run does on the same data and stragglers); each writes
   ``OUT/METHOD/{summary.json,trace.jsonl,model.npz}``;
3. **off the clock**: a reference optimum F* of the same objective (scipy L-BFGS-B over every
   training row on the driver, cached in ``OUT/reference.json``), the held-out accuracy of each
   saved model, and ``OUT/report.md`` with the figure ``OUT/objective.png`` and the comparison
   sentence, all computed from what the runs wrote (``OUT/report.json`` has the numbers).

**Held-out rows.** ``builtin:synthetic`` is one seeded stream of rows in chunks of 4096, every
chunk drawn from the same teacher ``w_true``; training uses the first ``--rows`` (a multiple of
4096, so the training chunks are exactly those of ``builtin:synthetic?n=ROWS``) and the held-out
set is the next ``--holdout`` rows of the same stream: i.i.d. with the training rows, never
trained on. The saved models (raw-scale weights) are applied to the raw held-out rows.

Spark's log (and the Python workers' stderr) goes to ``OUT/spark.log``, and so do the step
safeguard's changes of step (the report's steps note counts them): the job chooses every
setting itself, so they are no warning a user could act on. ``report.json`` records the job's
options.

**Exit code**: 0 when the report's check holds (the asynchronous run within ``--tolerance`` of
F* and below the synchronous one at the same time); 1 when it does not, with one line on stderr
(``--no-require-check`` exits 0 anyway; the report is written either way) or when the job
fails; 2 for bad options or environment.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

from async_spark.cli._common import (
    HelpFormatter,
    add_master_and_conf,
    log_path,
    parse_float,
    parse_int,
    quiet_logging,
    report_error,
    spark_session,
)

__all__ = ["build_parser", "main", "run_main_job"]

CHUNK = 4096  # async_spark.data.builtin.SYNTHETIC_CHUNK_ROWS
#: The two methods the main job races (not the method table, solvers.methods.METHODS): the
#: asynchronous one first, compared against the other.
COMPARED = ("asaga", "saga")
#: What ``--also`` runs by default: the method of ``async-spark train`` without ``--method``.
ALSO = "lbfgs"


def build_parser(prog: str = "main.py") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="The main job: ASAGA beside SAGA under cloud stragglers on builtin:synthetic,"
        " L-BFGS (--also) for reference, with a report (report.md, objective.png) in --out.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--out", default="runs/main", help="output folder")
    p.add_argument(
        "--rows",
        type=parse_int,
        default=32768,
        help="training rows of builtin:synthetic (a multiple of 4096)",
    )
    p.add_argument(
        "--holdout",
        type=parse_int,
        default=8192,
        help="held-out rows: the next rows of the same seeded stream (a multiple of 4096 that "
        "divides --rows)",
    )
    p.add_argument("--features", type=parse_int, default=1000, help="d: features")
    p.add_argument(
        "--nnz", type=parse_float, default=10.0, help="mean nonzeros per row (sparse rows)"
    )
    p.add_argument("--partitions", type=parse_int, default=8, help="P: number of blocks")
    p.add_argument(
        "--time-budget", type=parse_float, default=20.0, help="training seconds per method"
    )
    p.add_argument(
        "--also",
        default=ALSO,
        metavar="METHOD[,METHOD...]",
        help="further methods run the same way after the two, for reference, each compared with "
        "ASAGA in the report (default: lbfgs, what async-spark train runs when no --method is "
        "named); '' for none",
    )
    p.add_argument("--l2", type=parse_float, default=1e-4, help="L2 penalty (l2/2)*||w||^2")
    p.add_argument(
        "--stragglers", default="cloud", help="none | intensity:C | cloud | slow-executor:F"
    )
    p.add_argument(
        "--straggler-base",
        type=parse_float,
        default=0.1,
        help="seconds that straggler delays are multiples of",
    )
    p.add_argument(
        "--eval-every", type=parse_float, default=0.5, help="seconds between objective snapshots"
    )
    p.add_argument("--seed", type=parse_int, default=0, help="seed of the data and the runs")
    p.add_argument(
        "--tolerance",
        type=parse_float,
        default=1e-2,
        help="relative suboptimality the asynchronous run is checked against",
    )
    p.add_argument(
        "--require-check",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="exit with code 1 when the report's check does not hold (ASAGA within --tolerance"
        " of F* and ahead of SAGA at the same time); --no-require-check exits 0 anyway",
    )
    add_master_and_conf(p)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def also_methods(text: str) -> tuple[str, ...]:
    """The methods of ``--also``, in order: names of the method table, not the two compared,
    none twice ('' is none)."""
    from async_spark.solvers.methods import METHODS

    names = tuple(x.strip() for x in text.split(",") if x.strip())
    for name in names:
        if name not in METHODS:
            raise ValueError(f"--also: unknown method {name!r}; choose from {', '.join(METHODS)}")
        if name in COMPARED:
            raise ValueError(f"--also: {name} is one of the two compared methods already")
    if len(set(names)) != len(names):
        raise ValueError(f"--also names a method twice: {text!r}")
    return names


def _check(args: argparse.Namespace) -> None:
    also_methods(args.also)
    if args.rows < CHUNK or args.rows % CHUNK:
        raise ValueError(f"--rows must be a positive multiple of {CHUNK}, got {args.rows}")
    if args.holdout < CHUNK or args.holdout % CHUNK or args.rows % args.holdout:
        raise ValueError(
            f"--holdout must be a multiple of {CHUNK} that divides --rows ({args.rows}), "
            f"got {args.holdout}"
        )
    if args.features < 2:
        raise ValueError(f"--features must be an integer >= 2, got {args.features}")
    if not 1 <= args.nnz <= args.features:
        raise ValueError(f"--nnz must be in [1, --features], got {args.nnz:g}")
    if not args.time_budget > 0:
        raise ValueError(f"--time-budget must be > 0 seconds, got {args.time_budget:g}")


def _spec(args: argparse.Namespace, rows: int) -> str:
    return f"builtin:synthetic?n={rows}&d={args.features}&nnz={args.nnz:g}&seed={args.seed}"


# The keys whose values a report must not show (Spark's own spark.redaction.regex default).
_SECRET_KEY = re.compile(r"(?i)secret|password|token|access[.]?key")


def _redacted(pair: str) -> str:
    """A ``--conf KEY=VALUE`` as the report shows it: secrets' values replaced."""
    key, sep, _ = pair.partition("=")
    return f"{key}{sep}*********(redacted)" if sep and _SECRET_KEY.search(key) else pair


def _config(args: argparse.Namespace, method: str, **over: Any) -> Any:
    from async_spark.solvers.config import TrainConfig

    values: dict[str, Any] = {
        "data": _spec(args, args.rows),
        "loss": "logistic",
        "method": method,
        "l2": args.l2,
        "partitions": args.partitions,
        "stragglers": args.stragglers,
        "straggler_base": args.straggler_base,
        "seed": args.seed,
        "time_budget": args.time_budget,
        "eval_every": args.eval_every,
        "quiet": args.quiet,
        "out": str(Path(args.out) / method),
    }
    values.update(over)
    return TrainConfig(**values).validate()


def held_out_rows(args: argparse.Namespace) -> tuple[Any, Any]:
    """The ``--holdout`` rows after the training rows of the same seeded stream (raw scale)."""
    from async_spark.data.builtin import synthetic_source

    total = args.rows + args.holdout
    src = synthetic_source(
        total // args.holdout,
        n=total,
        d=args.features,
        density=args.nnz / args.features,
        seed=args.seed,
    )
    block = src.load(src.num_blocks - 1)
    assert block.row_offset == args.rows
    return block.X, block.y


def accuracy(model_npz: Path, X: Any, y: Any) -> float:
    """Accuracy of a saved classifier (raw-scale weights) on ``(X, y)``."""
    from async_spark.models.scoring import HeldOutScores, read_saved_model

    scores = HeldOutScores(read_saved_model(model_npz))
    scores.add(X, y, str(model_npz))
    return float(scores.metrics()["accuracy"])


def task_times(result: Any) -> dict[str, Any]:
    """Measured task times of a run, as its ``summary.json`` has them (``task_seconds``: the
    driver's dispatch-to-result seconds of each block's last 64 successful tasks, straggler sleep
    included), beside the straggler base the delays were multiples of."""
    summary = result.summary()
    measured = summary["task_seconds"]
    return {
        "mean": measured["mean"],
        "p95": measured["p95"],
        "per_block_mean": measured["per_block"],
        "straggler_base": summary["straggler_base_seconds"],
    }


def _also_sentence(also: tuple[str, ...], budget: float) -> str:
    """The intro's words on the ``--also`` runs ('' when there are none)."""
    if not also:
        return ""
    names = ", ".join(f"**{m.upper()}**" for m in also)
    default = (
        f" ({ALSO.upper()} is what `async-spark train` runs when no `--method` is named)"
        if ALSO in also
        else ""
    )
    return (
        f" Then, for reference, {names} the same way, for at most {budget:g} s each"
        f"{default}: each is compared with ASAGA below."
    )


def _steps(method: str, result: Any) -> str:
    """How a run's automatic step went (the step safeguard's search up and lowerings)."""
    from async_spark.solvers.methods import METHODS, LBFGSFamily

    if isinstance(METHODS[method].family, LBFGSFamily):
        return f"{method} takes the unit quasi-Newton step, shortened by its line search"
    guard = result.step_safeguard or {}
    text = f"{method} started at the automatic step {result.step:.3g}"
    if not guard:
        return text
    return (
        text + f", raised {guard.get('raised', 0)} and lowered {guard.get('lowered', 0)} times "
        f"by the step safeguard (lowered when the tasks' sampled objective rose), ending at "
        f"{guard.get('final_step', result.step):.3g}"
    )


def run_main_job(args: argparse.Namespace) -> dict[str, Any]:
    """Setup, both trainings, the report; returns what ``report.json`` holds."""
    from async_spark.models.linear import LinearModel
    from async_spark.reporting.reference import reference_optimum
    from async_spark.reporting.report import write_report
    from async_spark.solvers.linear import train_linear
    from async_spark.solvers.outputs import write_run

    _check(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    setup: dict[str, float] = {}
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))

    t = time.perf_counter()
    methods = COMPARED + also_methods(args.also)
    configs = [_config(args, m) for m in methods]
    dataset = configs[0].open_data()
    source, desc = dataset
    setup["data generation and scan (driver)"] = time.perf_counter() - t
    say(
        f"data: {desc.n} x {desc.d} ({desc.nnz} nonzeros) in {setup['data generation and scan (driver)']:.1f} s"
    )

    t = time.perf_counter()
    with spark_session(
        args.master, "async-spark main job", args.conf, log_path(out, "main")
    ) as spark:
        setup["Spark session"] = time.perf_counter() - t
        from async_spark.engine.session import check_executors

        t = time.perf_counter()
        checked = check_executors(spark)
        what = "executor environment check" + (
            "" if checked is not None else " (skipped: local executors run the driver's Python)"
        )
        setup[what] = time.perf_counter() - t

        t = time.perf_counter()
        warm = _config(
            args,
            "asaga",
            stragglers="none",
            straggler_base=None,
            time_budget=None,
            max_updates=args.partitions,
            out=None,
            quiet=True,
        )
        train_linear(warm, spark=spark, dataset=dataset)
        setup["warm-up (Python workers started, blocks generated in them)"] = (
            time.perf_counter() - t
        )
        say(
            f"setup: {sum(setup.values()):.1f} s; training {', '.join(methods)} "
            f"for {args.time_budget:g} s each"
        )

        results = {}
        outside: dict[str, float] = {}
        for cfg in configs:
            t = time.perf_counter()
            result = train_linear(cfg, spark=spark, dataset=dataset)
            outside[cfg.method] = time.perf_counter() - t - result.wall_seconds
            write_run(result, cfg.out)
            results[cfg.method] = result

    after: dict[str, float] = {}  # off the clock, after training
    t = time.perf_counter()
    model = LinearModel("logistic", desc.d, l2=args.l2)
    ref = reference_optimum(source, model, dataset_id=desc.dataset_id, cache=out / "reference.json")
    after["reference optimum"] = time.perf_counter() - t

    t = time.perf_counter()
    Xh, yh = held_out_rows(args)
    from async_spark.data.builtin import synthetic_source

    train_block = synthetic_source(
        1, n=args.rows, d=args.features, density=args.nnz / args.features, seed=args.seed
    ).load(0)
    acc = {
        m: {
            "held_out": accuracy(out / m / "model.npz", Xh, yh),
            "train": accuracy(out / m / "model.npz", train_block.X, train_block.y),
        }
        for m in methods
    }
    after["accuracy"] = time.perf_counter() - t

    base = args.straggler_base
    options = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    options["conf"] = [_redacted(pair) for pair in options.get("conf") or []]
    intro = [
        f"Logistic regression (l2 = {args.l2:g}, columns standardized) on "
        f"`{_spec(args, args.rows)}`: {desc.n} training rows, {desc.d} features, "
        f"{desc.nnz} nonzeros, in {desc.num_blocks} blocks. "
        f"**ASAGA** (asynchronous: one update per result) beside **SAGA** (synchronous: one "
        f"update per round of {desc.num_blocks} results), each for {args.time_budget:g} s of "
        f"training on the same Spark session (`{results[COMPARED[0]].engine_snapshot.get('policy')}`"
        f" / `sync` policies), under ASYNC's `{args.stragglers}` straggler model with delays in "
        f"multiples of {base:g} s." + _also_sentence(methods[len(COMPARED) :], args.time_budget),
    ]
    notes = [
        f"**Held-out rows**: the {args.holdout} rows after the training rows in "
        "builtin:synthetic's seeded stream (same generator and teacher, never trained on); "
        "accuracy of each saved model (`model.npz`, raw-scale weights) on them, and on the "
        "training rows.",
        "**Times**: each run's clock starts once its tasks are running; objectives are "
        f"evaluated off the clock at snapshots taken every {args.eval_every:g} s, so a time to "
        "reach an objective is the first snapshot at or below it (up to one interval late). "
        "Measured task time (`task_seconds` in summary.json) is the driver-side round trip of "
        "each block's last 64 successful tasks (compute, transport, straggler sleep): the "
        "blocks' means weighted by the tasks dispatched to each, and the largest block p95; the "
        "straggler base beside it is the unit of the delays, not a measurement.",
        "**After training** (not in any time above): "
        + ", ".join(f"{k} {v:.1f} s" for k, v in after.items())
        + "; per run, outside its clock (starting its tasks, choosing the step, evaluating "
        "its snapshots): "
        + ", ".join(f"{m} {v:.1f} s" for m, v in outside.items())
        + f". Spark's log: `{log_path(out, 'main').name}`.",
        "**Steps**: " + "; ".join(_steps(m, r) for m, r in results.items()) + ".",
        "**Options** (also in `report.json`): "
        + ", ".join(f"`{k}={v}`" for k, v in options.items() if k not in ("quiet", "debug"))
        + ".",
    ]
    report = write_report(
        out,
        [out / m for m in methods],
        title="ASAGA beside SAGA under stragglers",
        intro=intro,
        optimum=ref,
        tolerance=args.tolerance,
        accuracy=acc,
        task_seconds={m: task_times(r) for m, r in results.items()},
        setup=setup,
        notes=notes,
        options=options,
    )
    return report


def _no_step_changes(record: Any) -> bool:
    """Console filter: the job chooses every setting itself, so the step safeguard's changes
    (a warning for ``train``, where ``--step`` acts on it) are reported in report.md's steps
    note and in summary.json, and logged to spark.log, not printed."""
    return not record.name.startswith("async_spark.solvers.safeguard")


def main(argv: list[str] | None = None, prog: str = "main.py") -> int:
    args = build_parser(prog).parse_args(argv)
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    console = list(logging.getLogger().handlers)
    for h in console:
        h.addFilter(_no_step_changes)
    try:
        from async_spark.engine.session import parse_conf_pairs

        _check(args)  # bad options are refused before anything is written
        parse_conf_pairs(args.conf)
        with quiet_logging(log_path(args.out, "main")):
            report = run_main_job(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        return report_error(prog, exc, log_path(args.out, "main"))
    finally:
        for h in console:
            h.removeFilter(_no_step_changes)
    out = Path(args.out)
    comparison = report.get("comparison") or {}
    check = report.get("check") or {}
    for row in report["runs"]:
        print(
            f"{row['method']:6s} {row['updates']:7d} updates in {row['training_seconds']:.1f} s, "
            f"objective {row['final_objective']:.6g}, relative suboptimality "
            f"{row['relative_suboptimality']:.2e}, held-out accuracy {row['held_out_accuracy']:.4f}"
        )
    if comparison:
        print(comparison["sentence"])
    for further in report.get("further_comparisons") or []:
        print(further["sentence"])
    if check:
        print(
            f"check: within {check['tolerance']:g} of F*: {check['within_tolerance']}; "
            f"ahead of SAGA at the same time: {check['ahead_at_common_time']}"
        )
    print(f"report: {out / 'report.md'}")
    if check and not check["holds"] and args.require_check:
        print(
            f"{prog}: check failed: {COMPARED[0]} is "
            f"{'within' if check['within_tolerance'] else 'not within'} {check['tolerance']:g} "
            f"of F* and {'ahead of' if check['ahead_at_common_time'] else 'not ahead of'} "
            f"{COMPARED[1]} at the same time (see {out / 'report.md'}; --no-require-check exits"
            " 0 anyway)",
            file=sys.stderr,
        )
        return 1
    return 0

"""The report of runs side by side: the comparison said correctly, and ``report.md``.

Everything here is computed from what the runs wrote (``summary.json`` and ``trace.jsonl``, read
by :func:`async_spark.reporting.plots.load_run`) plus what the caller measured off the clock
(a reference optimum, held-out accuracy, setup times); no sentence of the report is written
before its numbers are.

Times are the runs' wall-clock *training* seconds (the engine's clock starts once the tasks are
running; setup is reported separately). An objective is known only at the snapshots, taken every
``--eval-every`` seconds: "the time a run reached F" is the first snapshot at or below F, so it is
an upper bound, up to one snapshot interval late.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .plots import Run, load_run, plot_objective
from .reference import relative_suboptimality

__all__ = [
    "Comparison",
    "compare",
    "objective_at",
    "time_to_reach",
    "write_report",
]


def time_to_reach(run: Run, target: float) -> float | None:
    """Seconds of the first snapshot with objective <= ``target`` (None if never)."""
    secs, _, objs = run.objective_points()
    return next((s for s, o in zip(secs, objs, strict=True) if o <= target), None)


def objective_at(run: Run, seconds: float) -> float | None:
    """The objective of the last snapshot taken at or before ``seconds``."""
    secs, _, objs = run.objective_points()
    best = None
    for s, o in zip(secs, objs, strict=True):
        if s <= seconds + 1e-9:
            best = o
    return best


def _final(run: Run) -> tuple[float, float]:
    """(training seconds, final objective) of a run."""
    secs, _, objs = run.objective_points()
    wall = float(run.summary.get("wall_seconds", secs[-1] if secs else 0.0))
    final = run.summary.get("final_objective")
    return wall, float(final if final is not None else objs[-1])


@dataclass(frozen=True)
class Comparison:
    """How ``fast`` did against ``slow`` (both runs' own names in ``sentence``)."""

    fast: str
    slow: str
    target: float  # the slow run's final objective
    slow_seconds: float  # when the slow run first reached it
    fast_seconds: float | None  # when the fast run first reached it (None: never)
    speedup: float | None  # slow_seconds / fast_seconds
    common_seconds: float  # the shorter of the two runs
    fast_at_common: float | None  # each run's objective at that time
    slow_at_common: float | None
    ahead: bool  # fast's objective below slow's at the common time
    sentence: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _name(run: Run) -> str:
    return str(run.summary.get("method", run.label)).upper()


def compare(fast: Run, slow: Run) -> Comparison:
    """Time for ``fast`` to reach ``slow``'s final objective, against ``slow``'s own time.

    The sentence says it as a ratio of times ("ASAGA reached SAGA's final objective 2.9x
    sooner"), or says that the fast run did not reach it, or reached it later.
    """
    slow_wall, target = _final(slow)
    slow_t = time_to_reach(slow, target)
    slow_seconds = slow_wall if slow_t is None else slow_t
    fast_t = time_to_reach(fast, target)
    fast_wall, fast_final = _final(fast)
    common = min(fast_wall, slow_wall)
    f_at, s_at = objective_at(fast, common), objective_at(slow, common)
    ahead = f_at is not None and s_at is not None and f_at < s_at
    a, b = _name(fast), _name(slow)
    speedup = None
    if fast_t is None:
        sentence = (
            f"{a} did not reach {b}'s final objective ({target:.6g}, reached in "
            f"{slow_seconds:.1f} s): after {fast_wall:.1f} s it was at {fast_final:.6g}."
        )
    elif fast_t <= 0:
        sentence = f"{a} started at or below {b}'s final objective ({target:.6g})."
    else:
        speedup = slow_seconds / fast_t
        if speedup >= 1:
            how = f"{speedup:.1f}\u00d7 sooner"
        else:
            how = f"{1 / speedup:.1f}\u00d7 later"
        sentence = (
            f"{a} reached {b}'s final objective ({target:.6g}) {how}: in {fast_t:.1f} s "
            f"against {slow_seconds:.1f} s."
        )
    return Comparison(
        fast=a,
        slow=b,
        target=target,
        slow_seconds=slow_seconds,
        fast_seconds=fast_t,
        speedup=speedup,
        common_seconds=common,
        fast_at_common=f_at,
        slow_at_common=s_at,
        ahead=ahead,
        sentence=sentence,
    )


def _fmt(value: Any, spec: str = ".4g") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def write_report(
    out_dir: str | os.PathLike[str],
    run_dirs: Sequence[str | os.PathLike[str]],
    *,
    title: str,
    intro: Sequence[str] = (),
    optimum: Mapping[str, Any] | None = None,
    tolerance: float = 1e-2,
    accuracy: Mapping[str, Mapping[str, float]] | None = None,
    task_seconds: Mapping[str, Mapping[str, Any]] | None = None,
    setup: Mapping[str, float] | None = None,
    notes: Sequence[str] = (),
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``report.md``, the figure it embeds (``objective.png``) and ``report.json``.

    Parameters
    ----------
    out_dir : path
        Where the three files go (the run directories are usually inside it).
    run_dirs : paths
        Runs written by ``train --out``; with two or more, the first is compared against the
        second (:func:`compare`; list the asynchronous run first), which the check is about,
        and each further run (e.g. another method, for reference) against the first.
    title, intro
        The heading and the paragraphs under it (the data, the model, the setting).
    optimum : mapping, optional
        A reference optimum (:func:`~async_spark.reporting.reference.reference_optimum`):
        ``objective`` and how it was computed (``method``, ``gradient_norm``, ``iterations``,
        ``seconds``, ``cached``).
    tolerance : float
        The relative suboptimality the check asks the first run to reach (default 1e-2).
    accuracy : mapping, optional
        ``{method: {"held_out": a, "train": b}}``.
    task_seconds : mapping, optional
        ``{method: {"mean": s, "p95": s, ...}}``: measured task times, shown beside the
        straggler base.
    setup : mapping, optional
        ``{what: seconds}`` spent before training (not in any training time).
    notes : sequence of str
        Further paragraphs at the end (how the held-out rows were chosen, ...).
    options : mapping, optional
        The options the report was made with (a job's command-line options), kept in
        ``report.json`` under ``options`` so that a report says how to make it again.

    Returns
    -------
    dict
        What ``report.json`` holds.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = [load_run(p) for p in run_dirs]
    fstar = None if optimum is None else float(optimum["objective"])
    png = plot_objective(runs, out / "objective.png", optimum=fstar, tolerance=tolerance)
    rows: list[dict[str, Any]] = []
    for run in runs:
        s = run.summary
        method = str(s.get("method", run.label))
        wall, final = _final(run)
        rel = None if fstar is None else relative_suboptimality(final, fstar)
        acc = (accuracy or {}).get(method, {})
        task = (task_seconds or {}).get(method, {})
        rows.append(
            {
                "method": method,
                "updates": s.get("updates"),
                "training_seconds": wall,
                "updates_per_second": (s.get("updates") or 0) / wall if wall > 0 else None,
                "final_objective": final,
                "relative_suboptimality": rel,
                "time_to_tolerance": None
                if fstar is None
                else time_to_reach(run, fstar + tolerance * abs(fstar)),
                "held_out_accuracy": acc.get("held_out"),
                "train_accuracy": acc.get("train"),
                "mean_staleness": s.get("mean_staleness"),
                "max_staleness": s.get("max_staleness"),
                "rejected": s.get("rejected"),
                "measured_task_seconds": task.get("mean"),
                "measured_task_p95_seconds": task.get("p95"),
                "straggler_base_seconds": task.get("straggler_base"),
                "step": s.get("step"),
                "stopped_by": s.get("stopped_by"),
            }
        )
    comparison = compare(runs[0], runs[1]) if len(runs) >= 2 else None
    further = [compare(run, runs[0]) for run in runs[2:]]
    check = None
    if comparison is not None and fstar is not None:
        first = rows[0]
        within = first["relative_suboptimality"] is not None and (
            first["relative_suboptimality"] <= tolerance
        )
        check = {
            "tolerance": tolerance,
            "within_tolerance": within,
            "ahead_at_common_time": comparison.ahead,
            "holds": bool(within and comparison.ahead),
        }
    lines = [f"# {title}", "", *_paragraphs(intro)]
    if comparison is not None:
        lines += [f"**{comparison.sentence}**", ""]
    lines += [c.sentence for c in further] + ([""] if further else [])
    lines += [f"![objective vs time]({png.name})", ""]
    lines += _table(rows, fstar is not None, tolerance)
    if check is not None and comparison is not None:
        first, second = rows[0], rows[1]
        verdict = "holds" if check["holds"] else "does NOT hold"
        lines += [
            f"**Check ({verdict})**: {first['method']}'s final model is "
            f"{'within' if check['within_tolerance'] else 'not within'} {tolerance:g} relative "
            f"suboptimality of the reference optimum "
            f"({_fmt(first['relative_suboptimality'], '.2e')}), and at "
            f"{comparison.common_seconds:.1f} s, where the shorter run ended, its objective "
            f"({_fmt(comparison.fast_at_common, '.6g')}) is "
            f"{'below' if comparison.ahead else 'not below'} {second['method']}'s "
            f"({_fmt(comparison.slow_at_common, '.6g')}).",
            "",
        ]
    if optimum is not None:
        how = optimum.get("method", "")
        lines += [
            f"**Reference optimum** F* = {fstar:.10g}: {how} over every training row, on the "
            f"driver, after training and off the clock"
            + (
                f" ({optimum['iterations']} iterations, gradient norm "
                f"{optimum['gradient_norm']:.1e}, {optimum['seconds']:.1f} s"
                + (", read from the cache" if optimum.get("cached") else "")
                + ")"
                if "iterations" in optimum
                else ""
            )
            + ". Relative suboptimality is (F - F*) / |F*|; F is the objective the runs "
            "minimize (mean logistic loss over the training rows + (l2/2)||w||^2).",
            "",
        ]
    if setup:
        total = sum(setup.values())
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in setup.items())
        lines += [
            f"**Setup** (before the training clocks start, in none of the times above): "
            f"{total:.1f} s — {parts}.",
            "",
        ]
    lines += _paragraphs(notes)
    report = {
        "title": title,
        "runs": rows,
        "comparison": None if comparison is None else comparison.as_dict(),
        "further_comparisons": [c.as_dict() for c in further],
        "check": check,
        "reference_optimum": None if optimum is None else dict(optimum),
        "setup_seconds": dict(setup or {}),
        "figure": png.name,
        "options": dict(options or {}),
    }
    _atomic_text(out / "report.md", "\n".join(lines).rstrip() + "\n")
    _atomic_text(out / "report.json", json.dumps(report, indent=2, default=str) + "\n")
    return report


def _paragraphs(texts: Sequence[str]) -> list[str]:
    out: list[str] = []
    for t in texts:
        out += [t, ""]
    return out


def _table(rows: list[dict[str, Any]], with_reference: bool, tolerance: float) -> list[str]:
    head = ["method", "updates", "training s", "updates/s", "final objective"]
    if with_reference:
        head += ["rel. suboptimality", f"s to {tolerance:g}"]
    head += [
        "held-out accuracy",
        "train accuracy",
        "mean staleness",
        "measured task s (mean / p95)",
        "straggler base s",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            r["method"],
            _fmt(r["updates"]),
            _fmt(r["training_seconds"], ".1f"),
            _fmt(r["updates_per_second"], ".1f"),
            _fmt(r["final_objective"], ".6g"),
        ]
        if with_reference:
            cells += [_fmt(r["relative_suboptimality"], ".2e"), _fmt(r["time_to_tolerance"], ".1f")]
        task = (
            "-"
            if r["measured_task_seconds"] is None
            else f"{r['measured_task_seconds']:.3f} / {_fmt(r['measured_task_p95_seconds'], '.3f')}"
        )
        cells += [
            _fmt(r["held_out_accuracy"], ".4f"),
            _fmt(r["train_accuracy"], ".4f"),
            _fmt(r["mean_staleness"], ".2f"),
            task,
            _fmt(r["straggler_base_seconds"], ".3g"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

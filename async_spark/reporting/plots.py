"""Figures of training runs (the drawing behind ``async-spark plot``, :mod:`async_spark.cli.plot`).

A run directory is what ``async-spark train --out DIR`` writes (:func:`async_spark.solvers.write_run`):
``summary.json`` (method, updates, wall seconds, staleness histogram, ...) and ``trace.jsonl`` (one
record per update: ``seconds``, ``version``, ``staleness``, ``block`` (None for synchronous
rounds), ``objective`` (set at evaluated snapshots, else null), ``accepted`` (false for rejected
results)). :func:`plot_runs` draws four panels for any number of runs:

1. objective vs wall-clock seconds (the snapshots' objectives; log scale when all are positive);
2. objective vs model updates (version);
3. staleness histogram of the accepted results (from ``summary.json``);
4. per-block time between consecutive results of the same block (from the trace): for an
   asynchronous run each block has one task in flight, so this is the block's task round trip
   (compute + scheduling + any straggler delay); synchronous runs record no block per update and
   are left out of this panel.

:func:`plot_objective` draws the figure of ``async-spark train --plot`` and of the main job's
report: the objective against wall-clock seconds for each run and, when the minimum of the
objective is known (a reference optimum, :mod:`async_spark.reporting.reference`), the relative
suboptimality :math:`(F - F^*)/|F^*|` on a log scale; without it, the objective against model
updates.

Matplotlib runs with the Agg backend (no display needed). The benchmarks can call
:func:`plot_runs` or :func:`draw_runs` (on their own axes) for their figures.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "PlotError",
    "Run",
    "block_intervals",
    "draw_runs",
    "load_run",
    "plot_objective",
    "plot_runs",
    "require_matplotlib",
    "staleness_counts",
]


class PlotError(ValueError):
    """A run directory that cannot be plotted (the message names the file)."""


@dataclass
class Run:
    """One run directory, read."""

    path: Path
    label: str
    summary: dict[str, Any]
    trace: list[dict[str, Any]] = field(default_factory=list)

    def objective_points(self) -> tuple[list[float], list[int], list[float]]:
        """(seconds, versions, objectives) of the accepted records with an objective."""
        pts = [
            (float(r["seconds"]), int(r["version"]), float(r["objective"]))
            for r in self.trace
            if r.get("objective") is not None and r.get("accepted", True)
        ]
        pts.sort()
        return [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts]


def load_run(path: str | os.PathLike[str], label: str | None = None) -> Run:
    """Read ``summary.json`` and ``trace.jsonl`` of a run directory.

    Raises
    ------
    PlotError
        Missing or malformed files (naming the file and, for the trace, the line).
    """
    root = Path(path)
    if not root.is_dir():
        raise PlotError(f"{root}: not a run directory (expected summary.json and trace.jsonl)")
    summary_path = root / "summary.json"
    try:
        summary = json.loads(summary_path.read_text())
    except FileNotFoundError:
        raise PlotError(
            f"{summary_path}: missing (write runs with async-spark train --out DIR)"
        ) from None
    except json.JSONDecodeError as exc:
        raise PlotError(
            f"{summary_path}: not valid JSON ({exc.msg} at line {exc.lineno})"
        ) from None
    if not isinstance(summary, dict):
        raise PlotError(f"{summary_path}: expected a JSON object")
    trace_path = root / "trace.jsonl"
    trace: list[dict[str, Any]] = []
    try:
        with trace_path.open() as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise PlotError(
                        f"{trace_path} line {lineno}: not valid JSON ({exc.msg})"
                    ) from None
                if not isinstance(rec, dict) or "seconds" not in rec or "version" not in rec:
                    raise PlotError(
                        f"{trace_path} line {lineno}: expected a record with seconds and version"
                    )
                trace.append(rec)
    except FileNotFoundError:
        raise PlotError(
            f"{trace_path}: missing (write runs with async-spark train --out DIR)"
        ) from None
    if label is None:
        method = summary.get("method", "?")
        label = method if root.name == method else f"{method} ({root.name})"
    return Run(root, label, summary, trace)


def staleness_counts(summary: dict[str, Any]) -> dict[int, int]:
    """``staleness_histogram`` of a summary as ``{staleness: count}``, whether it is written as an
    object (``{"0": 3, "10": 1}``) or as an ordered list of ``[staleness, count]`` pairs."""
    hist = summary.get("staleness_histogram") or {}
    pairs = hist.items() if isinstance(hist, dict) else hist
    try:
        return dict(sorted((int(k), int(v)) for k, v in pairs))
    except (TypeError, ValueError):
        raise PlotError(
            "staleness_histogram: expected an object or a list of [staleness, count] pairs"
        ) from None


def block_intervals(run: Run) -> dict[int, list[float]]:
    """Per block, the seconds between consecutive accepted-or-rejected results of that block."""
    by_block: dict[int, list[float]] = {}
    for rec in run.trace:
        b = rec.get("block")
        if b is None:
            continue
        by_block.setdefault(int(b), []).append(float(rec["seconds"]))
    return {
        b: [t2 - t1 for t1, t2 in zip(ts, ts[1:], strict=False)]
        for b, ts in sorted(by_block.items())
        if len(ts) > 1
    }


def _unique_labels(runs: Sequence[Run]) -> None:
    seen: dict[str, int] = {}
    for r in runs:
        seen[r.label] = seen.get(r.label, 0) + 1
    if any(c > 1 for c in seen.values()):
        for r in runs:
            if seen[r.label] > 1:
                r.label = f"{r.label} [{r.path}]"


def draw_runs(runs: Sequence[Run], axes: Sequence[Any]) -> None:
    """Draw the four panels (see the module docstring) on ``axes`` (four matplotlib Axes)."""
    ax_time, ax_upd, ax_stale, ax_block = axes
    colors = [f"C{i % 10}" for i in range(len(runs))]
    all_obj: list[float] = []
    for run, color in zip(runs, colors, strict=True):
        secs, vers, objs = run.objective_points()
        all_obj += objs
        style = {"color": color, "marker": "o", "markersize": 3, "linewidth": 1.5}
        ax_time.plot(secs, objs, label=run.label, **style)
        ax_upd.plot(vers, objs, label=run.label, **style)
    if all_obj and min(all_obj) > 0 and max(all_obj) / min(all_obj) > 1.5:
        ax_time.set_yscale("log")
        ax_upd.set_yscale("log")
    ax_time.set(xlabel="wall-clock seconds", ylabel="objective", title="Objective vs time")
    ax_upd.set(xlabel="model updates (version)", ylabel="objective", title="Objective vs updates")
    for ax in (ax_time, ax_upd):
        ax.grid(True, alpha=0.3)
        if runs:
            ax.legend(fontsize=8)

    # Staleness histograms, side by side.
    width = 0.8 / max(1, len(runs))
    any_stale = False
    for i, (run, color) in enumerate(zip(runs, colors, strict=True)):
        hist = staleness_counts(run.summary)
        if not hist:
            continue
        any_stale = True
        total = sum(hist.values())
        ks = sorted(hist)
        ax_stale.bar(
            [k - 0.4 + width * (i + 0.5) for k in ks],
            [hist[k] / total for k in ks],
            width=width,
            color=color,
            label=f"{run.label} (mean {run.summary.get('mean_staleness', 0.0):.2f})",
        )
    ax_stale.set(
        xlabel="staleness (versions applied since dispatch)",
        ylabel="fraction of accepted results",
        title="Staleness",
    )
    if any_stale:
        ax_stale.legend(fontsize=8)
    else:
        ax_stale.text(0.5, 0.5, "no staleness histogram", ha="center", transform=ax_stale.transAxes)
    ax_stale.grid(True, axis="y", alpha=0.3)
    from matplotlib.ticker import MaxNLocator

    ax_stale.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_block.xaxis.set_major_locator(MaxNLocator(integer=True))

    # Per-block time between results (mean with p10-p90 whiskers).
    per_run = [(run, color, block_intervals(run)) for run, color in zip(runs, colors, strict=True)]
    per_run = [x for x in per_run if x[2]]
    width = 0.8 / max(1, len(per_run))
    for i, (run, color, iv) in enumerate(per_run):
        blocks = sorted(iv)
        means = [sum(iv[b]) / len(iv[b]) for b in blocks]
        lo = [m - _quantile(iv[b], 0.1) for b, m in zip(blocks, means, strict=True)]
        hi = [_quantile(iv[b], 0.9) - m for b, m in zip(blocks, means, strict=True)]
        ax_block.bar(
            [b - 0.4 + width * (i + 0.5) for b in blocks],
            means,
            width=width,
            color=color,
            yerr=[[max(v, 0.0) for v in lo], [max(v, 0.0) for v in hi]],
            capsize=2,
            label=run.label,
        )
    ax_block.set(
        xlabel="block",
        ylabel="seconds between results (mean, p10-p90)",
        title="Per-block task round trip",
    )
    if per_run:
        ax_block.legend(fontsize=8)
    else:
        ax_block.text(
            0.5,
            0.5,
            "no per-block records\n(synchronous runs)",
            ha="center",
            va="center",
            transform=ax_block.transAxes,
        )
    ax_block.grid(True, axis="y", alpha=0.3)


def _quantile(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return math.nan
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def plot_runs(
    run_dirs: Sequence[str | os.PathLike[str]],
    out_png: str | os.PathLike[str],
    *,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    dpi: int = 120,
) -> Path:
    """Plot several runs into one PNG (four panels) and return its path.

    Parameters
    ----------
    run_dirs : sequence of paths
        Directories written by ``async-spark train --out DIR``.
    out_png : path
        Output file (parent folders are created); written atomically.
    labels : sequence of str, optional
        Legend labels (default: the method, and the directory name when it differs).
    title : str, optional
        Figure title (default: the dataset and the runs' straggler model).
    """
    if not run_dirs:
        raise PlotError("give at least one run directory")
    if labels is not None and len(labels) != len(run_dirs):
        raise PlotError(f"labels: {len(labels)} labels for {len(run_dirs)} run directories")
    runs = [load_run(p, None if labels is None else labels[i]) for i, p in enumerate(run_dirs)]
    _unique_labels(runs)

    # A bare Figure draws without pyplot, so a notebook's backend is left as it is.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 8.5), constrained_layout=True)
    axes = fig.subplots(2, 2).ravel()
    draw_runs(runs, axes)
    fig.suptitle(_default_title(runs) if title is None else title)
    return _save(fig, out_png, dpi)


def require_matplotlib(what: str) -> None:
    """An ImportError saying that ``what`` needs matplotlib, and how to install it, when it is
    not installed (so that no package but this one imports matplotlib)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ImportError(f"{what} needs matplotlib: pip install 'async_spark[data]'") from None


def _save(fig: Any, out_png: str | os.PathLike[str], dpi: int) -> Path:
    """Write ``fig`` as a PNG atomically (parent folders created)."""
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        fig.savefig(tmp, dpi=dpi, format="png")
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out


def _default_title(runs: Sequence[Run]) -> str:
    first = runs[0].summary
    return (
        f"{first.get('loss', '')} on {first.get('data', '?')} "
        f"(n={first.get('n', '?')}, d={first.get('d', '?')}, "
        f"P={first.get('partitions', '?')}, stragglers: {first.get('stragglers', 'none')})"
    )


def plot_objective(
    runs: Sequence[str | os.PathLike[str] | Run],
    out_png: str | os.PathLike[str],
    *,
    optimum: float | None = None,
    tolerance: float | None = 1e-2,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    dpi: int = 120,
) -> Path:
    """The objective-vs-time figure of ``async-spark train --plot`` and of the main job's report.

    Left: the objective of each run's snapshots against wall-clock training seconds (the
    snapshots are taken every ``--eval-every`` seconds and evaluated off the clock), with
    :math:`F^*` dashed when given. Right: with ``optimum``, the relative suboptimality
    :math:`(F - F^*)/|F^*|` on a log scale with ``tolerance`` dotted; without it, the objective
    against model updates.

    Parameters
    ----------
    runs : run directories (``train --out``) or :class:`Run` objects
    out_png : path
        Written atomically; parent folders are created.
    optimum : float, optional
        :math:`F^*`, the reference minimum of the runs' objective
        (:func:`async_spark.reporting.reference.reference_optimum`).
    tolerance : float, optional
        A relative suboptimality to mark (default 1e-2); None marks none.
    labels, title
        Legend labels (default: each run's method) and the figure title (default: the data).
    """
    if not runs:
        raise PlotError("give at least one run directory")
    if labels is not None and len(labels) != len(runs):
        raise PlotError(f"labels: {len(labels)} labels for {len(runs)} runs")
    loaded = [
        r if isinstance(r, Run) else load_run(r, None if labels is None else labels[i])
        for i, r in enumerate(runs)
    ]
    _unique_labels(loaded)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.8), constrained_layout=True)
    ax_obj, ax_right = fig.subplots(1, 2)
    for i, run in enumerate(loaded):
        secs, vers, objs = run.objective_points()
        style = {"color": f"C{i % 10}", "marker": "o", "markersize": 2.5, "linewidth": 1.5}
        ax_obj.plot(secs, objs, label=run.label, **style)
        if optimum is None:
            ax_right.plot(vers, objs, label=run.label, **style)
            continue
        gaps = [(o - optimum) / abs(optimum) if optimum else o - optimum for o in objs]
        pts = [(s, g) for s, g in zip(secs, gaps, strict=True) if g > 0]
        ax_right.plot([p[0] for p in pts], [p[1] for p in pts], label=run.label, **style)
    if optimum is not None:
        ax_obj.axhline(optimum, color="0.3", linestyle="--", linewidth=1, label="F* (reference)")
        ax_right.set_yscale("log")
        if tolerance is not None:
            ax_right.axhline(
                tolerance, color="0.3", linestyle=":", linewidth=1, label=f"{tolerance:g}"
            )
        ax_right.set(
            xlabel="wall-clock training seconds",
            ylabel="relative suboptimality (F - F*) / |F*|",
            title="Relative suboptimality vs time",
        )
    else:
        ax_right.set(
            xlabel="model updates (version)", ylabel="objective", title="Objective vs updates"
        )
    ax_obj.set(xlabel="wall-clock training seconds", ylabel="objective", title="Objective vs time")
    for ax in (ax_obj, ax_right):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(_default_title(loaded) if title is None else title)
    return _save(fig, out_png, dpi)

"""async_spark.reporting.plots: PNGs from real run directories (async-spark train --out) and synthetic ones."""

from __future__ import annotations

import argparse
import json

import pytest

pytest.importorskip("matplotlib")

from async_spark.cli.plot import add_plot_arguments, run_plot  # noqa: E402
from async_spark.reporting.plots import (  # noqa: E402
    PlotError,
    block_intervals,
    load_run,
    plot_runs,
)


def _png_ok(path, min_bytes=20_000):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > min_bytes  # four panels with lines and bars, not an empty canvas
    import matplotlib.image as mpimg
    import numpy as np

    img = mpimg.imread(path)
    assert img.shape[0] > 500 and img.shape[1] > 800
    assert np.unique(img.reshape(-1, img.shape[-1]), axis=0).shape[0] > 50  # many colours


def _write_run(root, method, *, asynchronous, updates=40, seed=0):
    import random

    rnd = random.Random(seed)
    root.mkdir(parents=True)
    trace, t, obj = [], 0.0, 0.69
    hist: dict[str, int] = {}
    trace.append({"seconds": 0.0, "version": 0, "staleness": 0, "block": None, "objective": obj})
    for v in range(1, updates + 1):
        t += rnd.uniform(0.05, 0.2)
        s = rnd.randint(0, 4) if asynchronous else 0
        hist[str(s)] = hist.get(str(s), 0) + 1
        obj *= 0.97
        trace.append(
            {
                "seconds": round(t, 6),
                "version": v,
                "staleness": s,
                "block": (v % 4) if asynchronous else None,
                "objective": obj if v % 5 == 0 else None,
            }
        )
    summary = {
        "method": method,
        "loss": "logistic",
        "data": "synthetic",
        "n": 100,
        "d": 5,
        "partitions": 4,
        "stragglers": "none",
        "staleness_histogram": hist,
        "mean_staleness": 1.0,
        "updates": updates,
    }
    (root / "summary.json").write_text(json.dumps(summary))
    (root / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in trace))
    return root


def test_plot_synthetic_runs_and_cli_arguments(tmp_path, capsys):
    a = _write_run(tmp_path / "asaga", "asaga", asynchronous=True)
    b = _write_run(tmp_path / "saga", "saga", asynchronous=False, seed=1)
    run = load_run(a)
    secs, vers, objs = run.objective_points()
    assert vers == [0, 5, 10, 15, 20, 25, 30, 35, 40] and objs == sorted(objs, reverse=True)
    assert sorted(block_intervals(run)) == [0, 1, 2, 3]
    assert block_intervals(load_run(b)) == {}
    out = plot_runs([a, b], tmp_path / "figs" / "runs.png")
    _png_ok(out)

    parser = argparse.ArgumentParser()
    add_plot_arguments(parser)
    args = parser.parse_args([str(a), str(b), "--label", "async", "--label", "sync"])
    assert run_plot(args) == 0
    assert (tmp_path / "runs.png").is_file()  # default: beside the first run directory
    assert capsys.readouterr().out.strip().endswith("runs.png")


def test_plot_errors_name_the_file(tmp_path):
    with pytest.raises(PlotError, match="not a run directory"):
        plot_runs([tmp_path / "nope"], tmp_path / "x.png")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PlotError, match="summary.json: missing"):
        load_run(empty)
    (empty / "summary.json").write_text("{}")
    (empty / "trace.jsonl").write_text('{"seconds": 0, "version": 0}\nnot json\n')
    with pytest.raises(PlotError, match="trace.jsonl line 2: not valid JSON"):
        load_run(empty)
    with pytest.raises(PlotError, match="at least one run directory"):
        plot_runs([], tmp_path / "x.png")
    with pytest.raises(PlotError, match="2 labels for 1 run"):
        plot_runs([tmp_path / "nope"], tmp_path / "x.png", labels=["a", "b"])


@pytest.mark.spark
def test_plot_real_run_directories(spark, tmp_path):
    """Two small runs of async-spark train (in-process, on the shared session)."""
    from async_spark.cli import main

    code = main(
        [
            "train",
            "--data",
            "builtin:breast_cancer",
            "--standardize",
            "--method",
            "asaga,saga",
            "--partitions",
            "4",
            "--batch-fraction",
            "0.25",
            "--step",
            "0.1",
            "--max-updates",
            "12",
            "--eval-every",
            "0.2",
            "--out",
            str(tmp_path / "runs"),
            "--quiet",
        ]
    )
    assert code == 0
    dirs = [tmp_path / "runs" / m for m in ("asaga", "saga")]
    for d in dirs:
        assert (d / "summary.json").is_file() and (d / "trace.jsonl").is_file()
    assert block_intervals(load_run(dirs[0]))  # asynchronous: per-block records
    out = plot_runs(dirs, tmp_path / "runs.png")
    _png_ok(out)

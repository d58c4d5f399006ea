"""async_spark.reporting.report and .reference: the comparison sentence is computed from the
runs' files and says the right thing (sooner, later, never); the reference optimum is the
minimum of the runs' objective; the figure and report.md are written; the main job's held-out
rows are the next rows of the seeded stream, not training rows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from async_spark.reporting.plots import Run, staleness_counts
from async_spark.reporting.report import compare, objective_at, time_to_reach, write_report


def _run(method, points, wall=None, **summary):
    """A Run whose snapshots are ``points`` = [(seconds, objective), ...]."""
    trace = [
        {"seconds": s, "version": i, "staleness": 0, "block": None, "objective": o}
        for i, (s, o) in enumerate(points)
    ]
    s = {"method": method, "wall_seconds": wall or points[-1][0], "final_objective": points[-1][1]}
    s.update(summary)
    from pathlib import Path

    return Run(Path(method), method, s, trace)


def _write(root, run):
    root.mkdir(parents=True)
    (root / "summary.json").write_text(json.dumps(run.summary))
    (root / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in run.trace))
    return root


FAST = [(0.0, 0.69), (1.0, 0.50), (2.0, 0.40), (3.0, 0.36), (10.0, 0.354)]
SLOW = [(0.0, 0.69), (2.0, 0.60), (6.0, 0.45), (10.0, 0.40)]


def test_the_sentence_is_the_ratio_of_times_to_the_slow_runs_final_objective():
    c = compare(_run("asaga", FAST), _run("saga", SLOW))
    assert c.target == 0.40 and c.slow_seconds == 10.0 and c.fast_seconds == 2.0
    assert c.speedup == pytest.approx(5.0)
    assert c.sentence == (
        "ASAGA reached SAGA's final objective (0.4) 5.0\u00d7 sooner: in 2.0 s against 10.0 s."
    )
    assert c.ahead and c.fast_at_common == 0.354 and c.slow_at_common == 0.40


def test_a_slower_run_is_said_to_be_later_and_one_that_never_gets_there_says_so():
    later = compare(
        _run("asaga", [(0.0, 0.69), (8.0, 0.5), (9.0, 0.39)]),
        _run("saga", [(0, 0.69), (3.0, 0.40)]),
    )
    assert later.speedup == pytest.approx(3.0 / 9.0)
    assert "3.0\u00d7 later" in later.sentence and "sooner" not in later.sentence
    never = compare(_run("asaga", [(0.0, 0.69), (5.0, 0.5)]), _run("saga", SLOW))
    assert never.fast_seconds is None and never.speedup is None
    assert never.common_seconds == 5.0 and never.ahead  # at 5 s: 0.5 against SAGA's 0.6
    assert never.sentence.startswith("ASAGA did not reach SAGA's final objective (0.4")


def test_times_are_first_snapshots_at_or_below_and_objectives_step_functions():
    run = _run("asaga", FAST)
    assert time_to_reach(run, 0.45) == 2.0 and time_to_reach(run, 0.1) is None
    assert objective_at(run, 2.5) == 0.40 and objective_at(run, 0.0) == 0.69


def test_staleness_histograms_read_as_objects_or_ordered_pairs():
    as_object = {"staleness_histogram": {"10": 1, "2": 5, "0": 3}}
    as_pairs = {"staleness_histogram": [[0, 3], [2, 5], [10, 1]]}
    assert staleness_counts(as_object) == staleness_counts(as_pairs) == {0: 3, 2: 5, 10: 1}
    assert list(staleness_counts(as_object)) == [0, 2, 10]


def test_the_reference_optimum_is_the_minimum_of_the_objective(tmp_path):
    from async_spark.data.dataset import open_dataset
    from async_spark.models.linear import LinearModel, full_gradient, objective
    from async_spark.reporting.reference import reference_optimum, relative_suboptimality

    source, desc = open_dataset("builtin:synthetic?n=600&d=30&nnz=5", 3, loss="logistic")
    model = LinearModel("logistic", desc.d, l2=1e-3)
    cache = tmp_path / "ref.json"
    ref = reference_optimum(source, model, dataset_id=desc.dataset_id, cache=cache)
    blocks = [source.load(i) for i in range(source.num_blocks)]
    assert ref["converged"] and ref["gradient_norm"] < 1e-7 and not ref["cached"]
    # Any other point is worse; a step along the negative gradient from a perturbed point too.
    rng = np.random.default_rng(0)
    for _ in range(3):
        theta = rng.standard_normal(model.num_params) * 0.1
        assert objective(model, theta, blocks) > ref.objective
        assert np.linalg.norm(full_gradient(model, theta, blocks)) > 1e-3
    again = reference_optimum(source, model, dataset_id=desc.dataset_id, cache=cache)
    assert again["cached"] and again.objective == ref.objective
    other = reference_optimum(
        source, LinearModel("logistic", desc.d, l2=1e-2), dataset_id=desc.dataset_id, cache=cache
    )
    assert not other["cached"] and other.objective > ref.objective  # a larger penalty
    assert relative_suboptimality(1.01 * ref.objective, ref.objective) == pytest.approx(0.01)


def test_write_report_embeds_the_figure_and_checks_the_claim(tmp_path):
    pytest.importorskip("matplotlib")
    fast = _write(tmp_path / "asaga", _run("asaga", FAST, updates=900, mean_staleness=7.0))
    slow = _write(tmp_path / "saga", _run("saga", SLOW, updates=30, mean_staleness=0.0))
    report = write_report(
        tmp_path,
        [fast, slow],
        title="T",
        optimum={
            "objective": 0.353,
            "method": "exact",
            "iterations": 3,
            "gradient_norm": 1e-9,
            "seconds": 0.1,
        },
        accuracy={
            "asaga": {"held_out": 0.8, "train": 0.82},
            "saga": {"held_out": 0.7, "train": 0.71},
        },
        task_seconds={"asaga": {"mean": 0.01, "p95": 0.5, "straggler_base": 0.1}},
        setup={"Spark session": 3.0, "warm-up": 2.0},
    )
    md = (tmp_path / "report.md").read_text()
    png = (tmp_path / "objective.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    assert "![objective vs time](objective.png)" in md
    assert "**ASAGA reached SAGA's final objective (0.4) 5.0\u00d7 sooner" in md
    assert "**Check (holds)**" in md and "**Setup**" in md and "5.0 s" in md
    rows = {r["method"]: r for r in report["runs"]}
    assert rows["asaga"]["relative_suboptimality"] == pytest.approx((0.354 - 0.353) / 0.353)
    assert rows["asaga"]["time_to_tolerance"] == 10.0  # 0.36 at 3 s is above 1.01 * 0.353
    assert report["check"] == {
        "tolerance": 0.01,
        "within_tolerance": True,
        "ahead_at_common_time": True,
        "holds": True,
    }
    assert json.loads((tmp_path / "report.json").read_text())["comparison"]["speedup"] == 5.0


def test_a_claim_that_fails_is_reported_as_failing(tmp_path):
    pytest.importorskip("matplotlib")
    fast = _write(tmp_path / "asaga", _run("asaga", [(0.0, 0.69), (10.0, 0.45)]))
    slow = _write(tmp_path / "saga", _run("saga", SLOW))
    report = write_report(tmp_path, [fast, slow], title="T", optimum={"objective": 0.353})
    md = (tmp_path / "report.md").read_text()
    assert report["check"]["holds"] is False and "**Check (does NOT hold)**" in md
    assert "did not reach SAGA's final objective" in md


def test_a_further_run_is_compared_with_the_first_and_the_check_stays_on_the_two(tmp_path):
    pytest.importorskip("matplotlib")
    fast = _write(tmp_path / "asaga", _run("asaga", FAST))
    slow = _write(tmp_path / "saga", _run("saga", SLOW))
    ref = [(0.0, 0.69), (1.0, 0.40), (2.0, 0.3531)]  # reaches ASAGA's 0.354 at 2 s of its 10
    other = _write(tmp_path / "lbfgs", _run("lbfgs", ref))
    report = write_report(tmp_path, [fast, slow, other], title="T", optimum={"objective": 0.353})
    md = (tmp_path / "report.md").read_text()
    assert [r["method"] for r in report["runs"]] == ["asaga", "saga", "lbfgs"]
    assert report["comparison"]["fast"] == "ASAGA" and report["comparison"]["slow"] == "SAGA"
    (further,) = report["further_comparisons"]
    assert (further["fast"], further["slow"], further["speedup"]) == ("LBFGS", "ASAGA", 5.0)
    sentence = "LBFGS reached ASAGA's final objective (0.354) 5.0\u00d7 sooner: in 2.0 s"
    assert f"\n{sentence}" in md and f"**{sentence}" not in md
    assert md.index("**ASAGA reached SAGA") < md.index(sentence) < md.index("![objective")
    assert report["check"]["holds"] is True  # about ASAGA and SAGA only
    assert "| lbfgs |" in md


def test_held_out_rows_are_the_next_rows_of_the_same_stream():
    import argparse

    from async_spark.cli.main_job import held_out_rows
    from async_spark.data.builtin import synthetic_source

    args = argparse.Namespace(rows=8192, holdout=4096, features=40, nnz=5.0, seed=3)
    X, y = held_out_rows(args)
    longer = synthetic_source(1, n=12288, d=40, density=5 / 40, seed=3).load(0)
    train = synthetic_source(1, n=8192, d=40, density=5 / 40, seed=3).load(0)
    assert X.shape == (4096, 40)
    assert (longer.X[8192:] != X).nnz == 0 and np.array_equal(longer.y[8192:], y)
    # The training rows are the first rows of the longer stream: the held-out rows are not among
    # them, and the training run sees exactly the rows of builtin:synthetic?n=8192.
    assert (longer.X[:8192] != train.X).nnz == 0 and np.array_equal(longer.y[:8192], train.y)

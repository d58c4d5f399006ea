"""AsyncTrainingSummary.plot: the figure of a fit (the one of ``train --plot`` and the main job's
report) as a valid PNG, and one clear ValueError for a path it cannot write. The summary here is
built from a run's plain records, as ``from_result`` builds it; test_estimators plots a real fit."""

from __future__ import annotations

import pytest

from async_spark.ml.summary import AsyncTrainingSummary

PNG = b"\x89PNG\r\n\x1a\n"


def _summary() -> AsyncTrainingSummary:
    points = [(0.0, 0, 0.693), (0.5, 40, 0.41), (1.0, 80, 0.36), (1.5, 120, 0.352)]
    trace = [
        {"seconds": s, "version": v, "staleness": 0, "block": v % 4 or None, "objective": f}
        for s, v, f in points
    ]
    run = {
        "method": "asaga",
        "loss": "logistic",
        "data": "dataframe",
        "n": 455,
        "d": 30,
        "partitions": 4,
        "updates": 120,
        "wall_seconds": 1.5,
        "stopped_by": "max_updates",
        "step": 0.2,
        "final_objective": 0.352,
        "staleness_histogram": [[0, 120]],
    }
    trajectory = [{"seconds": s, "updates": v, "objective": f} for s, v, f in points]
    return AsyncTrainingSummary(trajectory, run, trace)


def test_plot_writes_a_png_and_returns_its_path(tmp_path):
    pytest.importorskip("matplotlib")
    s = _summary()
    out = s.plot(tmp_path / "figs" / "objective.png")  # the missing folder is created
    assert out == tmp_path / "figs" / "objective.png"
    data = out.read_bytes()
    assert data[:8] == PNG and len(data) > 10_000
    assert not list(out.parent.glob(".*.tmp"))  # written atomically
    with_optimum = s.plot(str(tmp_path / "rel.PNG"), optimum=0.35, tolerance=1e-2, title="t")
    assert with_optimum.read_bytes()[:8] == PNG


def test_a_bad_path_is_one_clear_error(tmp_path):
    pytest.importorskip("matplotlib")
    s = _summary()
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "folder.png").mkdir()
    bad = [
        (
            tmp_path / "objective.jpg",
            r"must be a file name ending in \.png, got '.*objective\.jpg'",
        ),
        (tmp_path, r"must be a file name ending in \.png"),
        (tmp_path / "folder.png", r"is a folder; give a file name ending in \.png"),
        (tmp_path / "a_file" / "x.png", r"its folder '.*a_file' cannot be created"),
        (None, r"must be a file name ending in \.png, got None"),
        (3, r"must be a file name ending in \.png, got 3"),
    ]
    for path, message in bad:
        with pytest.raises(ValueError, match=message):
            s.plot(path)
    # nothing was written for any of them
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "folder.png"]
    assert not list((tmp_path / "folder.png").iterdir())

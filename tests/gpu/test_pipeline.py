"""jobs/pipeline.py end to end on the shared local session, small sizes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.spark

JOB = Path(__file__).resolve().parents[2] / "jobs" / "pipeline.py"


def _job():
    spec = importlib.util.spec_from_file_location("async_spark_pipeline_job", JOB)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pipeline_prepares_trains_both_and_reports(spark, tmp_path):
    job = _job()
    args = job.build_parser().parse_args(
        f"--out {tmp_path} --rows 3000 --partitions 2 --ranks 2 --epochs 6 "
        "--max-updates 400 --device cpu".split()
    )
    # 400 ASAGA updates: the step search raises the automatic step every 26 updates up to 64x
    # (update 177) and steps back at 275; a run cut at 200 ended 23 updates after the last raise,
    # at 0.29-1.6 (2.24 once in CI, above the bound below), while 600 end at 0.15 in every run
    report = job.run_pipeline(spark, args)
    assert (tmp_path / "linear" / "model.npz").is_file()
    assert (tmp_path / "hylo" / "model.pt").is_file()
    assert json.loads((tmp_path / "report.json").read_text())["hylo"]["ranks"] == 2
    assert "| ASAGA (engine)" in (tmp_path / "report.md").read_text()
    # Both must beat the best constant guess (the test set's majority class, ~0.3 here, not the
    # 0.1 of balanced classes) by a margin: a stage trained on labels shuffled against their rows
    # lands at the majority rate (HyLo 0.29 at these sizes; 0.16 at the old 1200 rows x 2
    # epochs, which passed the old "> 0.15"). Seen: linear 0.57, HyLo 0.60, majority 0.29.
    _, y_test = job._parquet_xy(report["data"]["test"])
    majority = np.bincount(y_test).max() / y_test.size
    for stage in ("linear", "hylo"):
        assert report[stage]["test_accuracy"] > majority + 0.15, (stage, majority, report[stage])
    # HyLo's training loss falls (seen 3.18 -> 1.17; a stage that does not learn stays ~2.3)
    losses = [
        json.loads(line)["train_loss"]
        for line in (tmp_path / "hylo" / "metrics.jsonl").read_text().splitlines()
    ]
    assert len(losses) == 6 and losses[-1] < 0.7 * losses[0], losses
    # ASAGA lowered the softmax objective from its value at zero weights, log(10)
    assert report["linear"]["final_objective"] < 0.9 * np.log(10), report["linear"]

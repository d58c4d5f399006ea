"""jobs/pipeline.py end to end on the shared local session, small sizes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

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
        f"--out {tmp_path} --rows 1200 --partitions 2 --ranks 2 --epochs 2 "
        "--max-updates 60 --device cpu".split()
    )
    report = job.run_pipeline(spark, args)
    assert (tmp_path / "linear" / "model.npz").is_file()
    assert (tmp_path / "hylo" / "model.pt").is_file()
    assert json.loads((tmp_path / "report.json").read_text())["hylo"]["ranks"] == 2
    assert "| ASAGA (engine)" in (tmp_path / "report.md").read_text()
    for stage in ("linear", "hylo"):
        assert 0.0 <= report[stage]["test_accuracy"] <= 1.0
    # both learn something on a 10-class problem (chance is 0.1)
    assert report["linear"]["test_accuracy"] > 0.2, report["linear"]
    assert report["hylo"]["test_accuracy"] > 0.15, report["hylo"]

"""The training progress bar: what it draws, how often, and in training runs."""

from __future__ import annotations

import io

import numpy as np
import pytest

from async_spark.reporting.progress import LOG_REFRESH, TrainingProgress
from async_spark.solvers.config import TrainConfig
from async_spark.solvers.linear import train_linear


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_file_gets_one_line_per_redraw_throttled():
    out, clock = io.StringIO(), FakeClock()
    bar = TrainingProgress("run", max_updates=100, file=out, clock=clock)
    calls = []

    def details():
        calls.append(1)
        return {"staleness": "1.5"}

    for k in range(1, 51):
        bar.update(k, k * 0.01, details)
        clock.now += 0.01  # 0.5 s in all: one redraw in a log file
    bar.update(60, 3.0, details)
    clock.now += LOG_REFRESH
    bar.update(70, 4.0, details)
    bar.close(details)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 == len(calls)  # first update, after LOG_REFRESH, close
    assert lines[0].startswith("run: 1/100 upd (1%)")
    assert "staleness=1.5" in lines[0]
    assert lines[1].startswith("run: 70/100 upd (70%)")
    assert "upd/s=17.5" in lines[1]
    bar.close(details)  # idempotent
    assert len(out.getvalue().splitlines()) == 3


def test_time_budget_bar_counts_seconds_and_shows_updates():
    out, clock = io.StringIO(), FakeClock()
    bar = TrainingProgress("run", time_budget=20.0, file=out, clock=clock)
    bar.update(40, 5.0)
    bar.close()
    first, last = out.getvalue().splitlines()
    assert first.startswith("run: 5/20 s (25%)") and "updates=40" in first and "upd/s=8.0" in last


def test_terminal_bar_redraws_in_place_and_caps_at_total():
    out, clock = TTY(), FakeClock()
    bar = TrainingProgress("run", max_updates=10, file=out, clock=clock)
    for k in range(1, 13):  # a synchronous run can overshoot by a round
        bar.update(k, k * 0.1)
        clock.now += 1.0
    bar.close()
    text = out.getvalue()
    assert "\r" in text and "10/10" in text and "12/10" not in text
    assert text.endswith("\n")  # the finished bar stays on screen


def test_resumed_run_starts_where_it_stopped():
    out = io.StringIO()
    bar = TrainingProgress("run", max_updates=100, initial_updates=40, file=out)
    bar.close()
    assert out.getvalue().startswith("run: 40/100 upd")


def _config(**kw):
    return TrainConfig(
        data="builtin:breast_cancer",
        standardize=True,
        method="asgd",
        partitions=2,
        step=0.5,
        max_updates=30,
        eval_every=0.05,
        **kw,
    )


def test_training_run_draws_bar_unless_quiet(capsys):
    result = train_linear(_config())
    err = capsys.readouterr().err
    assert "asgd-breast_cancer" in err and "30/30 upd" in err and "staleness=" in err
    quiet = train_linear(_config(quiet=True))
    assert capsys.readouterr().err == ""
    assert result.updates == quiet.updates == 30
    assert np.isfinite(result.final_objective)


@pytest.mark.spark
def test_bar_on_spark_run_shows_final_state(spark, capsys):
    result = train_linear(_config(), spark=spark)
    err = capsys.readouterr().err
    assert "30/30 upd" in err and "rejected=0" in err
    assert result.updates == 30

"""The `async-spark` command: errors (exit 2, one line naming the problem), outputs, spark-submit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from async_spark.cli import main
from async_spark.cli.train import convergence_hint, optimality_line

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--method", "adam"], "--method"),
        (["--batch-fraction", "2"], "--batch-fraction"),
        (["--batch-fraction", "0"], "--batch-fraction"),
        (["--method", "saga", "--tau", "3"], "--tau applies to the asynchronous"),
        (["--beta", "0"], "beta"),
        (["--beta", "1.5"], "beta"),
        (["--tau", "-1"], "tau"),
        (["--ssp", "-2"], "ssp"),
        (["--partitions", "0"], "--partitions"),
        (["--stragglers", "sometimes"], "--stragglers"),
        (["--step", "-1"], "--step"),
        (["--l2", "-0.5"], "--l2"),
        (["--loss", "hinge"], "--loss"),
        (["--eval-every", "0"], "--eval-every"),
        (["--data", "/nonexistent/file.svm"], "/nonexistent/file.svm"),
        (["--data", "builtin:nothing"], "nothing"),
    ],
)
def test_bad_options_exit_2_with_one_line(argv, needle, capsys, tmp_path):
    out = tmp_path / "run"
    code = main(["train", *argv, "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and needle in err, err
    assert not out.exists()  # nothing half-written


def test_malformed_libsvm_names_file_and_line(capsys, tmp_path):
    data = tmp_path / "bad.svm"
    data.write_text("1 1:0.5 3:1\n0 2:0.25\n1 4:abc\n")
    code = main(
        ["train", "--data", str(data), "--partitions", "1", "--quiet", "--out", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and f"{data}:3" in err, err


@pytest.mark.spark
def test_train_writes_summary_trace_and_model(spark, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "--data",
            "builtin:breast_cancer",
            "--standardize",
            "--method",
            "asgd,sgd",
            "--partitions",
            "3",
            "--max-updates",
            "12",
            "--step",
            "0.5",
            "--out",
            str(out),
            "--quiet",
            "--eval-every",
            "0.1",
        ]
    )
    assert code == 0
    for method in ("asgd", "sgd"):
        summary = json.loads((out / method / "summary.json").read_text())
        for key in (
            "method",
            "loss",
            "n",
            "d",
            "partitions",
            "updates",
            "rejected",
            "wall_seconds",
            "final_objective",
            "time_to_target",
        ):
            assert key in summary
        assert summary["method"] == method and summary["updates"] == 12
        assert summary["n"] == 569 and summary["d"] == 30
        trace = [json.loads(x) for x in (out / method / "trace.jsonl").read_text().splitlines()]
        assert {"seconds", "version", "staleness", "objective"} <= set(trace[-1])
        assert trace[0]["objective"] == pytest.approx(np.log(2))
        with np.load(out / method / "model.npz", allow_pickle=False) as z:
            assert z["weights"].shape == (30,) and z["intercept"].shape == ()
    stdout = capsys.readouterr().out
    assert "RESULT" in stdout
    assert "objective: mean logistic loss + " in stdout and "standardized columns" in stdout
    for method in ("asgd", "sgd"):  # each run's optimality line, with its summary's figures
        summary = json.loads((out / method / "summary.json").read_text())
        start, end = summary["gradient_norm_start"], summary["gradient_norm"]
        assert 0 < end < start
        assert optimality_line(summary) in stdout.splitlines()
    assert not spark.sparkContext._jsc.sc().isStopped()  # the caller's session stays up


@pytest.mark.spark
def test_train_without_a_method_runs_lbfgs_and_says_why(spark, tmp_path, capsys):
    """The default --method auto: L-BFGS to convergence on breast cancer, one line saying so;
    a stochastic option (--step) makes it ASAGA."""
    from async_spark.cli.train import method_line

    out = tmp_path / "run"
    args = ["train", "--data", "builtin:breast_cancer", "--partitions", "2", "--quiet"]
    assert main([*args, "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["method"] == "lbfgs" and summary["stopped_by"] in ("converged", "tolerance")
    assert summary["method_choice"]["chose"] == "lbfgs"
    assert summary["loss"] == "logistic" and summary["num_classes"] == 2  # --loss auto
    lines = capsys.readouterr().out.splitlines()
    assert method_line(summary) in lines
    assert method_line(summary).startswith("method: auto chose lbfgs (no option of the stochastic")
    assert lines[1].startswith("lbfgs ")  # the table's row names the method that ran
    step = tmp_path / "step"
    assert main([*args, "--step", "0.01", "--max-updates", "5", "--out", str(step)]) == 0
    summary = json.loads((step / "summary.json").read_text())
    assert summary["method"] == "asaga"
    assert summary["method_choice"]["why"] == "--step is an option of the stochastic methods"
    assert method_line({**summary, "method_choice": None}) is None


@pytest.mark.spark
def test_the_default_loss_is_softmax_for_ten_classes(spark, tmp_path, capsys):
    """--loss auto (the default) on the ten digits trains the multinomial model, as pyspark.ml's
    family="auto", and the objective line says so; the model has a row per class."""
    out = tmp_path / "run"
    argv = ["train", "--data", "builtin:digits", "--partitions", "2", "--quiet"]
    assert main([*argv, "--max-updates", "30", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["loss"] == "softmax" and summary["num_classes"] == 10
    printed = capsys.readouterr().out
    assert "objective: mean cross-entropy over 10 classes" in printed
    assert summary["loss_choice"] == {"asked": "auto", "chose": "softmax"}
    assert "loss: auto chose softmax for the 10 integer label values" in printed
    with np.load(out / "model.npz", allow_pickle=False) as saved:
        assert saved["weights"].shape == (10, 64) and saved["intercept"].shape == (10,)
        np.testing.assert_array_equal(saved["classes"], np.arange(10.0))
        W, b = saved["weights"], saved["intercept"]
    # score reads the model back and agrees with the raw-scale weights applied by hand
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    assert main(["score", "--model", str(out), "--data", "builtin:digits"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1].removeprefix("RESULT "))
    assert result["loss"] == "softmax" and result["rows"] == len(y)
    assert result["accuracy"] == np.mean(np.argmax(X @ W.T + b, axis=1) == y) > 0.9


def test_the_objective_line_names_the_penalized_columns():
    from async_spark.cli.train import objective_line

    row = dict(loss="logistic", l2=0.01, l1=0.0, standardize=True, penalty_on="standardized")
    assert objective_line(row) == (
        "objective: mean logistic loss + 0.01/2 ||w||^2, w the weights of the standardized "
        "columns (as pyspark.ml; --penalty-on original penalizes the raw columns' weights, "
        "as scikit-learn)"
    )
    raw = objective_line({**row, "penalty_on": "original", "l1": 0.1, "loss": "softmax"})
    assert raw == (
        "objective: mean cross-entropy + 0.01/2 ||w||^2 + 0.1 ||w||_1, "
        "w the weights of the raw columns (as scikit-learn)"
    )
    assert objective_line({**row, "standardize": False}).endswith("raw columns (as scikit-learn)")
    assert objective_line({**row, "l2": 0.0}) == "objective: mean logistic loss"


@pytest.mark.cluster
def test_spark_submit_runs_the_job(tmp_path):
    submit = Path(sys.executable).with_name("spark-submit")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            str(submit),
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=false",
            str(ROOT / "jobs" / "train_linear.py"),
            "--data",
            "builtin:breast_cancer",
            "--standardize",
            "--method",
            "asaga",
            "--partitions",
            "2",
            "--max-updates",
            "10",
            "--out",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((out / "summary.json").read_text())["updates"] == 10


def test_help_names_every_option_and_its_default():
    import argparse

    from async_spark.cli import build_parser
    from async_spark.cli._common import HelpFormatter

    parser = build_parser()
    assert "``" not in parser.format_help()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(sub.choices) == {"train", "score", "momentum", "plot", "emulate", "hylo"}
    for name, command in sub.choices.items():
        assert command.formatter_class is HelpFormatter, name
        command.format_help()  # every help string formats (no stray %)
        for action in command._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            assert action.help, f"{name} {action.option_strings[0]} has no help"
            shown = HelpFormatter(name)._get_help_string(action) or ""
            default = action.default
            unset = (
                default is None or default is False or default == [] or default is argparse.SUPPRESS
            )
            assert unset or "default" in shown, f"{name} {action.option_strings[0]}: {shown}"
    train = sub.choices["train"].format_help()
    assert "L1 penalty l1*||w||_1 on the weights, >= 0 (default: 0.0)" in " ".join(train.split())
    assert "L2 penalty (l2/2)*||w||^2, >= 0 (default: 0.0001)" in " ".join(train.split())
    # every numeric option of train says its range; one unset by default says what that means
    for action in sub.choices["train"]._actions:
        if getattr(action.type, "__name__", "") in ("parse_int", "parse_float"):
            text = action.help or ""
            flag = action.option_strings[0]
            assert any(r in text for r in (">=", "> 0", "in (", "in [", "finite")), (
                f"{flag}: {text}"
            )
            assert action.default is not None or "default" in text, f"{flag}: {text}"


def test_emulate_calibrates_with_the_tasks_of_the_first_method(monkeypatch, tmp_path, capsys):
    import contextlib

    import async_spark.cli.emulate as emulate
    import async_spark.solvers.emulation as emulation
    from async_spark.engine.emulator import CostModel

    seen = {}

    def fake_calibrate(spark, source, desc, **kwargs):
        seen.update(kwargs)
        return CostModel(source="fake")

    monkeypatch.setattr(emulation, "calibrate", fake_calibrate)
    monkeypatch.setattr(emulate, "spark_session", lambda *a, **k: contextlib.nullcontext())
    out = tmp_path / "cost.json"
    argv = ["emulate", "--calibrate", "--data", "builtin:breast_cancer", "--out", str(out)]
    assert main([*argv, "--method", "sgd,saga"]) == 0
    assert seen["method"] == "sgd"  # the first method's tasks (SAGA's were taken if listed)
    assert main([*argv, "--method", "ahb"]) == 0 and seen["method"] == "ahb"
    capsys.readouterr()
    assert main([*argv, "--method", "asgaa"]) == 2
    assert "--method must be one of" in capsys.readouterr().err


@pytest.mark.spark
def test_train_runs_dcasgd_and_summarizes_it(spark, tmp_path, capsys):
    """The method added through the seams, end to end on the command line."""
    out = tmp_path / "dc"
    argv = ["train", "--data", "builtin:breast_cancer", "--method", "dcasgd", "--partitions", "2"]
    code = main([*argv, "--max-updates", "10", "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["method"] == "dcasgd" and summary["config"]["method"] == "dcasgd"
    assert summary["updates"] == 10 and summary["stopped_by"] == "max_updates"
    assert summary["n"] == 569 and summary["d"] == 30 and summary["partitions"] == 2
    assert np.isfinite(summary["final_objective"]) and summary["final_objective"] < np.log(2)
    assert summary["policy"] != "sync"  # DC-ASGD is asynchronous
    stdout = capsys.readouterr().out
    assert stdout.splitlines()[1].startswith("dcasgd ") and 'RESULT {"dcasgd": ' in stdout


def test_a_run_that_ends_above_its_start_is_named():
    """An explicit step far too large for raw breast cancer: the safeguard lowers it but the
    run still ends far above where it started; the CLI says so (exit 0 alone hid it)."""
    from async_spark.cli.train import worse_than_start
    from async_spark.solvers import TrainConfig, train_linear

    common = dict(
        data="builtin:breast_cancer", method="sgd", partitions=2, max_updates=200, quiet=True,
        eval_every=1e9,
    )  # fmt: skip
    bad = train_linear(TrainConfig(step=1000.0, standardize=False, **common))
    line = worse_than_start(bad)
    assert bad.final_objective > bad.snapshots[0][2]
    assert line is not None and "ended above its starting objective" in line
    assert "a smaller --step than 1000" in line
    good = train_linear(TrainConfig(**common))
    assert good.final_objective < good.snapshots[0][2] and worse_than_start(good) is None


def test_the_optimality_line_says_the_norms_and_their_ratio():
    row = dict(method="asaga", l1=0.0, gradient_norm=2e-4, gradient_norm_start=0.5)
    assert optimality_line(row) == (
        "optimality: asaga's gradient norm 0.5 at the start, 0.0002 at the end (0.0004 of the "
        "start's); 0 at the optimum"
    )
    l1 = optimality_line({**row, "l1": 0.1, "gradient_norm_start": 0.0, "gradient_norm": 0.0})
    assert l1 == (
        "optimality: asaga's smallest subgradient norm 0 at the start, 0 at the end; "
        "0 at the optimum"
    )
    assert optimality_line({**row, "gradient_norm": None}) is None


def test_a_run_that_the_budget_ended_before_the_convergence_test_says_what_to_try():
    base = {
        "method": "asaga",
        "stopped_by": "time_budget",
        "tolerance": {"tol": 1e-6, "passed": None},
        "gradient_norm": 0.082,
        "gradient_norm_start": 0.391,
    }
    hint = convergence_hint(base)
    assert hint is not None and hint.startswith(
        "not converged: asaga ended at its time budget (gradient at 0.21 of the start's) "
        "before a snapshot passed --tol 1e-06."
    )
    assert "--method lbfgs" in hint and "--time-budget" in hint
    assert "max updates" in convergence_hint({**base, "stopped_by": "max_updates"})
    passed = {"seconds": 2.0, "version": 9, "objective": 0.1, "gradient_max": 1e-8}
    quiet = [
        {**base, "tolerance": {"tol": 1e-6, "passed": passed}, "stopped_by": "tolerance"},
        {**base, "tolerance": None},  # --tol 0: no test, nothing to say
        {**base, "method": "lbfgs"},  # nothing faster to suggest
        {**base, "stopped_by": "interrupted"},
    ]
    assert [convergence_hint(s) for s in quiet] == [None] * 4

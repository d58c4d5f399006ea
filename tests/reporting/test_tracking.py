"""MLflow tracking: the run wrapper, and ``--mlflow`` of ``async-spark train`` / ``hylo``.

MLflow runs here against a local file store (``MLFLOW_ALLOW_FILE_STORE``), a real MLflow backend.
"""

from __future__ import annotations

import math
import sys

import pytest

from async_spark.cli import main
from async_spark.reporting.tracking import INSTALL_HINT, MlflowRun, flatten_params

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    # mlflow.set_experiment() sets it; undone after each test
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    return MlflowClient(tracking_uri=uri)


def _runs(client, experiment="async-spark"):
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no experiment {experiment}"
    return client.search_runs([exp.experiment_id])


def test_flatten_params():
    flat = flatten_params({"a": 1, "b": {"c": None, "d": [1, 2]}, "long": "x" * 900})
    assert flat["a"] == "1" and flat["b.c"] == "None" and flat["b.d"] == "[1, 2]"
    assert len(flat["long"]) == 500 and flat["long"].endswith("...")


def test_run_logs_params_series_metrics_artifacts(store, tmp_path):
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "summary.json").write_text("{}")
    with MlflowRun("unit", tags={"k": "v"}) as run:
        run.log_params({"method": "asaga", "nested": {"x": 1}})
        logged = run.log_series(
            "objective", [(0, 0.69, 0.0), (5, 0.5, 1.5), (9, math.nan, 2.0), (10, None, 3.0)]
        )
        run.log_metrics({"final": 0.4, "missing": None, "inf": math.inf})
        run.log_artifacts(folder)
    assert logged == 2  # NaN and None are not MLflow values
    data = store.get_run(run.run_id)
    assert data.info.status == "FINISHED"
    assert data.data.params["method"] == "asaga" and data.data.params["nested.x"] == "1"
    assert data.data.tags["k"] == "v" and data.data.tags["mlflow.runName"] == "unit"
    assert data.data.metrics == {"final": 0.4, "objective": 0.5}
    history = store.get_metric_history(run.run_id, "objective")
    assert [(m.step, m.value) for m in history] == [(0, 0.69), (5, 0.5)]
    # training time is the timestamp: 1.5 s between the two points
    assert history[1].timestamp - history[0].timestamp == 1500
    assert [f.path for f in store.list_artifacts(run.run_id)] == ["summary.json"]


def test_failed_and_nested_runs(store):
    with pytest.raises(RuntimeError), MlflowRun("bad") as run:
        raise RuntimeError("boom")
    assert store.get_run(run.run_id).info.status == "FAILED"
    mlflow.set_tracking_uri(store.tracking_uri)
    mlflow.set_experiment("notebook")
    with mlflow.start_run() as parent:
        child = MlflowRun("child")
        child.end()
    assert store.get_run(child.run_id).data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert store.get_run(child.run_id).info.experiment_id == parent.info.experiment_id
    # no active run: the experiment chosen with mlflow.set_experiment() is used
    alone = MlflowRun("alone")
    alone.end()
    assert store.get_run(alone.run_id).info.experiment_id == parent.info.experiment_id


def _train_argv(out, *extra):
    return [
        "train",
        "--data",
        "builtin:breast_cancer",
        "--standardize",
        "--method",
        "asgd,sgd",
        "--partitions",
        "2",
        "--max-updates",
        "10",
        "--step",
        "0.5",
        "--eval-every",
        "0.05",
        "--quiet",
        "--mlflow",
        *extra,
        *([] if out is None else ["--out", str(out)]),
    ]


@pytest.mark.spark
def test_train_cli_logs_one_run_per_method(spark, store, tmp_path):
    assert main(_train_argv(None, "--mlflow-experiment", "cli")) == 0
    runs = {r.data.tags["mlflow.runName"]: r for r in _runs(store, "cli")}
    assert set(runs) == {"asgd", "sgd"}
    for method, run in runs.items():
        assert run.info.status == "FINISHED"
        assert run.data.params["method"] == method and run.data.params["d"] == "30"
        assert run.data.metrics["updates"] == 10
        history = store.get_metric_history(run.info.run_id, "objective")
        assert len(history) >= 2 and history[0].value == pytest.approx(math.log(2))
        assert history[-1].value == pytest.approx(run.data.metrics["final_objective"])
        names = {f.path for f in store.list_artifacts(run.info.run_id)}
        assert names == {"model.npz", "summary.json", "trace.jsonl"}


def test_missing_mlflow_fails_before_training(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # what an absent package looks like
    out = tmp_path / "run"
    assert main(_train_argv(out)) == 2
    err = capsys.readouterr().err.strip()
    assert INSTALL_HINT in err and len(err.splitlines()) == 1
    assert not out.exists()
    # before any data is read: a missing file is not even looked at
    argv = _train_argv(out)
    argv[argv.index("builtin:breast_cancer")] = str(tmp_path / "missing.svm")
    assert main(argv) == 2
    assert INSTALL_HINT in capsys.readouterr().err


def test_unreachable_tracking_fails_before_training(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_train_argv(out, "--mlflow-uri", "nosuchscheme://host/x")) == 2
    err = capsys.readouterr().err.strip()
    assert "MLflow tracking at 'nosuchscheme://host/x'" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_hylo_cli_logs_epochs_and_model(store, capsys):
    pytest.importorskip("torch")
    argv = [
        "hylo",
        "--model",
        "cnn1d",
        "--data",
        "synthetic",
        "--optimizer",
        "sgd",
        "--epochs",
        "2",
        "--batch-size",
        "32",
        "--n-train",
        "64",
        "--n-test",
        "32",
        "--mlflow",
    ]
    assert main(argv) == 0
    (run,) = _runs(store)
    assert run.data.tags["mlflow.runName"] == "hylo-sgd" and run.info.status == "FINISHED"
    assert run.data.params["optimizer"] == "sgd"
    accuracy = store.get_metric_history(run.info.run_id, "test_accuracy")
    assert [m.step for m in accuracy] == [1, 2]
    names = {f.path for f in store.list_artifacts(run.info.run_id)}
    assert {"model.pt", "summary.json", "metrics.jsonl"} <= names


def _regression_frame(spark):
    import numpy as np
    from pyspark.ml.linalg import Vectors

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.3
    return spark.createDataFrame(
        [(Vectors.dense(x), float(t)) for x, t in zip(X, y, strict=True)], ["features", "label"]
    )


@pytest.mark.spark
def test_estimator_fit_logs_a_run_with_the_coefficients(spark, store, tmp_path, capsys):
    import numpy as np

    from async_spark.ml import AsyncLinearRegression

    df = _regression_frame(spark)
    est = AsyncLinearRegression(
        method="saga", stepSize=0.1, maxUpdates=40, numPartitions=2, evalEvery=0.05
    )
    est.setMlflowTracking(True).setShowProgress(True)
    model = est.fit(df)
    assert "40/40 upd" in capsys.readouterr().err  # showProgress
    (run,) = _runs(store)
    assert run.info.status == "FINISHED"
    assert run.data.tags["mlflow.runName"] == "AsyncLinearRegression-saga"
    assert run.data.params["estimator.maxUpdates"] == "40"
    assert run.data.metrics["updates"] == 40
    folder = store.download_artifacts(run.info.run_id, "model.npz", str(tmp_path))
    with np.load(folder, allow_pickle=False) as z:
        np.testing.assert_allclose(z["coefficients"][0], model.coefficients.toArray())
        np.testing.assert_allclose(z["intercept"][0], model.intercept)


@pytest.mark.spark
def test_cross_validator_fits_nest_under_the_callers_run(spark, store):
    from pyspark.ml.evaluation import RegressionEvaluator
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    from async_spark.ml import AsyncLinearRegression

    df = _regression_frame(spark)
    est = AsyncLinearRegression(
        method="saga", stepSize=0.1, maxUpdates=10, numPartitions=2, mlflowTracking=True
    )
    grid = ParamGridBuilder().addGrid(est.regParam, [0.0, 0.1]).build()
    cv = CrossValidator(
        estimator=est,
        estimatorParamMaps=grid,
        evaluator=RegressionEvaluator(),
        numFolds=2,
        parallelism=2,
        seed=0,
    )
    mlflow.set_tracking_uri(store.tracking_uri)
    mlflow.set_experiment("cv")
    with mlflow.start_run(run_name="cv") as parent:
        cv.fit(df)
    runs = [r for r in _runs(store, "cv") if r.info.run_id != parent.info.run_id]
    assert len(runs) == 2 * 2 + 1  # folds x grid, then the best model on all the data
    assert {r.data.tags.get("mlflow.parentRunId") for r in runs} == {parent.info.run_id}
    assert {r.data.params["estimator.regParam"] for r in runs} == {"0.0", "0.1"}
    assert all(r.info.status == "FINISHED" for r in runs)


@pytest.mark.spark
def test_out_dir_artifacts_are_the_run_files_only(spark, store, tmp_path):
    out = tmp_path / "run"
    argv = _train_argv(out, "--checkpoint-every", "5")
    argv[argv.index("asgd,sgd")] = "asgd"
    (tmp_path / "run").mkdir()
    (out / "left-over.txt").write_text("from an earlier run")
    assert main(argv) == 0
    assert (out / "checkpoints").is_dir()
    (run,) = _runs(store)
    names = {f.path for f in store.list_artifacts(run.info.run_id)}
    assert names == {"model.npz", "summary.json", "trace.jsonl"}


def test_interrupted_hylo_run_is_killed_with_its_finished_epochs(store, monkeypatch, tmp_path):
    import json

    import async_spark.cli.hylo as hylo_cli

    out = tmp_path / "hylo"

    def interrupted(args):  # two epochs written, then Ctrl-C (or SIGTERM) before the summary
        out.mkdir()
        lines = [{"epoch": e, "test_accuracy": 0.5 + e / 10, "train_seconds": e} for e in (1, 2)]
        (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        raise KeyboardInterrupt

    monkeypatch.setattr(hylo_cli, "train_hylo", interrupted)
    assert main(["hylo", "--optimizer", "sgd", "--out", str(out), "--mlflow"]) == 130
    (run,) = _runs(store)
    assert run.info.status == "KILLED" and run.data.params["optimizer"] == "sgd"
    history = store.get_metric_history(run.info.run_id, "test_accuracy")
    assert [m.step for m in history] == [1, 2]
    assert {f.path for f in store.list_artifacts(run.info.run_id)} == {"metrics.jsonl"}


def test_hylo_times_to_accuracy_are_logged_when_reached(store, monkeypatch, tmp_path):
    import json

    import async_spark.cli.hylo as hylo_cli

    out = tmp_path / "hylo"

    def trained(args):
        out.mkdir()
        summary = {
            "test_accuracy": 0.88,
            "time_to_accuracy": {"0.8": 1.5, "0.85": 2.0, "0.9": None},
            "time_to_sustained_accuracy": {"0.8": 1.5, "0.85": 3.0, "0.9": None},
        }
        (out / "summary.json").write_text(json.dumps(summary))
        return 0

    monkeypatch.setattr(hylo_cli, "train_hylo", trained)
    assert main(["hylo", "--optimizer", "sgd", "--out", str(out), "--mlflow"]) == 0
    (run,) = _runs(store)
    metrics = run.data.metrics
    assert metrics["time_to_accuracy_0.85"] == 2.0
    assert metrics["time_to_sustained_accuracy_0.85"] == 3.0
    assert "time_to_accuracy_0.9" not in metrics and "time_to_sustained_accuracy_0.9" not in metrics

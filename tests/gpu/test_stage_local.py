"""The launcher on the shared local[4,2] session: one rank equals the in-process run, a
DataFrame feeds two ranks, bad inputs are refused before anything starts, the CLI writes the
outputs of ``async-spark hylo``."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch

from async_spark.gpu import (
    BarrierLauncher,
    ShardSource,
    dataframe_shards,
    load_shard,
    shard_rdd,
    train_hylo_local,
    train_hylo_spark,
)

pytestmark = pytest.mark.spark

SMALL = {
    "model": "cnn1d",
    "data": "synthetic",
    "optimizer": "hylo",
    "epochs": 2,
    "batch_size": 32,
    "n_train": 128,
    "n_test": 32,
    "inv_update_steps": 2,
    "workers": 1,
    "timeout": 60.0,
    "seed": 1,
}


def test_one_rank_equals_the_in_process_run(spark, tmp_path):
    # the stage also evaluates twice within each epoch: that must not change the training
    summary = train_hylo_spark(dict(SMALL, evals_per_epoch=3, out=str(tmp_path)), spark)
    ref = train_hylo_local(SMALL)
    got = torch.load(tmp_path / "model.pt", weights_only=True)
    for name, value in ref["state_dict"].items():
        np.testing.assert_allclose(got[name].numpy(), value, rtol=0, atol=1e-6, err_msg=name)
    assert summary["test_accuracy"] == ref["summary"]["test_accuracy"]
    assert summary["launcher"] == "barrier" and summary["startup_seconds"] >= 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "metrics.jsonl",
        "model.pt",
        "summary.json",
    ]


def test_two_ranks_read_their_dataframe_partitions(spark, tmp_path):
    src = ShardSource("builtin", "synthetic", "cnn1d", seed=2, n_train=128, n_test=32)
    x, y = load_shard(src, 0, 1)
    df = spark.createDataFrame(
        [(row.tolist(), int(label)) for row, label in zip(x, y, strict=True)],
        "features array<float>, label long",
    )
    summary = train_hylo_spark(
        dict(SMALL, workers=2, epochs=1, evals_per_epoch=2),
        spark,
        source=src,
        data=dataframe_shards(df, 2),
    )
    logs = summary["rank_logs"]
    rows = [int(logs[r][0].split("read ")[1].split()[0]) for r in ("0", "1")]
    assert sum(rows) == 128 and min(rows) > 0, logs
    assert np.isfinite(summary["wall_seconds"]) and summary["workers"] == 2
    assert len(summary["evaluations"]) == 2  # one within the epoch (rank 0 only), one at its end


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_ranks": 0}, "num_ranks must be an integer >= 1"),
        ({"num_ranks": 2, "timeout": 0}, "timeout must be a number of seconds > 0"),
        ({"num_ranks": 1, "device": "tpu"}, "device must be 'cpu' or 'cuda'"),
        ({"num_ranks": 1, "device": "cuda", "gpus_per_task": 1.5}, "whole number"),
        ({"num_ranks": 1, "device": "cuda", "gpus_per_task": 0}, "gpus_per_task must be"),
    ],
)
def test_bad_launcher_arguments(spark, kwargs, message):
    with pytest.raises(ValueError, match=message):
        BarrierLauncher(spark, **kwargs)


def test_partitions_and_slots_are_checked_before_the_stage(spark):
    src = ShardSource("builtin", "synthetic", "cnn1d", n_train=16, n_test=4)
    with pytest.raises(ValueError, match="one partition per rank"):
        BarrierLauncher(spark, 2).run(
            lambda ctx, shard: None, shard_rdd(spark.sparkContext, src, 3)
        )
    with pytest.raises(ValueError, match="needs 8 task slots at once; the cluster has 4"):
        BarrierLauncher(spark, 8, slot_wait=0).run(
            lambda ctx, shard: None, shard_rdd(spark.sparkContext, src, 8)
        )


def _hylo_cli(out):
    """The parser of ``async-spark hylo`` and a small one-rank barrier run writing into ``out``."""
    from async_spark.cli.hylo import add_hylo_arguments, add_spark_hylo_arguments

    parser = argparse.ArgumentParser()
    add_hylo_arguments(parser)
    add_spark_hylo_arguments(parser)
    args = parser.parse_args(
        "--model cnn1d --data synthetic --n-train 64 --n-test 16 --epochs 1 --batch-size 16 "
        f"--workers 1 --spark --launcher barrier --out {out}".split()
    )
    return parser, args


def test_cli_writes_the_hylo_outputs(spark, tmp_path, capsys):
    from async_spark.cli.hylo import run_spark_hylo

    parser, args = _hylo_cli(tmp_path)
    assert run_spark_hylo(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["launcher"] == "barrier" and printed["epochs_run"] == 1
    assert (tmp_path / "model.pt").is_file() and (tmp_path / "metrics.jsonl").is_file()
    with pytest.raises(SystemExit):
        parser.parse_args(["--gpus-per-task", "1.5"])


def test_the_cli_checks_the_executors_with_torch_before_the_stage(spark, tmp_path, monkeypatch):
    from async_spark.cli.hylo import run_spark_hylo
    from async_spark.engine import session

    asked = []

    def refuse(spark, modules=session.ENV_CHECK_MODULES, **kw):
        asked.append(modules)
        raise session.ExecutorEnvironmentError("the executors' Python cannot import torch")

    monkeypatch.setattr(session, "check_executors", refuse)
    _, args = _hylo_cli(tmp_path)
    with pytest.raises(session.ExecutorEnvironmentError, match="cannot import torch"):
        run_spark_hylo(args)
    assert asked == [(*session.ENV_CHECK_MODULES, "torch")]
    assert not list(tmp_path.iterdir())  # refused before the stage wrote anything

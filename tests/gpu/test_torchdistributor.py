"""The second launcher, pyspark's TorchDistributor (torchrun in each barrier task), on the shared
local session with CPU ranks and gloo: it must train exactly what the barrier launcher trains,
and a rank's failure must come back as one RankFailedError naming the rank and its error."""

from __future__ import annotations

import logging

import pytest
import torch

from async_spark.gpu import RankFailedError, ShardSource, train_hylo_spark
from async_spark.gpu.torchdist import _first_user_error, rendezvous_notice

pytestmark = pytest.mark.spark

CONFIG = {
    "model": "cnn1d",
    "data": "synthetic",
    "optimizer": "hylo",
    "epochs": 2,
    "batch_size": 32,
    "n_train": 128,
    "n_test": 32,
    "inv_update_steps": 2,
    "workers": 2,
    "timeout": 60.0,
    "seed": 3,
}


def test_torchdistributor_trains_the_same_model_as_the_barrier_stage(spark, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="async_spark.gpu.torchdist")
    runs = {}
    for launcher in ("torchdistributor", "barrier"):
        out = tmp_path / launcher
        summary = train_hylo_spark(dict(CONFIG, out=str(out)), spark, launcher=launcher)
        assert summary["launcher"] == launcher and summary["workers"] == 2
        assert summary["startup_seconds"] >= 0 and summary["rank_logs"]["0"]
        assert sorted(p.name for p in out.iterdir()) == [
            "metrics.jsonl",
            "model.pt",
            "summary.json",
        ]
        runs[launcher] = (summary, torch.load(out / "model.pt", weights_only=True))
    (s_td, w_td), (s_b, w_b) = runs["torchdistributor"], runs["barrier"]
    assert w_td.keys() == w_b.keys()
    for name in w_b:  # same shards, same seeds, same collectives: bit-identical weights
        assert torch.equal(w_td[name], w_b[name]), name
    assert s_td["test_accuracy"] == s_b["test_accuracy"]
    # where torchrun's store listens is said once per TorchDistributor run (INFO: local mode)
    notices = [r for r in caplog.records if "rendezvous store listens" in r.getMessage()]
    assert [r.levelno for r in notices] == [logging.INFO]


def test_the_rendezvous_notice_warns_on_a_cluster_only():
    level, text = rendezvous_notice("spark://head:7077")
    assert level == logging.WARNING and "--launcher barrier" in text
    assert rendezvous_notice("local-cluster[2,1,1024]")[0] == logging.INFO
    assert rendezvous_notice("local[2]")[0] == logging.INFO


def test_a_failing_torchdistributor_rank_is_one_clear_error(spark, tmp_path):
    missing = ShardSource("parquet", str(tmp_path / "no-such-table"), "cnn1d")
    with pytest.raises(
        RankFailedError, match=r"rank [01] of the TorchDistributor stage failed: "
    ) as err:
        train_hylo_spark(CONFIG, spark, launcher="torchdistributor", source=missing)
    # pyspark's torchrun wrapper exits 0 whatever the rank did, so this used to read only
    # "TorchDistributor failed during training. View stdout logs for detailed error message."
    message = str(err.value)
    assert "no-such-table" in message and len(message.splitlines()) == 1, message
    assert err.value.rank in (0, 1)


def test_first_user_error_skips_the_wrappers():
    text = (
        "An error occurred while calling o123.collect.\n"
        "py4j.protocol.Py4JJavaError: An error occurred while calling o45\n"
        "org.apache.spark.SparkException: Job aborted due to stage failure\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: Command failed\n"
        "FileNotFoundError: [Errno 2] No such file: '/data/train'\n"
        "ValueError: a later error\n"
    )
    assert _first_user_error(text) == "FileNotFoundError: [Errno 2] No such file: '/data/train'"
    assert _first_user_error("\n  just text\nmore") == "just text"

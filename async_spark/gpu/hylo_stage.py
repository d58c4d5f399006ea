"""HyLo training as a Spark stage: the per-rank loop, three ways to launch it, the outputs.

:func:`~.rank.hylo_rank` (in :mod:`.rank`, re-exported here) is the training loop of one rank
on its own shard.

Launchers (all return the same summary and write the same ``summary.json``, ``metrics.jsonl``
and ``model.pt`` as ``async-spark hylo``):

* :func:`train_hylo_spark` with ``launcher="barrier"`` -- :class:`~.launcher.BarrierLauncher`;
  each rank reads its Spark partition (on a Spark Connect session, which has no RDD, one
  ``mapInArrow(..., barrier=True)`` job whose ranks read their shards from the source);
* :func:`train_hylo_spark` with ``launcher="torchdistributor"`` -- ``pyspark.ml.torch``'s
  ``TorchDistributor`` (torchrun in a barrier stage); each process reads its shard itself
  (:func:`~.data.load_shard`), since it cannot see a Spark partition;
* :func:`train_hylo_local` -- ``world`` processes on this machine without Spark
  (:func:`async_spark.hylo.distributed.launch`): the reference the Spark runs must equal.

Note: the data order differs from ``async-spark hylo --workers W`` (which permutes the whole
training set and slices every global batch): here a rank only ever sees its shard.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from .data import ShardSource, load_shard, shard_rdd
from .launcher import BarrierLauncher, RankContext
from .rank import hylo_rank

__all__ = [
    "hylo_rank",
    "train_hylo_spark",
    "train_hylo_local",
    "write_outputs",
    "source_from_config",
    "LAUNCHERS",
]

LAUNCHERS = ("barrier", "torchdistributor")


def source_from_config(cfg: Any) -> ShardSource:
    """The built-in source of a :class:`~async_spark.hylo.train.TrainConfig`."""
    return ShardSource(
        kind="builtin",
        data=cfg.data,
        model=cfg.model,
        seed=cfg.seed,
        n_train=cfg.n_train,
        n_test=cfg.n_test,
    )


def write_outputs(result: dict[str, Any], out: str | os.PathLike[str]) -> None:
    """``summary.json``, ``metrics.jsonl`` and ``model.pt`` (a state_dict of tensors)."""
    import torch

    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: torch.from_numpy(np.array(v)) for k, v in result["state_dict"].items()}
    torch.save(state, path / "model.pt.tmp")
    os.replace(path / "model.pt.tmp", path / "model.pt")
    with open(path / "metrics.jsonl.tmp", "w") as f:
        for r in result["metrics"]:
            f.write(json.dumps(r) + "\n")
    os.replace(path / "metrics.jsonl.tmp", path / "metrics.jsonl")
    with open(path / "summary.json.tmp", "w") as f:
        json.dump(result["summary"], f, indent=2, default=str)
    os.replace(path / "summary.json.tmp", path / "summary.json")


def _validated(config: Any) -> Any:
    from async_spark.hylo.train import resolve_config

    cfg = resolve_config(config)
    if cfg.optimizer in ("kfac", "smw"):
        raise ValueError(
            f"optimizer {cfg.optimizer!r} (third-party, one process) is not run on the Spark "
            "stage; use hylo, kis, kid, sngd or sgd"
        )
    return cfg


def train_hylo_spark(
    config: Any,
    spark: Any,
    *,
    launcher: str = "barrier",
    source: ShardSource | None = None,
    data: Any = None,
    gpus_per_task: float = 1.0,
    cpus_per_task: int = 1,
) -> dict[str, Any]:
    """Train HyLo on ``config.workers`` ranks of a Spark stage; write outputs to ``config.out``.

    Parameters
    ----------
    config : TrainConfig or mapping
        As for :func:`async_spark.hylo.train.train` (``workers`` = ranks, ``device`` = cpu/cuda,
        ``timeout`` bounds rendezvous and collectives).
    spark : SparkSession
    launcher : {"barrier", "torchdistributor"}
    source : ShardSource, optional
        Where the rows are (default: the config's built-in dataset); rank 0 reads the test set.
    data : RDD, optional
        The training RDD, one partition per rank, of ``(x, y)`` blocks or ``(features, label)``
        rows (e.g. :func:`~.data.dataframe_shards`); default :func:`~.data.shard_rdd` of
        ``source``. Barrier launcher only.

    Returns
    -------
    dict
        The summary, with ``launcher``, ``startup_seconds`` (driver submit -> process group
        ready), ``stage_seconds`` (driver wall time of the stage) and ``rank_logs``.
    """
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {LAUNCHERS}, got {launcher!r}")
    cfg = _validated(config)
    src = source or source_from_config(cfg)
    if src.model != cfg.model:
        raise ValueError(f"source model {src.model!r} differs from config model {cfg.model!r}")
    params = asdict(cfg)
    t0 = time.perf_counter()
    if launcher == "barrier":
        from async_spark.engine.connect import is_connect

        connect = is_connect(spark)
        if connect and data is not None:
            raise ValueError(
                "data= (a Spark RDD) needs a classic session; on Spark Connect the ranks read "
                "their shards from source="
            )
        runner = BarrierLauncher(
            spark,
            cfg.workers,
            device=cfg.device,
            gpus_per_task=gpus_per_task,
            cpus_per_task=cpus_per_task,
            timeout=cfg.timeout,
            threads=cfg.threads,
        )
        if connect:  # no RDD: one mapInArrow(barrier=True) job, each rank reads its shard
            launched = runner.run_source(hylo_rank, src.as_dict(), (params, src.as_dict()))
        else:
            rdd = data if data is not None else shard_rdd(spark.sparkContext, src, cfg.workers)
            launched = runner.run(hylo_rank, rdd, (params, src.as_dict()))
        result = launched.result
        extra = {
            "startup_seconds": launched.startup_seconds,
            "rank_logs": {str(k): v for k, v in launched.logs.items()},
        }
    else:
        if data is not None:
            raise ValueError("data= (a Spark RDD) is only read by the barrier launcher")
        from .torchdist import run_torchdistributor

        result, extra = run_torchdistributor(spark, cfg, src)
    stage = time.perf_counter() - t0
    result["summary"].update(launcher=launcher, stage_seconds=stage, **extra)
    if cfg.out:
        write_outputs(result, cfg.out)
    summary: dict[str, Any] = result["summary"]
    return summary


def _local_rank(
    rank: int, world: int, params: dict[str, Any], source: dict[str, Any], out: str
) -> None:
    device = "cpu" if params["device"] == "cpu" else f"cuda:{rank}"
    ctx = RankContext(rank, world, device, "gloo" if device == "cpu" else "nccl")
    shard = load_shard(ShardSource(**source), rank, world)
    result = hylo_rank(ctx, shard, params, source)
    if rank == 0:
        np.savez(os.path.join(out, "state.npz"), **result["state_dict"])
        with open(os.path.join(out, "rest.json"), "w") as f:
            json.dump({"metrics": result["metrics"], "summary": result["summary"]}, f, default=str)


def train_hylo_local(config: Any, source: ShardSource | None = None) -> dict[str, Any]:
    """The same training without Spark: ``config.workers`` local processes (or this one).

    Returns ``{"state_dict": {name: ndarray}, "metrics": [...], "summary": {...}}``.
    """
    cfg = _validated(config)
    src = source or source_from_config(cfg)
    params = asdict(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        if cfg.workers == 1:
            _local_rank(0, 1, params, src.as_dict(), tmp)
        else:
            from async_spark.hylo.distributed import launch

            launch(
                _local_rank,
                cfg.workers,
                args=(params, src.as_dict(), tmp),
                backend="nccl" if cfg.device == "cuda" else "gloo",
                timeout=cfg.timeout,
                threads=cfg.threads,
            )
        with np.load(os.path.join(tmp, "state.npz")) as z:
            state = {k: z[k] for k in z.files}
        with open(os.path.join(tmp, "rest.json")) as f:
            rest = json.load(f)
    return {"state_dict": state, **rest}

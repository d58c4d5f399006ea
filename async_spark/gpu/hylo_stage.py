"""HyLo training as a Spark stage: the per-rank loop, three ways to launch it, the outputs.

:func:`hylo_rank` is the training loop of one rank on its own shard (the same model, HyLo
preconditioner, SGD with momentum, schedules and metrics as :func:`async_spark.hylo.train.train`,
which it reuses). The global batch of a step is the union of the ranks' local batches of
``batch_size / world`` rows, each drawn from the rank's shard by a per-rank seeded permutation
every epoch; DDP averages the gradients and HyLo distributes its inverses through
:class:`~async_spark.hylo.TorchCommunicator`.

Launchers (all return the same summary and write the same ``summary.json``, ``metrics.jsonl``
and ``model.pt`` as ``async-spark hylo``):

* :func:`train_hylo_spark` with ``launcher="barrier"`` -- :class:`~.launcher.BarrierLauncher`;
  each rank reads its Spark partition;
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
import math
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from .data import ShardSource, load_shard, load_test, shape_batch, shard_rdd
from .launcher import BarrierLauncher, RankContext

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


def hylo_rank(
    ctx: RankContext,
    shard: tuple[np.ndarray, np.ndarray],
    params: dict[str, Any],
    source: dict[str, Any],
) -> dict[str, Any]:
    """Train on this rank's shard; rank 0 returns weights (numpy), metrics and the summary.

    Must run inside an initialized ``torch.distributed`` group when ``ctx.world_size > 1``.
    """
    import torch
    import torch.distributed as dist
    from torch import nn

    from async_spark.hylo.comm import TorchCommunicator
    from async_spark.hylo.data import Dataset
    from async_spark.hylo.models import build_model
    from async_spark.hylo.train import (
        HYLO_METHODS,
        THRESHOLDS,
        TrainConfig,
        build_optimizers,
        evaluate,
        loss_and_correct,
    )

    cfg = TrainConfig(**params)
    if cfg.optimizer not in HYLO_METHODS and cfg.optimizer != "sgd":
        raise ValueError(f"the Spark stage runs hylo, kis, kid, sngd or sgd, not {cfg.optimizer!r}")
    src = ShardSource(**source)
    rank, world = ctx.rank, ctx.world_size
    device = ctx.torch_device()
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    xs, ys = shape_batch(cfg.model, *shard)
    x_train, y_train = torch.from_numpy(xs), torch.from_numpy(ys)
    task = "segmentation" if cfg.model == "unet" else "classification"
    test = None
    if rank == 0:
        loaded = load_test(src)
        if loaded is not None:
            tx, ty = shape_batch(cfg.model, *loaded)
            test = Dataset(
                x_train[:0], y_train[:0], torch.from_numpy(tx), torch.from_numpy(ty), task
            )
    net = build_model(cfg.model).to(device)
    model: nn.Module = net
    comm = None
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
        comm = TorchCommunicator()
    local = cfg.batch_size // world
    n_local = x_train.shape[0]
    steps_t = torch.tensor([n_local // local], dtype=torch.int64, device=device)
    if world > 1:
        dist.all_reduce(steps_t, op=dist.ReduceOp.MIN)
    steps_per_epoch = int(steps_t.item())
    if steps_per_epoch < 1:
        raise ValueError(
            f"a rank holds fewer rows than its local batch ({local} = batch_size / world); "
            f"rank {rank} has {n_local}"
        )
    ctx.log(f"{n_local} rows, local batch {local}, {steps_per_epoch} steps per epoch")
    built = build_optimizers(cfg, model, steps_per_epoch, comm)
    opt, sched, precond = built.optimizer, built.scheduler, built.preconditioner
    gen = torch.Generator().manual_seed(cfg.seed + 1 + 7919 * rank)
    records: list[dict[str, Any]] = []
    train_seconds = 0.0
    tta: dict[str, float | None] = {t: None for t in THRESHOLDS}
    acc: float | None = None
    best = 0.0
    diverged = False
    epochs_run = 0
    for epoch in range(cfg.epochs):
        epochs_run = epoch + 1
        if precond is not None:
            precond.set_epoch(epoch)
        perm = torch.randperm(n_local, generator=gen)
        model.train()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        for s in range(steps_per_epoch):
            idx = perm[s * local : (s + 1) * local]
            x, y = x_train[idx].to(device), y_train[idx].to(device)
            opt.zero_grad(set_to_none=True)
            loss, _, _ = loss_and_correct(task, model(x), y)
            loss.backward()
            if precond is not None:
                precond.step()
            opt.step()
            sched.step()
            loss_sum += loss.detach().to(torch.float64)
        if world > 1:  # every rank agrees on the epoch's loss (and on divergence)
            dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)
            loss_sum /= world
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        epoch_seconds = time.perf_counter() - t0
        train_seconds += epoch_seconds
        train_loss = float(loss_sum) / steps_per_epoch
        if not math.isfinite(train_loss):
            diverged = True
            acc = 0.0
            ctx.log(f"epoch {epoch + 1}: loss is not finite, stopping")
            break
        record: dict[str, Any] = {
            "epoch": epoch + 1,
            "train_loss": train_loss,
            "epoch_seconds": epoch_seconds,
            "train_seconds": train_seconds,
            "lr": float(opt.param_groups[0]["lr"]),
        }
        if rank == 0 and test is not None:
            test_loss, acc = evaluate(net, test, device, 512)
            best = max(best, acc)
            for t in THRESHOLDS:
                if tta[t] is None and acc >= float(t):
                    tta[t] = train_seconds
            record["test_loss"] = test_loss
            record["test_accuracy"] = acc
        if precond is not None:
            record["damping"] = precond.current_damping()
            record["methods"] = precond.method_counts
        records.append(record)
        ctx.log(
            f"epoch {epoch + 1}/{cfg.epochs}: loss {train_loss:.4f}"
            + (f", test accuracy {acc:.4f}" if acc is not None else "")
            + f", {epoch_seconds:.2f}s"
        )
    if rank != 0:
        return {"rows": n_local}
    summary: dict[str, Any] = {
        "optimizer": cfg.optimizer,
        "model": cfg.model,
        "data": cfg.data if src.kind == "builtin" else src.data,
        "epochs": cfg.epochs,
        "epochs_run": epochs_run,
        "diverged": diverged,
        "workers": world,
        "wall_seconds": train_seconds,
        "test_accuracy": acc,
        "best_test_accuracy": best,
        "time_to_accuracy": tta,
        "device": str(device),
        "config": asdict(cfg),
    }
    state = {k: v.detach().cpu().numpy() for k, v in net.state_dict().items()}
    return {"state_dict": state, "metrics": records, "summary": summary}


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
    from async_spark.hylo.train import _config

    cfg = _config(config)
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
        rdd = data if data is not None else shard_rdd(spark.sparkContext, src, cfg.workers)
        runner = BarrierLauncher(
            spark,
            cfg.workers,
            device=cfg.device,
            gpus_per_task=gpus_per_task,
            cpus_per_task=cpus_per_task,
            timeout=cfg.timeout,
            threads=cfg.threads,
        )
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

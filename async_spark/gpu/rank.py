"""One rank of the HyLo Spark stage: the training loop on the rank's own shard.

The same model, HyLo preconditioner, SGD with momentum, schedules and metrics as
:func:`async_spark.hylo.train.train` (through its :func:`~async_spark.hylo.train.build_optimizers`).
The global batch of a step is the union of the ranks' local batches of ``batch_size / world``
rows, each drawn from the rank's shard by a per-rank seeded permutation every epoch; DDP averages
the gradients and HyLo distributes its inverses through :class:`~async_spark.hylo.TorchCommunicator`.
Every launcher (:mod:`.hylo_stage`, :mod:`.torchdist`) runs this function.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from typing import Any

import numpy as np

from .data import ShardSource, load_test, shape_batch
from .launcher import RankContext

__all__ = ["hylo_rank"]


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

    from async_spark.hylo.data import Dataset
    from async_spark.hylo.train import (
        HYLO_METHODS,
        THRESHOLDS,
        TrainConfig,
        build_optimizers,
        build_replica,
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
    net, model, comm = build_replica(cfg.model, device, world)
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

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
    from async_spark.hylo.epochs import (
        AccuracyLog,
        epoch_record,
        evaluate,
        run_epoch_in_parts,
        step_function,
    )
    from async_spark.hylo.train import (
        HYLO_METHODS,
        TrainConfig,
        build_optimizers,
        build_replica,
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
    net, model, comm = build_replica(cfg.model, device, world, cfg.width)
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

    step_loss = step_function(task, model, precond)
    records: list[dict[str, Any]] = []
    train_seconds = 0.0
    accuracy = AccuracyLog()
    acc: float | None = None
    diverged = False
    epochs_run = 0
    for epoch in range(cfg.epochs):
        epochs_run = epoch + 1
        if precond is not None:
            precond.set_epoch(epoch)
        perm = torch.randperm(n_local, generator=gen)

        def batch(s: int, perm: torch.Tensor = perm) -> tuple[torch.Tensor, torch.Tensor]:
            idx = perm[s * local : (s + 1) * local]
            return x_train[idx].to(device), y_train[idx].to(device)

        result = run_epoch_in_parts(
            model,
            opt,
            sched,
            batch,
            steps_per_epoch,
            step_loss,
            device,
            world=world,
            evals_per_epoch=cfg.evals_per_epoch,
            evaluate_between=(
                accuracy.evaluator(net, test, device, train_seconds)
                if rank == 0 and test is not None
                else None
            ),
        )
        train_seconds += result.seconds
        train_loss = float(result.loss_sum) / steps_per_epoch
        if not math.isfinite(train_loss):
            diverged = True
            acc = 0.0
            ctx.log(f"epoch {epoch + 1}: loss is not finite, stopping")
            break
        test_result = None
        if rank == 0 and test is not None:
            test_result = evaluate(net, test, device, 512)
            acc = test_result[1]
            accuracy.observe(acc, train_seconds)
        records.append(
            epoch_record(epoch + 1, train_loss, result, train_seconds, opt, precond, test_result)
        )
        ctx.log(
            f"epoch {epoch + 1}/{cfg.epochs}: loss {train_loss:.4f}"
            + (f", test accuracy {acc:.4f}" if acc is not None else "")
            + f", {result.seconds:.2f}s"
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
        "best_test_accuracy": accuracy.best,
        "time_to_accuracy": accuracy.time_to_accuracy,
        "time_to_sustained_accuracy": accuracy.time_to_sustained_accuracy(),
        "evaluations": [list(e) for e in accuracy.history],
        "device": str(device),
        "config": asdict(cfg),
    }
    state = {k: v.detach().cpu().numpy() for k, v in net.state_dict().items()}
    return {"state_dict": state, "metrics": records, "summary": summary}

"""One training epoch and its record, shared by :func:`~async_spark.hylo.train.train` and the
Spark stage's ranks (:func:`async_spark.gpu.rank.hylo_rank`).

* :func:`run_epoch` -- zero the gradients, run the caller's ``step_loss(x, y)`` (forward,
  backward and any preconditioning), step the optimizer and the schedule, over a batch iterator.
  The loss is summed on the device, so a step does not wait for the host (one sync per epoch);
  the caller checks the sum for divergence.
* :class:`AccuracyLog` -- the best test accuracy and the training seconds at which each
  threshold of :data:`THRESHOLDS` was first reached.
* :func:`epoch_record` -- the ``metrics.jsonl`` line of an epoch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from .preconditioner import HyLo

__all__ = ["THRESHOLDS", "AccuracyLog", "EpochResult", "epoch_record", "run_epoch"]

THRESHOLDS = ("0.8", "0.85", "0.9")


@dataclass
class EpochResult:
    loss_sum: Tensor  # float64 scalar on the training device: the sum of the steps' losses
    seconds: float  # training time of the epoch (devices synchronized at both ends)
    steps: int


def run_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batches: Iterable[tuple[Tensor, Tensor]],
    step_loss: Callable[[Tensor, Tensor], Tensor],
    device: torch.device,
) -> EpochResult:
    """Train one epoch; ``step_loss(x, y)`` computes the loss and its gradients and returns it."""
    model.train()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    steps = 0
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = step_loss(x, y)
        optimizer.step()
        scheduler.step()
        loss_sum += loss.detach().to(torch.float64)
        steps += 1
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return EpochResult(loss_sum, time.perf_counter() - t0, steps)


@dataclass
class AccuracyLog:
    """Best test accuracy, and training seconds to each threshold (``None`` until reached)."""

    best: float = 0.0
    time_to_accuracy: dict[str, float | None] = field(
        default_factory=lambda: {t: None for t in THRESHOLDS}
    )

    def observe(self, accuracy: float, train_seconds: float) -> None:
        self.best = max(self.best, accuracy)
        for t in THRESHOLDS:
            if self.time_to_accuracy[t] is None and accuracy >= float(t):
                self.time_to_accuracy[t] = train_seconds


def epoch_record(
    epoch: int,
    train_loss: float,
    result: EpochResult,
    train_seconds: float,
    optimizer: torch.optim.Optimizer,
    preconditioner: HyLo | None,
    test: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """The metrics line of ``epoch`` (1-based); ``test`` is ``(test_loss, test_accuracy)``."""
    record: dict[str, Any] = {"epoch": epoch, "train_loss": train_loss}
    if test is not None:
        record["test_loss"], record["test_accuracy"] = test
    record.update(
        epoch_seconds=result.seconds,
        train_seconds=train_seconds,
        lr=float(optimizer.param_groups[0]["lr"]),
    )
    if preconditioner is not None:
        record["damping"] = preconditioner.current_damping()
        record["methods"] = preconditioner.method_counts
    return record

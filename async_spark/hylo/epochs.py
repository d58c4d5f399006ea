"""One training epoch and its record, shared by :func:`~async_spark.hylo.train.train` and the
Spark stage's ranks (:func:`async_spark.gpu.rank.hylo_rank`).

* :func:`run_epoch` -- zero the gradients, run the caller's ``step_loss(x, y)`` (forward,
  backward and any preconditioning; :func:`step_function` builds HyLo's and SGD's), step the
  optimizer and the schedule, over a batch iterator.  The loss is summed on the device, so a
  step does not wait for the host (one sync per epoch), and averaged over the ranks, so that
  every rank sees the same divergence; the caller checks the sum.
* :func:`run_epoch_in_parts` -- the same epoch cut into ``evals_per_epoch`` parts with a test
  evaluation between them (clock stopped), so that the time to an accuracy is resolved finer than
  an epoch.
* :func:`loss_and_correct`, :func:`evaluate` -- the loss (cross-entropy; binary cross-entropy
  with logits for segmentation, per pixel, and for reconstruction, whose target is the input,
  summed over an image's pixels as in Hinton & Salakhutdinov and Martens) and the test
  loss and accuracy (none for reconstruction); :func:`dataset_loss` -- the mean loss over a whole
  set (the training set's, for the time to a target reconstruction loss).
* :class:`AccuracyLog` -- the best test accuracy and the training seconds at which each
  threshold of :data:`THRESHOLDS` was first reached; :class:`LossLog` -- the same for the
  training loss against a target (below it, first and sustained).
* :func:`epoch_record` -- the ``metrics.jsonl`` line of an epoch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from .data import Dataset
from .preconditioner import HyLo

__all__ = [
    "THRESHOLDS",
    "AccuracyLog",
    "EpochResult",
    "LossLog",
    "dataset_loss",
    "epoch_record",
    "evaluate",
    "loss_and_correct",
    "run_epoch",
    "run_epoch_in_parts",
    "step_function",
]

THRESHOLDS = ("0.8", "0.85", "0.9")


@dataclass
class EpochResult:
    loss_sum: Tensor  # float64 scalar on the training device: the sum of the steps' losses
    seconds: float  # training time of the epoch (devices synchronized at both ends)
    steps: int

    def __add__(self, other: EpochResult) -> EpochResult:
        return EpochResult(
            self.loss_sum + other.loss_sum, self.seconds + other.seconds, self.steps + other.steps
        )


def run_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batches: Iterable[tuple[Tensor, Tensor]],
    step_loss: Callable[[Tensor, Tensor], Tensor],
    device: torch.device,
    world: int = 1,
) -> EpochResult:
    """Train one epoch; ``step_loss(x, y)`` computes the loss and its gradients and returns it.

    With ``world > 1`` (inside a torch.distributed group) the loss sum is averaged over the
    ranks before the clock stops."""
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
    if world > 1:
        dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)
        loss_sum /= world
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return EpochResult(loss_sum, time.perf_counter() - t0, steps)


def epoch_parts(steps: int, parts: int) -> list[range]:
    """The steps ``0 .. steps-1`` cut into ``min(parts, steps)`` contiguous, near-equal ranges
    (one empty range when ``steps`` is 0)."""
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise ValueError(f"parts must be an integer >= 1, got {parts!r}")
    k = max(1, min(parts, steps))
    bounds = [round(i * steps / k) for i in range(k + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:], strict=False)]


def run_epoch_in_parts(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batch: Callable[[int], tuple[Tensor, Tensor]],
    steps: int,
    step_loss: Callable[[Tensor, Tensor], Tensor],
    device: torch.device,
    *,
    world: int = 1,
    evals_per_epoch: int = 1,
    evaluate_between: Callable[[float], None] | None = None,
) -> EpochResult:
    """:func:`run_epoch` over ``batch(0) .. batch(steps - 1)`` in ``evals_per_epoch`` parts.

    Between parts (not after the last: the caller evaluates at the epoch's end)
    ``evaluate_between(seconds)`` is called with the epoch's training seconds so far; the clock
    is stopped meanwhile.  The steps and their order are the same for any number of parts."""
    parts = epoch_parts(steps, evals_per_epoch)
    total: EpochResult | None = None
    for i, part in enumerate(parts):
        result = run_epoch(
            model, optimizer, scheduler, (batch(s) for s in part), step_loss, device, world
        )
        total = result if total is None else total + result
        if evaluate_between is not None and i < len(parts) - 1:
            evaluate_between(total.seconds)
    assert total is not None
    return total


@dataclass
class AccuracyLog:
    """Every test evaluation ``(training seconds, accuracy)``, the best accuracy, and the
    training seconds to each threshold of :data:`THRESHOLDS` (``None`` until reached).

    ``time_to_accuracy`` is the first evaluation at or above a threshold (the usual definition);
    :meth:`time_to_sustained_accuracy` is the first evaluation from which every later one stays
    at or above it.  The first is biased early for a noisy run, the more so the more often it is
    evaluated; the second is not fooled by a brief rise that falls back.
    """

    history: list[tuple[float, float]] = field(default_factory=list)

    def observe(self, accuracy: float, train_seconds: float) -> None:
        self.history.append((train_seconds, accuracy))

    @property
    def best(self) -> float:
        return max((accuracy for _, accuracy in self.history), default=0.0)

    @property
    def time_to_accuracy(self) -> dict[str, float | None]:
        """Per threshold, the seconds of the first evaluation at or above it."""
        return {
            t: next((s for s, accuracy in self.history if accuracy >= float(t)), None)
            for t in THRESHOLDS
        }

    def evaluator(
        self, model: nn.Module, data: Dataset, device: torch.device, done: float
    ) -> Callable[[float], None]:
        """``evaluate_between`` for :func:`run_epoch_in_parts`: test ``model`` on ``data`` and
        record the accuracy at ``done + seconds`` (``done``: training seconds before the epoch)."""

        def observe(seconds: float) -> None:
            self.observe(evaluate(model, data, device, 512)[1], done + seconds)

        return observe

    def time_to_sustained_accuracy(self) -> dict[str, float | None]:
        """Per threshold, the seconds of the first evaluation after which none falls below it."""
        out: dict[str, float | None] = {}
        for t in THRESHOLDS:
            since: float | None = None
            for seconds, accuracy in self.history:
                if accuracy < float(t):
                    since = None
                elif since is None:
                    since = seconds
            out[t] = since
        return out


@dataclass
class LossLog:
    """Every evaluation ``(training seconds, training-set loss)`` and the time to a target loss.

    :meth:`time_to` is the first evaluation at or below ``target``; :meth:`time_to_sustained`
    the first from which every later one stays at or below it (as :class:`AccuracyLog`)."""

    history: list[tuple[float, float]] = field(default_factory=list)

    def observe(self, loss: float, train_seconds: float) -> None:
        self.history.append((train_seconds, loss))

    @property
    def best(self) -> float | None:
        return min((loss for _, loss in self.history), default=None)

    def time_to(self, target: float | None) -> float | None:
        if target is None:
            return None
        return next((s for s, loss in self.history if loss <= target), None)

    def time_to_sustained(self, target: float | None) -> float | None:
        if target is None:
            return None
        since: float | None = None
        for seconds, loss in self.history:
            if not loss <= target:  # a NaN loss counts as above
                since = None
            elif since is None:
                since = seconds
        return since

    def evaluator(
        self, model: nn.Module, data: Dataset, device: torch.device, done: float
    ) -> Callable[[float], None]:
        """``evaluate_between``: the whole training set's loss at ``done + seconds``."""

        def observe(seconds: float) -> None:
            self.observe(dataset_loss(model, data, device, 512), done + seconds)

        return observe


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


def loss_and_correct(task: str, out: Tensor, y: Tensor) -> tuple[Tensor, int, int]:
    """The batch's mean loss, and its correct predictions and their count (0 and 0 for
    reconstruction, which has no accuracy)."""
    if task == "classification":
        loss = F.cross_entropy(out, y)
        return loss, int((out.argmax(1) == y).sum()), y.numel()
    if task == "reconstruction":  # per image: summed over pixels (Hinton & Salakhutdinov)
        loss = F.binary_cross_entropy_with_logits(out, y, reduction="sum") / out.shape[0]
        return loss, 0, 0
    loss = F.binary_cross_entropy_with_logits(out, y)
    return loss, int(((out > 0).to(y.dtype) == y).sum()), y.numel()


@torch.no_grad()
def dataset_loss(
    model: nn.Module, data: Dataset, device: torch.device, batch: int, train: bool = True
) -> float:
    """The mean loss over the training set (``train``) or the test set, in eval mode."""
    x_all, y_all = (data.x_train, data.y_train) if train else (data.x_test, data.y_test)
    was = model.training
    model.eval()
    total = 0.0
    for i in range(0, x_all.shape[0], batch):
        x, y = x_all[i : i + batch].to(device), y_all[i : i + batch].to(device)
        loss, _, _ = loss_and_correct(data.task, model(x), y)
        total += float(loss) * x.shape[0]
    model.train(was)
    return total / max(1, x_all.shape[0])


@torch.no_grad()
def evaluate(
    model: nn.Module, data: Dataset, device: torch.device, batch: int
) -> tuple[float, float]:
    was = model.training
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    for i in range(0, data.x_test.shape[0], batch):
        x = data.x_test[i : i + batch].to(device)
        y = data.y_test[i : i + batch].to(device)
        loss, c, k = loss_and_correct(data.task, model(x), y)
        total_loss += float(loss) * x.shape[0]
        correct += c
        count += k
    model.train(was)
    return total_loss / data.x_test.shape[0], correct / max(1, count)


def step_function(
    task: str, model: nn.Module, preconditioner: HyLo | None
) -> Callable[[Tensor, Tensor], Tensor]:
    """Forward and backward of one batch, then HyLo's preconditioning if any; returns the loss."""

    def step(x: Tensor, y: Tensor) -> Tensor:
        loss, _, _ = loss_and_correct(task, model(x), y)
        loss.backward()
        if preconditioner is not None:
            preconditioner.step()
        return loss

    return step

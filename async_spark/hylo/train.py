"""Training entry: ``train(config) -> summary`` for HyLo and its baselines on the reference models.

Writes into ``config.out`` (when given):

* ``summary.json`` -- ``optimizer``, ``model``, ``data``, ``epochs``, ``workers``, ``wall_seconds``
  (training time, evaluation excluded), ``test_accuracy`` (final), ``best_test_accuracy``,
  ``time_to_accuracy`` (``{"0.8": s, "0.85": s, "0.9": s}``, seconds of training until the
  test accuracy first reached the threshold, or ``null``; it is measured at the end of every
  epoch and, with ``evals_per_epoch`` k > 1, also after each k-th of an epoch),
  ``time_to_sustained_accuracy`` (the same, from the first evaluation after which the accuracy
  never fell below the threshold again: not fooled by a brief rise), ``evaluations`` (every
  ``[training seconds, test accuracy]``) and the configuration;
* ``metrics.jsonl`` -- one JSON object per epoch (loss, accuracy, cumulative training seconds,
  learning rate, damping, and for HyLo the steps per method of each layer);
* ``model.pt`` -- the model's ``state_dict``.

For the reconstruction task (``model="autoencoder"``, ``data="builtin:digits"``) the summary also
has ``train_loss_evaluations`` (every ``[training seconds, training-set loss]``, evaluated with
the clock stopped at the same points as the test set), ``final_train_loss``,
``best_train_loss``, ``time_to_target_loss`` and ``time_to_sustained_target_loss`` (training
seconds until the training-set loss first reached ``target_loss``, and from when it stayed
there; ``null`` when no target was given or it was not reached); the accuracies are ``null``.

Optimizers: ``sgd`` (torch SGD with momentum), ``adam`` (torch Adam), ``hylo`` (hybrid), ``kis``, ``kid``, ``sngd`` (the
HyLo preconditioner, then SGD with momentum), and the third-party baselines ``kfac`` and ``smw``
from ASDL (``asdfghjkl``: K-FAC with the empirical Fisher and the SMW empirical natural gradient),
also followed by SGD with momentum; K-FAC gets HyLo's KL clipping (``kl_clip``, as KAISA clips
K-FAC), SMW-NGD, which preconditions inside its backward pass, runs unclipped.  ``workers > 1`` starts that many torch processes on this
machine (gloo on CPU, NCCL on CUDA): each takes a contiguous slice of every global batch, DDP
averages the gradients and HyLo distributes its inverses (HyLo and SGD only).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch
from torch import Tensor, nn

from .baselines import asdl_maker, asdl_step_function
from .comm import TorchCommunicator
from .data import BUILTIN_MODEL, DATASETS, load_dataset
from .defaults import AUTO, recommended
from .epochs import (
    THRESHOLDS,
    AccuracyLog,
    LossLog,
    dataset_loss,
    epoch_record,
    evaluate,
    loss_and_correct,
    run_epoch_in_parts,
    step_function,
)
from .preconditioner import HyLo
from .schedules import GeometricDamping, warmup_multistep

__all__ = [
    "DEFAULT_LR",
    "HYLO_METHODS",
    "MODELS",
    "OPTIMIZERS",
    "THRESHOLDS",
    "Optimizers",
    "TrainConfig",
    "build_optimizers",
    "build_replica",
    "evaluate",
    "loss_and_correct",
    "resolve_config",
    "train",
]

OPTIMIZERS = ("hylo", "kis", "kid", "sngd", "kfac", "smw", "sgd", "adam")
MODELS = ("cnn1d", "resnet32", "unet", "autoencoder")
ACTIVATIONS = ("sigmoid", "relu")
HYLO_METHODS = {"hylo": "hybrid", "kis": "kis", "kid": "kid", "sngd": "sngd"}
#: the TrainConfig fields that take the model's default when left at "auto"
AUTO_FIELDS = ("damping", "damping_target", "kl_clip", "fisher_window", "warmup_epochs")
#: learning rates where :mod:`async_spark.hylo.defaults` has none
DEFAULT_LR = {
    "sgd": 0.1,
    "hylo": 0.1,
    "kis": 0.1,
    "kid": 0.1,
    "sngd": 0.1,
    "kfac": 0.1,
    "smw": 0.1,
    "adam": 1e-3,
}


@dataclass
class TrainConfig:
    """Configuration of :func:`train` (the fields of the ``async-spark hylo`` command).

    ``lr=None`` and the fields left at ``"auto"`` (``damping``, ``damping_target``,
    ``kl_clip``, ``fisher_window``, ``warmup_epochs``) take the model's default for the
    optimizer, from :mod:`async_spark.hylo.defaults` (where each comes from is said there;
    :meth:`resolved` gives the configuration with them filled in, and the summary records
    those values); ``damping_target=None`` keeps the damping constant, ``kl_clip=None`` turns
    the clip off;
    ``kid_epochs=None`` uses the automatic hybrid switch (gradient-norm change), otherwise the
    given epoch windows.  ``fisher_window`` (HyLo) keeps the rows of the last W inverse updates in
    each kernel; ``factor_decay`` (K-FAC) keeps running averages of its Kronecker factors,
    ``factor <- decay * factor + (1 - decay) * new`` (KAISA's convention; 0 keeps the newest only).
    ``width`` (an integer >= 1, or ``None`` for the published size) sets the model's channels
    (:data:`~.models.DEFAULT_WIDTH`); ``evals_per_epoch`` (>= 1) is how often the test set is
    evaluated per epoch, with the training clock stopped (training itself is unchanged).
    ``activation`` is the autoencoder's hidden units' (``"relu"``, or ``"sigmoid"``, the
    classic); ``target_loss`` (reconstruction) the training-set loss whose time is reported.
    ``momentum`` is Adam's beta1 for ``optimizer="adam"`` (beta2 0.999). ``stop_at_target``
    ends the training at the end of the first epoch in which an evaluation reached
    ``target_loss`` (the benchmarks' time to a target needs nothing after it).
    """

    model: str = "cnn1d"
    width: int | None = None
    data: str = "builtin:mnist1d"
    optimizer: str = "hylo"
    epochs: int = 10
    batch_size: int = 128
    lr: float | None = None
    workers: int = 1
    device: str = "cpu"
    seed: int = 0
    out: str | None = None
    momentum: float = 0.9
    weight_decay: float = 5e-4
    warmup_epochs: int | str = AUTO
    lr_decay_epochs: list[int] = field(default_factory=list)
    lr_decay: float = 0.1
    damping: float | str = AUTO
    damping_target: float | str | None = AUTO
    rank_ratio: float = 0.1
    inv_update_steps: int = 10
    fisher_window: int | str = AUTO
    factor_decay: float = 0.0
    evals_per_epoch: int = 1
    kid_epochs: list[list[int]] | None = None
    switch_threshold: float = 0.1
    kl_clip: float | str | None = AUTO
    n_train: int = 1024
    n_test: int = 512
    threads: int = 1
    timeout: float = 3600.0
    activation: str = "relu"
    target_loss: float | None = None
    stop_at_target: bool = False

    def resolved(self) -> TrainConfig:
        """A copy with ``lr`` and every ``"auto"`` field set to the model's default for the
        optimizer (:func:`async_spark.hylo.defaults.recommended`)."""
        out = TrainConfig(**asdict(self))
        if self.model not in MODELS or self.optimizer not in OPTIMIZERS:
            return out  # validate() says which
        rec = recommended(self.model, self.optimizer)
        for name in AUTO_FIELDS:
            if getattr(out, name) == AUTO:
                setattr(out, name, rec[name])
        if out.lr is None:
            out.lr = rec.get("lr", DEFAULT_LR[self.optimizer])
        return out

    def validate(self) -> None:
        """Raise one ``ValueError`` per bad field, naming it and the accepted values (checked
        on :meth:`resolved`)."""
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        self.resolved()._validate()

    def _validate(self) -> None:
        def integer(name: str, lo: int) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")

        def positive(name: str, optional: bool = False) -> None:
            v = getattr(self, name)
            if optional and v is None:
                return
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or not (math.isfinite(v) and v > 0)
            ):
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")

        if self.data not in DATASETS:
            raise ValueError(f"data must be one of {DATASETS}, got {self.data!r}")
        for name, lo in (("epochs", 1), ("batch_size", 1), ("workers", 1), ("warmup_epochs", 0)):
            integer(name, lo)
        for name, lo in (("inv_update_steps", 1), ("n_train", 1), ("n_test", 1), ("threads", 1)):
            integer(name, lo)
        integer("fisher_window", 1)
        integer("evals_per_epoch", 1)
        if self.width is not None:
            integer("width", 1)
        decay = self.factor_decay
        if (
            isinstance(decay, bool)
            or not isinstance(decay, (int, float))
            or not 0.0 <= float(decay) < 1.0
        ):
            raise ValueError(f"factor_decay must be a number in [0, 1), got {decay!r}")
        if int(self.fisher_window) > 1 and self.optimizer not in HYLO_METHODS:
            raise ValueError(
                f"fisher_window applies to the HyLo optimizers {tuple(HYLO_METHODS)}, "
                f"got {self.fisher_window} with optimizer {self.optimizer!r}"
            )
        if decay and self.optimizer != "kfac":
            raise ValueError(
                f"factor_decay applies to optimizer 'kfac', got {decay} with {self.optimizer!r}"
            )
        positive("lr", optional=True)
        positive("damping")
        positive("damping_target", optional=True)
        positive("kl_clip", optional=True)
        positive("switch_threshold")
        positive("timeout")
        if not 0.0 < float(self.rank_ratio) <= 1.0:
            raise ValueError(f"rank_ratio must be a number in (0, 1], got {self.rank_ratio!r}")
        if not 0.0 <= float(self.momentum) < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        if not float(self.weight_decay) >= 0.0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        if not 0.0 < float(self.lr_decay) <= 1.0:
            raise ValueError(f"lr_decay must be in (0, 1], got {self.lr_decay!r}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {self.device!r}")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda' requested but torch.cuda.is_available() is False")
        if self.batch_size % self.workers:
            raise ValueError(
                f"batch_size must be a multiple of workers ({self.workers}), got {self.batch_size}"
            )
        if self.workers > 1 and self.optimizer in ("kfac", "smw"):
            raise ValueError(
                f"workers must be 1 for the third-party optimizer {self.optimizer!r}, "
                f"got {self.workers}"
            )
        if self.data in BUILTIN_MODEL and self.model != BUILTIN_MODEL[self.data]:
            raise ValueError(
                f"data {self.data!r} needs model {BUILTIN_MODEL[self.data]!r}, got {self.model!r}"
            )
        if self.model == "autoencoder" and self.data == "builtin:mnist1d":
            raise ValueError("model 'autoencoder' needs data 'builtin:digits' or 'synthetic'")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        positive("target_loss", optional=True)
        if self.stop_at_target and (self.target_loss is None or self.model != "autoencoder"):
            raise ValueError("stop_at_target needs target_loss and model 'autoencoder'")
        if self.stop_at_target and self.workers > 1:  # rank 0 alone decides: the others would wait
            raise ValueError(f"stop_at_target needs workers 1, got {self.workers}")


def resolve_config(config: TrainConfig | Mapping[str, Any]) -> TrainConfig:
    """A validated, resolved copy of ``config`` (a :class:`TrainConfig` or a mapping of its
    fields; unknown keys are refused): what :func:`train` and the Spark stage
    (:mod:`async_spark.gpu.hylo_stage`) run."""
    if isinstance(config, TrainConfig):
        cfg = TrainConfig(**asdict(config))
    elif isinstance(config, Mapping):
        known = {f.name for f in fields(TrainConfig)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"config: unknown keys {unknown}; accepted are {sorted(known)}")
        cfg = TrainConfig(**dict(config))
    else:
        raise ValueError(f"config must be a TrainConfig or a mapping, got {type(config).__name__}")
    cfg.validate()
    return cfg.resolved()


def train(config: TrainConfig | Mapping[str, Any]) -> dict[str, Any]:
    """Train a reference model and return the summary (also written to ``out/summary.json``).

    Parameters
    ----------
    config : TrainConfig or mapping
        See :class:`TrainConfig`.

    Returns
    -------
    dict
        The summary described in the module docstring.
    """
    cfg = resolve_config(config)
    if cfg.workers == 1:
        return _run(0, 1, asdict(cfg))
    from .distributed import launch

    with tempfile.TemporaryDirectory() as tmp:
        out = cfg.out or tmp
        params = asdict(cfg)
        params["out"] = out
        backend = "nccl" if cfg.device == "cuda" else "gloo"
        launch(
            _run_rank,
            cfg.workers,
            args=(params,),
            backend=backend,
            timeout=cfg.timeout,
            threads=cfg.threads,
        )
        with open(os.path.join(out, "summary.json")) as f:
            summary: dict[str, Any] = json.load(f)
    return summary


def _run_rank(rank: int, world: int, params: dict[str, Any]) -> None:
    _run(rank, world, params)


def build_replica(
    model_name: str,
    device: torch.device,
    world: int,
    width: int | None = None,
    activation: str = "relu",
) -> tuple[nn.Module, nn.Module, TorchCommunicator | None]:
    """This rank's model: ``(net, model, communicator)``; with ``world > 1`` the model is the DDP
    wrapper of ``net`` (which averages gradients) and HyLo gets a torch.distributed
    communicator. Shared by :func:`train` and the Spark stage's ranks."""
    from .models import build_model

    net = build_model(model_name, width, activation).to(device)
    if world == 1:
        return net, net, None
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
    return net, ddp, TorchCommunicator()


@dataclass
class Optimizers:
    """What one rank steps: torch SGD (Adam for ``adam``), its learning-rate schedule, the HyLo
    preconditioner."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    preconditioner: HyLo | None


def build_optimizers(
    cfg: TrainConfig,
    model: nn.Module,
    steps_per_epoch: int,
    communicator: Any = None,
) -> Optimizers:
    """SGD with momentum (Adam for ``adam``), the warm-up/decay schedule and, for hylo/kis/kid/sngd, the
    preconditioner on ``model`` (the DDP wrapper when distributed) with its damping schedule.

    Shared by :func:`train` and the Spark stage (:mod:`async_spark.gpu.hylo_stage`), so both
    train the same way. The ASDL baselines (kfac, smw) are built by the caller.
    """
    cfg = cfg.resolved()
    lr = cfg.lr if cfg.lr is not None else DEFAULT_LR[cfg.optimizer]
    warmup = int(cfg.warmup_epochs)
    opt: torch.optim.Optimizer
    if cfg.optimizer == "adam":
        opt = torch.optim.Adam(
            model.parameters(),
            lr=lr,
            betas=(cfg.momentum, 0.999),
            weight_decay=cfg.weight_decay,
        )
    else:
        opt = torch.optim.SGD(
            model.parameters(), lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        warmup_multistep(
            warmup * steps_per_epoch,
            [e * steps_per_epoch for e in cfg.lr_decay_epochs],
            cfg.lr_decay,
        ),
    )
    damping: float | GeometricDamping = float(cfg.damping)
    if cfg.damping_target is not None:
        decay_steps = max(1, (cfg.epochs - warmup) * steps_per_epoch)
        damping = GeometricDamping(
            start=float(cfg.damping),
            target=float(cfg.damping_target),
            warmup_steps=warmup * steps_per_epoch,
            decay_updates=max(1, decay_steps // cfg.inv_update_steps),
            update_every=cfg.inv_update_steps,
        )
    precond: HyLo | None = None
    if cfg.optimizer in HYLO_METHODS:
        precond = HyLo(
            model,
            method=HYLO_METHODS[cfg.optimizer],
            rank_ratio=cfg.rank_ratio,
            damping=damping,
            inv_update_steps=cfg.inv_update_steps,
            fisher_window=int(cfg.fisher_window),
            switch="auto" if cfg.kid_epochs is None else "epochs",
            kid_epochs=[tuple(w) for w in (cfg.kid_epochs or [])],  # type: ignore[misc]
            switch_threshold=cfg.switch_threshold,
            communicator=communicator,
            kl_clip=None if cfg.kl_clip is None else float(cfg.kl_clip),
            lr=lambda: float(opt.param_groups[0]["lr"]),
            seed=cfg.seed,
        )
    return Optimizers(opt, sched, precond)


def _run(rank: int, world: int, params: dict[str, Any]) -> dict[str, Any]:

    cfg = TrainConfig(**params).resolved()
    torch.set_num_threads(cfg.threads)
    if cfg.device == "cuda":
        device = torch.device("cuda", rank % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    torch.manual_seed(cfg.seed)
    data = load_dataset(cfg.data, cfg.model, seed=cfg.seed, n_train=cfg.n_train, n_test=cfg.n_test)
    net, model, comm = build_replica(cfg.model, device, world, cfg.width, cfg.activation)
    n = data.x_train.shape[0]
    steps_per_epoch = max(1, n // cfg.batch_size)  # drop the last partial batch
    built = build_optimizers(cfg, model, steps_per_epoch, comm)
    opt, sched, precond = built.optimizer, built.scheduler, built.preconditioner
    maker: Any = None
    if cfg.optimizer in ("kfac", "smw"):
        maker = asdl_maker(
            cfg.optimizer,
            net,
            cfg.batch_size,
            damping=float(cfg.damping),
            inv_update_steps=cfg.inv_update_steps,
            factor_decay=cfg.factor_decay,
            kl_clip=None if cfg.kl_clip is None else float(cfg.kl_clip),
            lr=lambda: float(opt.param_groups[0]["lr"]),
        )

    local = cfg.batch_size // world
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    metrics_path = os.path.join(cfg.out, "metrics.jsonl") if cfg.out and rank == 0 else None
    if metrics_path:
        os.makedirs(cfg.out or ".", exist_ok=True)
        open(metrics_path, "w").close()
    step_loss = (
        asdl_step_function(maker, model, data.task)
        if maker is not None
        else step_function(data.task, model, precond)
    )
    train_seconds = 0.0
    accuracy = AccuracyLog()
    reconstruction = data.task == "reconstruction"
    losses = LossLog()
    acc = 0.0
    diverged = False
    epochs_run = 0
    for epoch in range(cfg.epochs):
        epochs_run = epoch + 1
        if precond is not None:
            precond.set_epoch(epoch)
        perm = torch.randperm(n, generator=gen)

        def batch(s: int, perm: Tensor = perm) -> tuple[Tensor, Tensor]:
            idx = perm[s * cfg.batch_size : (s + 1) * cfg.batch_size][
                rank * local : (rank + 1) * local
            ]
            return data.x_train[idx].to(device), data.y_train[idx].to(device)

        try:
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
                    None
                    if rank != 0
                    else losses.evaluator(net, data, device, train_seconds)
                    if reconstruction
                    else accuracy.evaluator(net, data, device, train_seconds)
                ),
            )
        except torch.linalg.LinAlgError:
            if world > 1:  # the other ranks wait in a collective: fail the whole launch
                raise
            diverged = True  # non-finite curvature factors
            break
        train_seconds += result.seconds
        train_loss = float(result.loss_sum) / result.steps
        if not math.isfinite(train_loss):
            diverged = True
            break
        if rank != 0:
            continue
        test_loss, acc = evaluate(net, data, device, 512)
        if reconstruction:
            losses.observe(dataset_loss(net, data, device, 512), train_seconds)
        else:
            accuracy.observe(acc, train_seconds)
        record = epoch_record(
            epoch + 1, train_loss, result, train_seconds, opt, precond, (test_loss, acc)
        )
        if reconstruction:
            record["train_set_loss"] = losses.history[-1][1]
        if metrics_path:
            with open(metrics_path, "a") as f:
                f.write(json.dumps(record) + "\n")
        if cfg.stop_at_target and losses.time_to(cfg.target_loss) is not None:
            break
    if diverged:
        acc = 0.0
    summary: dict[str, Any] = {
        "optimizer": cfg.optimizer,
        "model": cfg.model,
        "data": cfg.data,
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
        "config": asdict(cfg),
    }
    if reconstruction:
        summary.update(
            test_accuracy=None,
            best_test_accuracy=None,
            train_loss_evaluations=[list(e) for e in losses.history],
            final_train_loss=losses.history[-1][1] if losses.history and not diverged else None,
            best_train_loss=losses.best,
            time_to_target_loss=losses.time_to(cfg.target_loss),
            time_to_sustained_target_loss=losses.time_to_sustained(cfg.target_loss),
        )
    if rank == 0 and cfg.out:
        os.makedirs(cfg.out, exist_ok=True)
        torch.save(net.state_dict(), os.path.join(cfg.out, "model.pt"))
        tmp = os.path.join(cfg.out, "summary.json.tmp")
        with open(tmp, "w") as f:
            json.dump(summary, f, indent=2)
        os.replace(tmp, os.path.join(cfg.out, "summary.json"))
    return summary

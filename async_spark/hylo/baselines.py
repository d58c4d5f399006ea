"""The third-party baselines of :func:`~async_spark.hylo.train.train`: ASDL's (``asdfghjkl``,
import ``asdl``) K-FAC and SMW-NGD, set up to be compared fairly with HyLo.

* K-FAC uses the empirical Fisher, like HyLo, refreshes its factors and inverses every
  ``inv_update_steps`` steps, like HyLo's inverse updates, and gets HyLo's KL clipping (KAISA
  clips K-FAC the same way); ``factor_decay`` gives it running-average factors.
* SMW-NGD preconditions inside its backward pass and runs unclipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .preconditioner import kl_clip_scale

__all__ = ["asdl_maker", "asdl_step_function"]


def asdl_maker(
    optimizer: str,
    net: nn.Module,
    batch: int,
    *,
    damping: float,
    inv_update_steps: int = 1,
    factor_decay: float = 0.0,
    kl_clip: float | None = None,
    lr: Callable[[], float] | None = None,
) -> Any:
    """ASDL's gradient maker for ``optimizer`` "kfac" (empirical-Fisher K-FAC, factors and
    inverses every ``inv_update_steps`` steps, running averages with ``factor_decay``, HyLo's KL
    clip when ``kl_clip`` and ``lr`` are given) or "smw" (SMW empirical natural gradient)."""
    if optimizer not in ("kfac", "smw"):
        raise ValueError(f"optimizer must be 'kfac' or 'smw', got {optimizer!r}")
    try:
        import asdl
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"optimizer {optimizer!r} needs the 'asdfghjkl' package (import asdl)"
        ) from e
    if optimizer == "kfac":
        pc = asdl.PreconditioningConfig(
            data_size=batch,
            damping=damping,
            preconditioner_upd_interval=inv_update_steps,
            curvature_upd_interval=inv_update_steps,
            # ASDL's ema_decay weighs the NEW factor (-1: no running average)
            ema_decay=1.0 - factor_decay if factor_decay > 0 else -1,
        )
        if factor_decay > 0:
            _cpu_safe_nvtx()
        maker = asdl.KfacGradientMaker(net, pc, fisher_type="fisher_emp")
        if kl_clip is not None and lr is not None:
            _clip_after_precondition(maker, net, float(kl_clip), lr)
        return maker
    return asdl.SmwEmpNaturalGradientMaker(
        net, asdl.SmwEmpNaturalGradientConfig(data_size=batch, damping=damping)
    )


def asdl_step_function(
    maker: Any, model: nn.Module, task: str
) -> Callable[[Tensor, Tensor], Tensor]:
    """Forward, backward and preconditioning of one batch through ASDL's maker; returns the loss."""
    loss_fn: Callable[..., Tensor]
    if task == "classification":
        loss_fn = F.cross_entropy
    elif task == "segmentation":
        loss_fn = F.binary_cross_entropy_with_logits
    else:
        loss_fn = _per_image_bce

    def step(x: Tensor, y: Tensor) -> Tensor:
        dummy = maker.setup_model_call(model, x)
        maker.setup_loss_call(loss_fn, dummy, y)
        _, loss = maker.forward_and_backward()
        return loss  # type: ignore[no-any-return]

    return step


def _per_image_bce(out: Tensor, y: Tensor, reduction: str = "mean") -> Tensor:
    """The reconstruction loss of :func:`~async_spark.hylo.epochs.loss_and_correct` (summed over
    an image's pixels, averaged over the batch), with the ``reduction`` option ASDL needs: its
    Fisher maker calls the loss with ``reduction="sum"`` (over the batch too), SMW-NGD with
    ``"none"`` (one loss per image)."""
    per_image = F.binary_cross_entropy_with_logits(out, y, reduction="none").flatten(1).sum(1)
    if reduction == "none":
        return per_image
    return per_image.sum() if reduction == "sum" else per_image.mean()


def _clip_after_precondition(
    maker: Any, net: nn.Module, kl_clip: float, lr: Callable[[], float]
) -> None:
    """K-FAC gets the KL clipping HyLo applies (KAISA clips K-FAC the same way), so the two are
    compared with the same stabilizer: HyLo's formula (:func:`kl_clip_scale`), summed over every
    trainable parameter ASDL preconditions (HyLo's sum covers its Linear/Conv2d layers)."""
    params = [p for p in net.parameters() if p.requires_grad]
    precondition = maker.precondition

    def clipped(*args: Any, **kwargs: Any) -> Any:
        raw = [None if p.grad is None else p.grad.clone() for p in params]
        out = precondition(*args, **kwargs)
        pairs = [
            (p.grad, g)
            for p, g in zip(params, raw, strict=True)
            if p.grad is not None and g is not None
        ]
        scale = kl_clip_scale(pairs, lr(), kl_clip)
        if scale < 1.0:
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(scale)
        return out

    maker.precondition = clipped


def _cpu_safe_nvtx() -> None:
    """ASDL's running-average path opens ``torch.cuda.nvtx`` ranges, which raise on a CPU-only
    torch build; give it no-op ranges there (profiling markers only, no effect on the math)."""
    if torch.cuda.is_available():
        return
    import contextlib
    import types

    from asdl.precondition import natural_gradient

    natural_gradient.nvtx = types.SimpleNamespace(  # type: ignore[attr-defined]
        range=lambda *args, **kwargs: contextlib.nullcontext()
    )

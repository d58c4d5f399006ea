"""Per-layer plumbing of the HyLo preconditioner: which layers, what is captured, the gradient.

* :func:`supported_layer` -- Linear, and Conv2d with ``groups == 1`` and zero padding;
  :func:`unsupported_reason` -- why another layer with weights is left unpreconditioned;
* :func:`layer_inputs` / :func:`layer_output_grads` -- the rows a_i and g_i of one batch (a
  Conv2d's unfolded patches averaged over the output positions, its output gradients summed
  over them, so that g_i a_i^T approximates the per-sample weight gradient; half-precision rows,
  as autocast or a bfloat16 model produce them, are captured in float32; an unbatched call is
  a batch of one, :func:`batched`);
* :func:`grad_matrix` / :func:`write_grad` -- a layer's gradient as one d_out x d_in matrix (bias
  as the last column) and back;
* :class:`Layer` -- what the preconditioner keeps per layer, and :class:`Capture` -- one inverse
  update's gathered rows, kept for ``fisher_window``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import kernels

__all__ = [
    "Capture",
    "Layer",
    "batched",
    "grad_matrix",
    "layer_inputs",
    "layer_output_grads",
    "supported_layer",
    "unsupported_reason",
    "write_grad",
]


def supported_layer(module: nn.Module) -> bool:
    """Whether HyLo can precondition ``module``: ``nn.Linear``, or ``nn.Conv2d`` with
    ``groups == 1`` and ``padding_mode == "zeros"`` (and a non-string padding), with its
    parameters initialized (not a lazy module before its first forward)."""
    return isinstance(module, (nn.Linear, nn.Conv2d)) and unsupported_reason(module) is None


def unsupported_reason(module: nn.Module) -> str | None:
    """Why HyLo leaves ``module`` unpreconditioned, or ``None`` when it can precondition it.

    For layers with a ``weight`` that are not Linear or Conv2d the reason names the type; for a
    Conv2d, the setting that the unfolded-patch rows do not describe; normalization layers
    and modules without a weight are not layers HyLo looks at (``None`` is not returned for
    them either: their reason says so)."""
    if isinstance(module, nn.modules.lazy.LazyModuleMixin) and module.has_uninitialized_params():
        return "a lazy module whose parameters are not initialized yet"
    if isinstance(module, nn.Conv2d):
        if module.groups != 1:
            return f"a grouped convolution (groups={module.groups})"
        if module.padding_mode != "zeros":
            return f"padding_mode={module.padding_mode!r} (only zero padding unfolds to the rows)"
        if isinstance(module.padding, str):
            return f"padding={module.padding!r} (give the padding as numbers)"
        return None
    if isinstance(module, nn.Linear):
        return None
    if not isinstance(getattr(module, "weight", None), Tensor):
        return "no weight"
    return f"{type(module).__name__} is not supported (nn.Linear and nn.Conv2d are)"


_NORMS = (
    nn.modules.batchnorm._NormBase,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.LocalResponseNorm,
)


def reportable(module: nn.Module) -> bool:
    """Whether an unsupported ``module`` is worth a log line: a layer with a trainable weight
    matrix (not a normalization layer's scale), i.e. one a user may expect to be
    preconditioned."""
    w = getattr(module, "weight", None)
    if isinstance(module, _NORMS) or not isinstance(w, Tensor):
        return False
    return bool(w.requires_grad) and (
        isinstance(module, nn.modules.lazy.LazyModuleMixin) or w.ndim >= 2
    )


@dataclass
class Capture:
    """One inverse update's gathered rows of a layer (kept for ``fisher_window``)."""

    A: Tensor
    G: Tensor
    weights: list[Tensor] | None  # KID: each rank's W_p (r_p x r_p); None for SNGD and KIS
    total: int  # rows the reductions started from, summed over ranks
    method: str
    _blocks: list[Tensor] | None = field(default=None, repr=False, compare=False)

    def core_blocks(self) -> list[Tensor]:
        """This capture's unscaled blocks of KID's core (computed once, reused over the window):
        ``W_p^{-1}`` per rank for KID; ``(m / n) I`` for a KIS or SNGD capture of m rows out of
        n, the block with which KID's formula reproduces theirs."""
        if self._blocks is None:
            if self.weights is not None:
                self._blocks = kernels.kid_block_inverses(self.weights)
            else:
                m = self.A.shape[0]
                eye = torch.eye(m, dtype=self.A.dtype, device=self.A.device)
                self._blocks = [eye * (m / self.total)]
        return self._blocks

    def to_state(self) -> dict[str, Any]:
        """Tensors and plain values (``torch.load(..., weights_only=True)`` reads them)."""
        return {
            "A": self.A,
            "G": self.G,
            "weights": list(self.weights or []),
            "total": self.total,
            "method": self.method,
        }

    @staticmethod
    def from_state(entry: dict[str, Any], device: torch.device) -> Capture:
        return Capture(
            A=entry["A"].to(device),
            G=entry["G"].to(device),
            weights=[w.to(device) for w in entry["weights"]] if entry["method"] == "kid" else None,
            total=int(entry["total"]),
            method=str(entry["method"]),
        )


@dataclass
class Layer:
    name: str
    module: nn.Module
    d_in: int
    d_out: int
    skipped: str | None = None  # why this layer stopped being preconditioned (logged once)
    frozen: bool = False  # its weight's requires_grad was False at the last check
    pending: int = 0  # forward calls at a capture step whose output gradient has not come
    A: Tensor | None = None  # captured local factors of the current update step
    G: Tensor | None = None
    # state of the last inverse update
    A_all: Tensor | None = None
    G_all: Tensor | None = None
    inverse: Tensor | None = None
    damping: float = 0.0
    method: str = ""
    norm_sum: float | Tensor = 0.0  # gradient norms since the last inverse update (a device
    norm_count: int = 0  # scalar while training, so that summing them needs no host sync)
    counts: dict[str, int] = field(default_factory=dict)
    window: deque[Capture] = field(default_factory=deque)

    @property
    def weight(self) -> Tensor:
        w = self.module.weight
        assert isinstance(w, Tensor)
        return w

    @property
    def bias(self) -> Tensor | None:
        b = getattr(self.module, "bias", None)
        return b if isinstance(b, Tensor) else None


def _capture_dtype(t: Tensor) -> Tensor:
    """float64 and float32 rows as they are; half-precision ones (autocast, bfloat16 models)
    in float32, so that kernels and inverses are always built in single precision or better."""
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def batched(module: nn.Module, t: Tensor) -> Tensor:
    """``t`` (a layer's input or output gradient) with its batch dimension: an unbatched call
    (a Linear's 1-D vector, a Conv2d's 3-D image) is a batch of one sample."""
    unbatched = t.ndim == 3 if isinstance(module, nn.Conv2d) else t.ndim == 1
    return t.unsqueeze(0) if unbatched else t


def _rows(t: Tensor) -> Tensor:
    """A Linear's (n, ..., d) tensor as n x (positions) x d (``reshape`` with -1 fails on an
    empty batch)."""
    return t.reshape(t.shape[0], math.prod(t.shape[1:-1]), t.shape[-1])


def layer_inputs(module: nn.Module, x: Tensor) -> Tensor:
    x = batched(module, _capture_dtype(x))
    if isinstance(module, nn.Conv2d):
        patches = F.unfold(
            x,
            module.kernel_size,
            dilation=module.dilation,
            padding=module.padding,  # type: ignore[arg-type]
            stride=module.stride,
        )
        a = patches.mean(dim=2)
    else:
        a = _rows(x).mean(dim=1)
    if getattr(module, "bias", None) is not None:
        a = torch.cat([a, a.new_ones(a.shape[0], 1)], dim=1)
    return a


def layer_output_grads(module: nn.Module, g: Tensor, n: int, batch_averaged: bool) -> Tensor:
    g = batched(module, _capture_dtype(g))
    if isinstance(module, nn.Conv2d):
        g = g.sum(dim=(2, 3))
    else:
        g = _rows(g).sum(dim=1)
    return g * n if batch_averaged else g


def grad_matrix(layer: Layer) -> Tensor | None:
    """The layer's gradient as one d_out x d_in matrix (bias last), in float32 or float64."""
    w = layer.weight
    if w.grad is None:
        return None
    gm = _capture_dtype(w.grad.reshape(w.shape[0], -1))
    b = layer.bias
    if b is not None:
        bg = b.grad if b.grad is not None else torch.zeros_like(b)
        gm = torch.cat([gm, bg.unsqueeze(1).to(gm.dtype)], dim=1)
    return gm


def write_grad(layer: Layer, direction: Tensor) -> None:
    w = layer.weight
    assert w.grad is not None
    direction = direction.to(w.grad.dtype)
    b = layer.bias
    if b is not None:
        w.grad.copy_(direction[:, :-1].reshape(w.shape))
        if b.grad is None:
            b.grad = torch.zeros_like(b)
        b.grad.copy_(direction[:, -1])
    else:
        w.grad.copy_(direction.reshape(w.shape))

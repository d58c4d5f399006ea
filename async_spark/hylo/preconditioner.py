"""The HyLo preconditioner: hooks on Linear/Conv2d layers, ``step()`` rewrites ``.grad``.

Used like KAISA's ``KFACPreconditioner`` (Pauloski et al., SC20/SC21), with any torch optimizer::

    precond = HyLo(model, method="hybrid", rank_ratio=0.1, damping=0.03)
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()     # hooks capture a_i and g_i on update steps
        precond.step()                      # .grad <- (F + lambda I)^{-1} .grad, per layer
        optimizer.step()

Per layer and per inverse update (every ``inv_update_steps`` steps), each rank reduces its local
rows (all of them for SNGD, ``r = ceil(rank_ratio * n)`` sampled rows for KIS, the interpolative
decomposition's rows and weight block for KID, see :mod:`async_spark.hylo.kernels`), one bucketed
all-gather collects every layer's rows, the layer's owner (assigned by cost, see
:mod:`async_spark.hylo.assignment`) builds and inverts the m' x m' matrix and broadcasts it, and
every rank preconditions every layer with it until the next update (Mu et al., HyLo, SC22).

Layer inputs and outputs: a Linear layer's input a_i (with a 1 appended for a bias) and its output
gradient g_i scaled by the local batch size n (the loss is assumed to be a batch mean; pass
``batch_averaged=False`` for a sum).  A Conv2d layer's unfolded patches are averaged over the
output positions and its output gradients summed over them, so that g_i a_i^T approximates the
per-sample weight gradient (the spatially-uncorrelated approximation of K-FAC for convolutions).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from . import kernels
from .comm import Communicator, LocalCommunicator
from .inverse_update import update_inverses
from .layers import (
    Capture,
    Layer,
    batched,
    grad_matrix,
    layer_inputs,
    layer_output_grads,
    reportable,
    supported_layer,
    unsupported_reason,
    write_grad,
)
from .schedules import EpochWindowRule, GradNormChangeRule, SwitchRule

__all__ = ["HyLo", "METHODS", "kl_clip_scale", "supported_layer"]

log = logging.getLogger(__name__)

METHODS = ("hybrid", "kid", "kis", "sngd")
_SWITCHES = ("auto", "epochs")
_ASSIGNMENTS = ("greedy", "contiguous")
#: the reason :attr:`HyLo.skipped_layers` gives for a frozen layer
FROZEN = "frozen (weight.requires_grad is False)"


def kl_clip_scale(pairs: Iterable[tuple[Tensor, Tensor]], lr: float, kl_clip: float) -> float:
    """KAISA/K-FAC's KL clipping factor ``min(1, sqrt(kl_clip / (lr^2 sum <d, g>)))`` over
    (preconditioned direction, raw gradient) pairs; 1 when the sum is not positive and finite."""
    dots = [(d * g).sum().to(torch.float64) for d, g in pairs]
    if not dots:
        return 1.0
    # one host sync for all layers (a float() per layer would stall a GPU once per layer)
    vg = float(torch.stack([t.to(dots[0].device) for t in dots]).sum()) * lr * lr
    if vg <= 0 or not math.isfinite(vg):
        return 1.0
    return min(1.0, math.sqrt(kl_clip / vg))


class HyLo:
    """Hybrid low-rank natural-gradient preconditioner (Mu et al., SC22).

    Parameters
    ----------
    model : nn.Module
        The model (or its DDP wrapper).  Hooks go on its Linear and Conv2d layers.
    method : {"hybrid", "kid", "kis", "sngd"}
        ``"sngd"`` keeps every row (exact), ``"kis"`` / ``"kid"`` one reduction throughout, and
        ``"hybrid"`` picks KID or KIS per layer at each inverse update with ``switch``.
    rank_ratio : float in (0, 1]
        rho: each rank keeps ``r = min(n, ceil(rho * n))`` of its n local rows (KIS, KID).
    damping : float or callable
        lambda > 0, or a function of the step count returning it (e.g.
        :class:`~async_spark.hylo.schedules.GeometricDamping`); read at each inverse update.
    inv_update_steps : int
        Steps between captures / inverse updates (>= 1); the inverses are reused in between.
    fisher_window : int
        Inverse updates whose gathered rows form each layer's kernel (>= 1).  With 1 (the
        paper's) the Fisher estimate is the newest batch's; with W it is the average of the last
        W batches' estimates (HyLo's counterpart of K-FAC's running-average factors): the kernel
        has W times the rows, so its rank grows W-fold while each batch's reduction and the
        all-gather stay the same; the build and inverse cost O((W m')^3).  Under hybrid
        switching a window can hold KID and KIS captures: it then uses KID's block-diagonal core,
        in which a KIS capture's block is the one that reproduces its own formula.  The window
        holds a layer's last W captures (a layer with no gradient at an update keeps its
        window as it is); it restarts when the layer's device or dtype changes.  An update
        that captured non-finite rows on any rank is skipped by every rank.
    layers : sequence of nn.Module or str, optional
        Explicit list of layers (modules or qualified names).  Each must be supported
        (:func:`supported_layer`).  By default, every supported layer of ``model``; the other
        layers with a weight matrix (a grouped or reflect-padded Conv2d, Conv1d,
        ConvTranspose2d, Embedding, an uninitialized lazy layer, ...) keep their plain
        gradient, each logged once with the reason (:attr:`skipped_layers`).
    skip_layers : sequence of str or type, optional
        Layers to leave unpreconditioned: qualified names, name substrings, or module classes.
    switch : {"auto", "epochs"} or SwitchRule
        Hybrid rule: ``"auto"`` = :class:`GradNormChangeRule` (``switch_threshold``),
        ``"epochs"`` = :class:`EpochWindowRule` (``kid_epochs``).  Epochs come from
        :meth:`set_epoch`.
    kid_epochs : sequence of (int, int)
        KID windows for ``switch="epochs"``.
    switch_threshold : float
        Relative gradient-norm change for ``switch="auto"``.
    communicator : Communicator, optional
        Collectives; :class:`LocalCommunicator` (one process) if ``None``.
    assignment : {"greedy", "contiguous"}
        How layers are assigned to ranks for the inverse: cost-balanced LPT, or the original's
        contiguous blocks.
    kl_clip : float, optional
        KAISA/K-FAC's KL clipping: scale all directions by ``min(1, sqrt(kl_clip / (lr^2 sum_l
        <d_l, g_l>)))``; needs ``lr``.
    lr : float or callable, optional
        Learning rate (or a function of no argument returning the current one) for ``kl_clip``.
    batch_averaged : bool
        Whether the loss is a mean over the local batch (output gradients are then scaled by n).
    inverse_dtype : torch.dtype, optional
        dtype in which kernels are built, inverted and applied (float64 for extra accuracy);
        the dtype of the captured factors if ``None``.
    seed : int
        Seed of the KIS sampling generator (each rank uses ``seed + 1000003 * rank``).

    Attributes
    ----------
    skipped_layers : dict of str to str
        Layers left with their plain gradient, and why: those not supported (at construction)
        and those found unusable while training -- a layer called more than once per forward
        (shared weights: its per-sample rows are not defined), one whose captured rows do not
        match its weight, or one on another device than the first preconditioned layer.  Each
        is logged once (a warning when found in training); training goes on.  A frozen layer
        (``weight.requires_grad`` False) is listed, logged and captures no rows while it is
        frozen; it is preconditioned again from the first inverse update after it is
        unfrozen.  A layer without a gradient at a step (unused in the forward, or cut off
        from the loss) keeps ``grad`` as it is (``None``) without being listed; an unbatched
        call (a 1-D input of a Linear, a 3-D one of a Conv2d) counts as a batch of one and an
        empty batch captures nothing.
    steps : int
        Calls of :meth:`step` so far.
    inverse_updates : int
        Inverse updates so far.
    last_methods : dict of str to str
        Which method's inverse each layer used at the last step (``"sgd"`` when it had none).
    method_counts : dict of str to dict of str to int
        Steps per method for each layer.
    """

    def __init__(
        self,
        model: nn.Module,
        method: str = "hybrid",
        rank_ratio: float = 0.1,
        damping: float | Callable[[int], float] = 0.03,
        inv_update_steps: int = 1,
        fisher_window: int = 1,
        layers: Sequence[nn.Module | str] | None = None,
        skip_layers: Sequence[str | type] = (),
        switch: str | SwitchRule = "auto",
        kid_epochs: Sequence[tuple[int, int]] = ((0, 10),),
        switch_threshold: float = 0.1,
        communicator: Communicator | None = None,
        assignment: str = "greedy",
        kl_clip: float | None = None,
        lr: float | Callable[[], float] | None = None,
        batch_averaged: bool = True,
        inverse_dtype: torch.dtype | None = None,
        seed: int = 0,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if (
            isinstance(rank_ratio, bool)
            or not isinstance(rank_ratio, (int, float))
            or not 0.0 < float(rank_ratio) <= 1.0
        ):
            raise ValueError(f"rank_ratio must be a number in (0, 1], got {rank_ratio!r}")
        if not callable(damping):
            kernels._check_damping(damping)
        if (
            isinstance(inv_update_steps, bool)
            or not isinstance(inv_update_steps, int)
            or inv_update_steps < 1
        ):
            raise ValueError(f"inv_update_steps must be an integer >= 1, got {inv_update_steps!r}")
        if (
            isinstance(fisher_window, bool)
            or not isinstance(fisher_window, int)
            or fisher_window < 1
        ):
            raise ValueError(f"fisher_window must be an integer >= 1, got {fisher_window!r}")
        if assignment not in _ASSIGNMENTS:
            raise ValueError(f"assignment must be one of {_ASSIGNMENTS}, got {assignment!r}")
        if kl_clip is not None:
            if (
                isinstance(kl_clip, bool)
                or not isinstance(kl_clip, (int, float))
                or not (math.isfinite(kl_clip) and kl_clip > 0)
            ):
                raise ValueError(f"kl_clip must be a finite number > 0 or None, got {kl_clip!r}")
            if lr is None:
                raise ValueError("lr must be given (a float or a callable) when kl_clip is set")
        if inverse_dtype not in (None, torch.float32, torch.float64):
            raise ValueError(
                f"inverse_dtype must be None, torch.float32 or torch.float64, got {inverse_dtype!r}"
            )
        if isinstance(switch, str):
            if switch not in _SWITCHES:
                raise ValueError(
                    f"switch must be one of {_SWITCHES} or a SwitchRule, got {switch!r}"
                )
            rule: SwitchRule = (
                GradNormChangeRule(switch_threshold)
                if switch == "auto"
                else EpochWindowRule(kid_epochs)
            )
        elif all(hasattr(switch, a) for a in ("choose", "state_dict", "load_state_dict")):
            rule = switch
        else:
            raise ValueError(f"switch must be one of {_SWITCHES} or a SwitchRule, got {switch!r}")

        self.model = model
        self.method = method
        self.rank_ratio = float(rank_ratio)
        self.damping = damping
        self.inv_update_steps = inv_update_steps
        self.fisher_window = fisher_window
        self.rule = rule
        self.comm = communicator if communicator is not None else LocalCommunicator()
        self.assignment = assignment
        self.kl_clip = None if kl_clip is None else float(kl_clip)
        self.lr = lr
        self.batch_averaged = bool(batch_averaged)
        self.inverse_dtype = inverse_dtype
        self.seed = int(seed)
        self.generator = torch.Generator().manual_seed(self.seed + 1000003 * self.comm.rank)
        self.steps = 0
        self.inverse_updates = 0
        self.epoch = 0
        self.last_methods: dict[str, str] = {}
        self.last_kl_scale = 1.0
        self.skipped_layers: dict[str, str] = {}
        self.layers = self._select_layers(layers, skip_layers)
        self._note_frozen()
        self._handles: list[Any] = []
        for layer in self.layers:
            self._handles.append(layer.module.register_forward_hook(self._make_hook(layer)))

    # ---------------------------------------------------------------- layer selection and hooks
    def _select_layers(
        self, layers: Sequence[nn.Module | str] | None, skip: Sequence[str | type]
    ) -> list[Layer]:
        named = dict(self.model.named_modules())
        by_id = {id(m): n for n, m in named.items()}
        for s in skip:
            if not isinstance(s, (str, type)):
                raise ValueError(f"skip_layers must hold names or module classes, got {s!r}")
        chosen: list[tuple[str, nn.Module]] = []
        if layers is None:
            chosen = [(n, m) for n, m in named.items() if supported_layer(m)]
            for n, m in named.items():
                why = unsupported_reason(m)
                if why is not None and reportable(m):
                    self.skipped_layers[n] = why
                    log.info("HyLo: %r keeps its plain gradient: %s", n, why)
        else:
            if isinstance(layers, (str, nn.Module)):
                raise ValueError("layers must be a sequence of modules or names, not a single one")
            for item in layers:
                if isinstance(item, str):
                    if item not in named:
                        raise ValueError(f"layers: no module named {item!r} in the model")
                    name, mod = item, named[item]
                elif isinstance(item, nn.Module) and id(item) in by_id:
                    name, mod = by_id[id(item)], item
                else:
                    raise ValueError(f"layers: {item!r} is not a module of the model")
                if not supported_layer(mod):
                    raise ValueError(
                        f"layers: {name!r} is a {type(mod).__name__}; supported are nn.Linear "
                        "and nn.Conv2d with groups=1 and padding_mode='zeros'"
                    )
                chosen.append((name, mod))

        def skipped(name: str, mod: nn.Module) -> bool:
            for s in skip:
                if isinstance(s, str) and (name == s or (s and s in name)):
                    return True
                if isinstance(s, type) and isinstance(mod, s):
                    return True
            return False

        out = []
        for name, mod in chosen:
            if skipped(name, mod):
                continue
            if isinstance(mod, nn.Linear):
                d_in, d_out = mod.in_features, mod.out_features
            else:
                assert isinstance(mod, nn.Conv2d)
                kh, kw = mod.kernel_size
                d_in, d_out = mod.in_channels * kh * kw, mod.out_channels
            d_in += 1 if getattr(mod, "bias", None) is not None else 0
            out.append(Layer(name=name, module=mod, d_in=d_in, d_out=d_out))
        if not out:
            raise ValueError("layers: the model has no supported layer left to precondition")
        return out

    def _capturing(self) -> bool:
        return (
            self.model.training
            and torch.is_grad_enabled()
            and self.steps % self.inv_update_steps == 0
        )

    def _make_hook(self, layer: Layer) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
            if layer.skipped is not None:
                return
            if not self._capturing() or not isinstance(output, Tensor) or not output.requires_grad:
                return
            if not inputs or not isinstance(inputs[0], Tensor):
                return
            if not layer.weight.requires_grad:  # frozen: no rows for a weight that won't move
                return
            x = batched(module, inputs[0].detach())
            n = x.shape[0]
            if n == 0:  # an empty batch has no rows (the layer keeps its last inverse)
                return
            # a second call before the first one's backward: shared weights, whose rows pair
            # one call's inputs with another's output gradients (gradient accumulation, a
            # backward per call, is fine)
            layer.pending += 1
            if layer.pending > 1:
                self._skip(layer, "called more than once per forward (shared weights)")
                return
            layer.A = layer_inputs(module, x)

            def grad_hook(g: Tensor) -> None:
                layer.pending = max(0, layer.pending - 1)
                if layer.skipped is None:
                    layer.G = layer_output_grads(module, g.detach(), n, self.batch_averaged)

            output.register_hook(grad_hook)

        return hook

    def _note_frozen(self) -> None:
        """Follow each layer's ``weight.requires_grad``: a frozen layer captures no rows, drops
        its inverse and window, and is listed in :attr:`skipped_layers` (logged once) until it
        is trainable again; it is then preconditioned from its next inverse update."""
        for layer in self.layers:
            frozen = not layer.weight.requires_grad
            if layer.skipped is not None or frozen == layer.frozen:
                continue
            layer.frozen = frozen
            if frozen:
                self.skipped_layers[layer.name] = FROZEN
                layer.A = layer.G = None
                layer.A_all = layer.G_all = layer.inverse = None
                layer.window.clear()
                log.info("HyLo: %r keeps its plain gradient while it is %s", layer.name, FROZEN)
            else:
                self.skipped_layers.pop(layer.name, None)
                log.info(
                    "HyLo: %r is trainable again: preconditioned from its next inverse update",
                    layer.name,
                )

    def _skip(self, layer: Layer, why: str) -> None:
        """Leave ``layer`` with its plain gradient from now on, and say why (once)."""
        if layer.skipped is None:
            log.warning(
                "HyLo: %r keeps its plain gradient from step %d: %s", layer.name, self.steps, why
            )
        layer.skipped = why
        self.skipped_layers[layer.name] = why
        layer.A = layer.G = None
        layer.A_all = layer.G_all = layer.inverse = None
        layer.window.clear()

    def _check_captured(self) -> None:
        """Skip the layers whose captured rows cannot make a kernel (see :attr:`skipped_layers`),
        before the collective update: every rank sees the same model, hence the same verdict
        for the shape checks; a device mismatch is a property of the model, too."""
        device = None
        for layer in self.layers:
            if layer.skipped is not None or layer.A is None or layer.G is None:
                continue
            A, G = layer.A, layer.G
            w = layer.weight
            d_out = int(w.shape[0])
            d_in = int(w[0].numel()) + (1 if layer.bias is not None else 0)
            if (d_in, d_out) != (layer.d_in, layer.d_out):  # a lazy layer initialized since
                layer.d_in, layer.d_out = d_in, d_out
            if A.ndim != 2 or G.ndim != 2 or A.shape[0] != G.shape[0]:
                self._skip(
                    layer,
                    f"inputs {tuple(A.shape)} and output gradients "
                    f"{tuple(G.shape)} do not give one row per sample",
                )
            elif (A.shape[1], G.shape[1]) != (d_in, d_out):
                self._skip(
                    layer,
                    f"captured rows of widths ({A.shape[1]}, {G.shape[1]}) for a "
                    f"weight of shape ({d_out}, {d_in})",
                )
            elif device is None:
                device = A.device
            elif A.device != device:
                self._skip(
                    layer,
                    f"on {A.device} while the first preconditioned layer is on "
                    f"{device} (the bucketed all-gather needs one device)",
                )

    # ---------------------------------------------------------------------- public interface
    def set_epoch(self, epoch: int) -> None:
        """Tell the preconditioner the current epoch (used by ``switch="epochs"``)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be an integer >= 0, got {epoch!r}")
        self.epoch = epoch

    def current_damping(self) -> float:
        """The damping for the next inverse update."""
        lam = self.damping(self.steps) if callable(self.damping) else self.damping
        return kernels._check_damping(lam)

    @property
    def method_counts(self) -> dict[str, dict[str, int]]:
        return {layer.name: dict(layer.counts) for layer in self.layers}

    def remove_hooks(self) -> None:
        """Remove the forward hooks (the preconditioner then only reuses stored inverses)."""
        for h in self._handles:
            h.remove()
        self._handles = []

    @torch.no_grad()
    def step(self) -> None:
        """Precondition the gradients of all layers in place (call after ``backward``).

        On an inverse-update step with captured factors this also updates the inverses (a
        collective operation: every rank must call ``step`` together).  Layers without a
        gradient are left alone; before the first inverse update gradients pass unchanged.
        """
        with self._full_precision():
            self._step()

    def _full_precision(self) -> contextlib.ExitStack:
        """Autocast off for the preconditioner's own algebra (kernels, inverses, directions are
        float32 or float64 even when ``step`` is called inside ``torch.autocast``)."""
        stack = contextlib.ExitStack()
        kinds = {layer.weight.device.type for layer in self.layers}
        for kind in sorted(kinds):
            if kind in ("cpu", "cuda"):
                stack.enter_context(torch.autocast(kind, enabled=False))
        return stack

    def _step(self) -> None:
        self._note_frozen()
        for layer in self.layers:
            layer.pending = 0
        grads = {
            layer.name: grad_matrix(layer) if layer.skipped is None else None
            for layer in self.layers
        }
        if self.method == "hybrid":  # the switch rule's signal; summed on the device, no sync
            for layer in self.layers:
                g = grads[layer.name]
                if g is not None:
                    layer.norm_sum = layer.norm_sum + torch.linalg.vector_norm(g).double()
                    layer.norm_count += 1
        if self.steps % self.inv_update_steps == 0:
            self._check_captured()
        update = self.steps % self.inv_update_steps == 0 and any(
            layer.A is not None and layer.G is not None for layer in self.layers
        )
        if update:
            self._update_inverses()
        directions: dict[str, Tensor] = {}
        for layer in self.layers:
            g = grads[layer.name]
            if g is None or layer.inverse is None:
                self.last_methods[layer.name] = "sgd"
                continue
            assert layer.A_all is not None and layer.G_all is not None
            d = kernels.woodbury_apply(
                layer.A_all, layer.G_all, layer.inverse, g.to(layer.inverse.dtype), layer.damping
            )
            directions[layer.name] = d.to(g.dtype)
            self.last_methods[layer.name] = layer.method
        scale = self._kl_scale(directions, grads)
        self.last_kl_scale = scale
        for layer in self.layers:
            if layer.name in directions:
                d = directions[layer.name]
                write_grad(layer, d * scale if scale != 1.0 else d)
        for layer in self.layers:
            m = self.last_methods.get(layer.name, "sgd")
            layer.counts[m] = layer.counts.get(m, 0) + 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug("hylo step %d methods %s", self.steps, self.last_methods)
        self.steps += 1

    def _kl_scale(self, directions: dict[str, Tensor], grads: dict[str, Tensor | None]) -> float:
        if self.kl_clip is None or not directions:
            return 1.0
        assert self.lr is not None
        lr = float(self.lr()) if callable(self.lr) else float(self.lr)
        pairs = []
        for k, d in directions.items():
            g = grads[k]
            assert g is not None
            pairs.append((d, g))
        return kl_clip_scale(pairs, lr, self.kl_clip)

    # --------------------------------------------------------------------- inverse update
    def _choose(self, layer: Layer) -> str:
        if self.method != "hybrid":
            return self.method
        norm = float(layer.norm_sum) / max(1, layer.norm_count)
        return self.rule.choose(layer.name, self.epoch, norm)

    def _update_inverses(self) -> None:
        active = [ly for ly in self.layers if ly.A is not None and ly.G is not None]
        updated = update_inverses(
            active,
            self._choose,
            comm=self.comm,
            lam=self.current_damping(),
            rank_ratio=self.rank_ratio,
            generator=self.generator,
            fisher_window=self.fisher_window,
            assignment=self.assignment,
            inverse_dtype=self.inverse_dtype,
        )
        if not updated:
            log.warning(
                "HyLo step %d: non-finite layer inputs or output gradients (a diverging run?); "
                "inverse update skipped, the previous inverses are kept",
                self.steps,
            )
            return
        for layer in active:
            layer.norm_sum, layer.norm_count = 0.0, 0
        self.inverse_updates += 1

    # ----------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Counters, schedules' state and each layer's last inverse, as tensors and plain values.

        Loadable with ``torch.load(..., weights_only=True)``.
        """
        layers: dict[str, Any] = {}
        for layer in self.layers:
            entry: dict[str, Any] = {
                "method": layer.method,
                "damping": layer.damping,
                "norm_sum": float(layer.norm_sum),
                "norm_count": layer.norm_count,
                "counts": dict(layer.counts),
            }
            if layer.inverse is not None:
                entry.update(A=layer.A_all, G=layer.G_all, inverse=layer.inverse)
            entry["window"] = [c.to_state() for c in layer.window]
            layers[layer.name] = entry
        return {
            "steps": self.steps,
            "inverse_updates": self.inverse_updates,
            "epoch": self.epoch,
            "rank": self.comm.rank,
            "generator": self.generator.get_state(),
            "rule": self.rule.state_dict(),
            "layers": layers,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` taken from a preconditioner on the same layers."""
        names = {layer.name for layer in self.layers}
        if set(state.get("layers", {})) != names:
            raise ValueError(
                f"state: layers {sorted(state.get('layers', {}))} do not match the "
                f"preconditioner's {sorted(names)}"
            )
        self.steps = int(state["steps"])
        self.inverse_updates = int(state["inverse_updates"])
        self.epoch = int(state["epoch"])
        if int(state.get("rank", 0)) == self.comm.rank:
            self.generator.set_state(state["generator"])
        else:  # another rank's state: derive a distinct stream for this rank
            self.generator.manual_seed(
                self.seed + 1000003 * self.comm.rank + 7919 * self.inverse_updates
            )
        self.rule.load_state_dict(state["rule"])
        for layer in self.layers:
            entry = state["layers"][layer.name]
            layer.method = str(entry["method"])
            layer.damping = float(entry["damping"])
            layer.norm_sum = float(entry["norm_sum"])
            layer.norm_count = int(entry["norm_count"])
            layer.counts = {str(k): int(v) for k, v in entry["counts"].items()}
            dev = layer.weight.device
            if "inverse" in entry:
                layer.A_all = entry["A"].to(dev)
                layer.G_all = entry["G"].to(dev)
                layer.inverse = entry["inverse"].to(dev)
            else:
                layer.A_all = layer.G_all = layer.inverse = None
            layer.window = deque(
                Capture.from_state(c, dev) for c in entry.get("window", [])[-self.fisher_window :]
            )
            layer.A = layer.G = None

"""One HyLo inverse update over all captured layers (Mu et al., SC22; the distribution of KAISA).

:func:`update_inverses`, collectively on every rank:

1. each rank reduces each captured layer's local rows (all of them for SNGD; for KIS
   ``r = ceil(rho n)`` importance-sampled rows, scaled by their inverse inclusion probabilities;
   for KID the interpolative decomposition's rows and weight block) into one flat buffer;
2. one all-gather of the row counts and one of the buffers (bucketed over layers);
3. each layer's gathered rows join its ``fisher_window`` (:func:`append_to_window`);
4. each layer's owner (assigned by cost) builds and inverts its m' x m' matrix, and every owner
   broadcasts its inverses;
5. every rank stores every layer's rows and inverse, to precondition until the next update.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from . import kernels
from .assignment import contiguous_assignment, greedy_assignment, inverse_cost
from .comm import Communicator
from .layers import Capture, Layer

__all__ = ["append_to_window", "update_inverses"]


def append_to_window(
    layer: Layer, capture: Capture, fisher_window: int, lam: float
) -> tuple[Tensor, Tensor, Tensor | None, int]:
    """Append ``capture`` to the layer's window; its rows (and KID core) over the window."""
    window = layer.window
    if window and (window[-1].A.device, window[-1].A.dtype) != (capture.A.device, capture.A.dtype):
        window.clear()  # the model (or inverse_dtype) moved: older rows would not combine
    window.append(capture)
    while len(window) > fisher_window:
        window.popleft()
    total = sum(c.total for c in window)
    core = None
    if any(c.method == "kid" for c in window):
        # KID's block-diagonal core over the window, as for one larger batch (a KIS or SNGD
        # capture enters with the block that turns the core into its own lambda I)
        blocks = [b for c in window for b in c.core_blocks()]
        kept = sum(c.A.shape[0] for c in window)
        core = torch.block_diag(*blocks) * (lam * total / kept)
    if len(window) == 1:
        return capture.A, capture.G, core, total
    return (
        torch.cat([c.A for c in window]),
        torch.cat([c.G for c in window]),
        core,
        total,
    )


def update_inverses(
    active: Sequence[Layer],
    choose: Callable[[Layer], str],
    *,
    comm: Communicator,
    lam: float,
    rank_ratio: float,
    generator: torch.Generator,
    fisher_window: int,
    assignment: str,
    inverse_dtype: torch.dtype | None,
) -> bool:
    """Update the inverses of the ``active`` layers (those with captured ``A`` and ``G``).

    ``choose(layer)`` names the layer's method ("sngd", "kis" or "kid") for this update. Every
    rank must call this together, with the same layers.  If any rank captured a non-finite row
    (a diverging run), every rank skips the update and keeps its inverses: returns ``False``.
    """
    flags = [
        torch.isfinite(ly.A).all() & torch.isfinite(ly.G).all()
        for ly in active
        if ly.A is not None and ly.G is not None
    ]
    finite = torch.stack(flags).all().to(torch.float64).reshape(1)
    if comm.world_size > 1:  # every rank must take the same branch (the collectives below)
        finite = torch.cat(comm.all_gather_flat(finite)).min().reshape(1)
    if not bool(finite > 0):
        for layer in active:
            layer.A = layer.G = None
        return False
    # 1. local reduction of every captured layer, packed into one flat buffer
    meta: list[int] = []
    pieces: list[Tensor] = []
    methods: list[str] = []
    ref = active[0].A
    assert ref is not None
    dtype, device = ref.dtype, ref.device
    for layer in active:
        assert layer.A is not None and layer.G is not None
        A, G = layer.A.to(dtype), layer.G.to(dtype)
        n = A.shape[0]
        method = choose(layer)
        methods.append(method)
        if method == "sngd":
            r = n
            AS, GS, W = A, G, None
        else:
            r = min(n, max(1, math.ceil(rank_ratio * n)))
            if method == "kis":
                idx, scale = kernels.kis_sample(A, G, r, generator)
                AS, GS, W = A[idx] * scale.unsqueeze(1), G[idx], None
            else:
                idx, W = kernels.kid_select(A, G, r)
                AS, GS = A[idx], G[idx]
        meta += [n, r]
        pieces += [AS.reshape(-1), GS.reshape(-1)]
        if W is not None:
            pieces.append(W.reshape(-1))
    buffer = torch.cat(pieces) if pieces else torch.zeros(0, dtype=dtype, device=device)
    # 2. one all-gather of the counts, one of the rows (bucketed over layers)
    if comm.world_size > 1:
        counts = comm.all_gather_flat(torch.tensor(meta, dtype=torch.float64, device=device))
        metas = [[int(v) for v in c.tolist()] for c in counts]
        buffers = comm.all_gather_flat(buffer)
    else:
        metas, buffers = [meta], [buffer]
    # 3. unpack every rank's rows per layer
    offsets = [0] * comm.world_size
    gathered: list[tuple[Tensor, Tensor, Tensor | None, int]] = []
    for i, layer in enumerate(active):
        As, Gs, Ws = [], [], []
        total = 0
        for p in range(comm.world_size):
            n_p, r_p = metas[p][2 * i], metas[p][2 * i + 1]
            total += n_p
            o = offsets[p]
            buf = buffers[p]
            As.append(buf[o : o + r_p * layer.d_in].reshape(r_p, layer.d_in))
            o += r_p * layer.d_in
            Gs.append(buf[o : o + r_p * layer.d_out].reshape(r_p, layer.d_out))
            o += r_p * layer.d_out
            if methods[i] == "kid":
                Ws.append(buf[o : o + r_p * r_p].reshape(r_p, r_p))
                o += r_p * r_p
            offsets[p] = o
        idt = inverse_dtype or dtype
        capture = Capture(
            A=torch.cat(As).to(idt),
            G=torch.cat(Gs).to(idt),
            # copies: a slice would keep the whole gathered buffer alive in the window
            weights=[w.to(idt, copy=True) for w in Ws] if methods[i] == "kid" else None,
            total=total,
            method=methods[i],
        )
        gathered.append(append_to_window(layer, capture, fisher_window, lam))
    # 4. owners build and invert, then broadcast per owning rank
    costs = [
        inverse_cost(a.shape[0], layer.d_in, layer.d_out)
        for (a, _, _, _), layer in zip(gathered, active, strict=True)
    ]
    if assignment == "greedy":
        owner = greedy_assignment(costs, comm.world_size)
    else:
        owner = contiguous_assignment(len(active), comm.world_size)
    inverses: list[Tensor | None] = [None] * len(active)
    for i, (A_all, G_all, core, _) in enumerate(gathered):
        if owner[i] == comm.rank:
            inverses[i] = kernels.woodbury_inverse(A_all, G_all, lam, core)
    if comm.world_size > 1:
        for src in range(comm.world_size):
            mine = [i for i in range(len(active)) if owner[i] == src]
            if not mine:
                continue
            sizes = [gathered[i][0].shape[0] for i in mine]
            idt = gathered[mine[0]][0].dtype
            if src == comm.rank:
                flat = torch.cat([inverses[i].reshape(-1) for i in mine])  # type: ignore[union-attr]
            else:
                flat = torch.empty(sum(s * s for s in sizes), dtype=idt, device=device)
            flat = comm.broadcast(flat, src)
            o = 0
            for i, s in zip(mine, sizes, strict=True):
                inverses[i] = flat[o : o + s * s].reshape(s, s)
                o += s * s
    # 5. store
    for i, layer in enumerate(active):
        layer.A_all, layer.G_all = gathered[i][0], gathered[i][1]
        layer.inverse = inverses[i]
        layer.damping = lam
        layer.method = methods[i]
        layer.A = layer.G = None
    return True

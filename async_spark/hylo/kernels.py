r"""SNGD, KIS and KID: natural-gradient directions of one layer through an n x n kernel.

Conventions (one layer, a batch of n samples)
---------------------------------------------
* ``A`` (n x d_in): layer inputs a_i, one row per sample.  When the layer has a bias the
  *caller* appends a column of ones, so that ``grad`` carries the bias as its last column.
* ``G`` (n x d_out): per-sample gradients g_i with respect to the layer outputs (for a loss
  that is a mean over the batch, the captured output gradient multiplied by n).
* ``grad`` (d_out x d_in): the gradient of the layer's weight (and bias column).
* The per-sample Jacobian is u_i = vec(g_i a_i^T), flattened like ``grad.reshape(-1)``, and the
  empirical Fisher is F = (1/n) sum_i u_i u_i^T = (1/n) U^T U with U = rows u_i.

Every direction returned here is (F + lambda I)^{-1} grad (exactly for SNGD, through a low-rank
approximation of F for KIS and KID), reshaped to d_out x d_in.

Math
----
Because u_i^T u_j = (a_i^T a_j)(g_i^T g_j), the n x n kernel is K = U U^T = (A A^T) o (G G^T)
(elementwise product), and the Woodbury identity gives

    (F + lambda I)^{-1} grad = (1/lambda) [grad - (1/n) G^T diag(c) A],
    s_i = g_i^T grad a_i,    c = (K/n + lambda I)^{-1} s,

at cost O(n^2 (d_in + d_out) + n^3), independent of d_in * d_out (Ren & Goldfarb's SMW natural
gradient, "SNGD").  HyLo (Mu, Soori, Can, Gurbuzbalaban, Mehri Dehnavi, SC22) keeps r << n rows:

* KIS (kernel importance sampling): draw r rows without replacement with probability
  p_i proportional to K_ii = |a_i|^2 |g_i|^2 (successive sampling, as the paper's
  ``torch.multinomial``) and weight each kept row by its inverse inclusion probability,
  F_S = (1/n) sum_{i in S} u_i u_i^T / pi_i, so that E[F_S] = F (Horvitz-Thompson with the
  threshold-conditioned pi_i of Cohen & Kaplan's bottom-k sketches, see :func:`kis_sample`).
  The paper's unweighted (1/r) sum_{i in S} u_i u_i^T overweights the rows it favours: its
  expectation is not F, and its directions were 2-4x further from SNGD at moderate damping.
* KID (kernel interpolative decomposition): order the rows by K_ii (a stand-in for column
  pivoting), QR-factor the reordered kernel K[:, order] = Q [R11 R12], keep the first r rows S and
  the interpolation matrix P = [I_r, T], T = R11^+ R12, so that K ~ K[:, S] P.  The induced row
  decomposition U ~ P^T U_S gives F ~ (1/n) U_S^T W U_S with W = P P^T = I + T T^T, and Woodbury
  then needs the r x r matrix

      C = (K_SS / r + (n / r) lambda W^{-1})^{-1},

  which is the formula of the paper with the block-diagonal "core" (n/r) lambda W^{-1}.  (The
  residual E of the decomposition is dropped; the later public code's
  (core + (K_SS/r)^{-1})^{-1} variant is not a Woodbury identity and is not used.)  With several
  workers each keeps its own S_p and W_p, the cores form a block-diagonal matrix, and n and r
  become the global row counts m and m' (see :func:`kid_core`).

With ``rank == n`` both reductions keep every row (W = I) and equal SNGD exactly.

All functions are pure, work on float32 and float64 tensors on any device and never modify their
inputs.  The three ``*_direction`` functions validate their arguments (one ``ValueError`` per bad
argument); the building blocks (:func:`kernel_matrix`, :func:`kis_select`, :func:`kid_select`,
:func:`kid_core`, :func:`woodbury_inverse`, :func:`woodbury_apply`) are what the distributed
preconditioner composes: reduce locally, gather the kept rows, invert once, apply everywhere.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "kernel_matrix",
    "sample_scores",
    "kis_sample",
    "kis_select",
    "kid_select",
    "kid_core",
    "kid_block_inverses",
    "woodbury_inverse",
    "woodbury_apply",
    "sngd_direction",
    "kis_direction",
    "kid_direction",
]

_FLOAT_DTYPES = (torch.float32, torch.float64)
log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------
def _check_factors(A: object, G: object, grad: object | None = None) -> None:
    for name, t in (("A", A), ("G", G)) + ((("grad", grad),) if grad is not None else ()):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in _FLOAT_DTYPES:
            raise ValueError(f"{name} must have dtype float32 or float64, got {t.dtype}")
        if t.ndim != 2:
            raise ValueError(f"{name} must be a 2-D tensor, got shape {tuple(t.shape)}")
    assert isinstance(A, Tensor) and isinstance(G, Tensor)
    if A.shape[0] < 1:
        raise ValueError("A must have at least one row (n >= 1), got n = 0")
    if G.shape[0] != A.shape[0]:
        raise ValueError(f"G must have as many rows as A (n = {A.shape[0]}), got {G.shape[0]} rows")
    if G.dtype != A.dtype or G.device != A.device:
        raise ValueError(
            f"G must have the dtype and device of A ({A.dtype}, {A.device}), "
            f"got ({G.dtype}, {G.device})"
        )
    if grad is not None:
        assert isinstance(grad, Tensor)
        want = (G.shape[1], A.shape[1])
        if tuple(grad.shape) != want:
            raise ValueError(
                f"grad must have shape (d_out, d_in) = {want}, got {tuple(grad.shape)}"
            )
        if grad.dtype != A.dtype or grad.device != A.device:
            raise ValueError(
                f"grad must have the dtype and device of A ({A.dtype}, {A.device}), "
                f"got ({grad.dtype}, {grad.device})"
            )


def _check_damping(damping: object) -> float:
    if isinstance(damping, bool) or not isinstance(damping, (int, float)):
        raise ValueError(f"damping must be a finite number > 0, got {damping!r}")
    value = float(damping)
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"damping must be a finite number > 0, got {damping!r}")
    return value


def _check_rank(rank: object, n: int) -> int:
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= n:
        raise ValueError(f"rank must be an integer in [1, n] = [1, {n}], got {rank!r}")
    return rank


# --------------------------------------------------------------------------------------------
# building blocks (no validation: called by the preconditioner on checked inputs)
# --------------------------------------------------------------------------------------------
def kernel_matrix(A: Tensor, G: Tensor) -> Tensor:
    """Return the n x n kernel ``K = U U^T = (A A^T) o (G G^T)``.

    Parameters
    ----------
    A : Tensor, shape (n, d_in)
        Layer inputs (with a ones column for a bias).
    G : Tensor, shape (n, d_out)
        Per-sample output gradients.

    Returns
    -------
    Tensor, shape (n, n)
        ``K[i, j] = (a_i . a_j)(g_i . g_j) = u_i . u_j`` with ``u_i = vec(g_i a_i^T)``.
    """
    return (A @ A.T) * (G @ G.T)


def sample_scores(A: Tensor, G: Tensor) -> Tensor:
    """Return the kernel diagonal ``K_ii = |a_i|^2 |g_i|^2 = |u_i|^2`` (shape (n,))."""
    return (A * A).sum(dim=1) * (G * G).sum(dim=1)


def kis_sample(
    A: Tensor, G: Tensor, rank: int, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """KIS's rows and their importance weights: ``rank`` rows drawn without replacement with
    ``p_i`` proportional to ``K_ii``, each with the scale that makes the Fisher estimate unbiased.

    Sequential sampling without replacement is drawn in one shot with the Gumbel-top-k trick
    (keys ``log K_ii + Gumbel``, i.e. ``K_ii / E_i`` with ``E_i`` exponential; the ``rank``
    largest keys).  Conditioned on ``t``, the ``(rank + 1)``-th largest ``K_ii / E_i``, row i is
    kept with probability ``pi_i = 1 - exp(-K_ii / t)`` (Cohen & Kaplan, "Summarizing data using
    bottom-k sketches", PODC 2007), so ``(1/n) sum_{i in S} u_i u_i^T / pi_i`` is an unbiased
    estimate of F; with ``rank == n`` every ``pi_i`` is 1.  Rows with ``K_ii = 0`` are taken only
    after every row with positive probability (their u_i is 0: weight 1); if no score is positive
    (or a score is not finite), the draw is uniform.

    Parameters
    ----------
    A, G : Tensor
        Factors of the layer, see the module docstring.
    rank : int
        Number of rows to keep, ``1 <= rank <= n``.
    generator : torch.Generator, optional
        Source of randomness (any device); the global generator of ``A``'s device if ``None``.

    Returns
    -------
    idx : Tensor of int64, shape (rank,)
        Sorted row indices.
    scale : Tensor, shape (rank,), dtype of ``A``
        ``sqrt(rank / (n pi_i))``: with the kept rows of ``A`` multiplied by it, the usual
        ``(1/rank) sum`` over the kept rows is the unbiased estimate ``(1/n) sum u_i u_i^T /
        pi_i`` (what :func:`kis_direction` and the preconditioner use).
    """
    n = A.shape[0]
    scores = sample_scores(A, G).to(torch.float64)
    if not bool(torch.isfinite(scores).all()) or float(scores.sum()) <= 0.0:
        scores = torch.ones_like(scores)
    rand_device = generator.device if generator is not None else A.device
    u = torch.rand(n, generator=generator, dtype=torch.float64, device=rand_device).to(A.device)
    u = u.clamp(min=1e-300, max=1.0 - 1e-16)
    keys = torch.log(scores) - torch.log(-torch.log(u))
    top = torch.topk(keys, min(n, rank + 1), largest=True, sorted=True).indices
    idx = top[:rank]
    pi = torch.ones(rank, dtype=torch.float64, device=A.device)
    if rank < n:
        t = torch.exp(keys[top[rank]])  # the threshold K_t / E_t (0 when it is a zero row)
        w = scores[idx]
        pos = (w > 0) & (t > 0)
        pi = torch.where(pos, -torch.expm1(-w / torch.where(t > 0, t, 1.0)), pi)
        pi = pi.clamp(min=1e-300)
    scale = torch.sqrt(rank / (n * pi)).to(A.dtype)
    order = torch.argsort(idx)
    return idx[order], scale[order]


def kis_select(A: Tensor, G: Tensor, rank: int, generator: torch.Generator | None = None) -> Tensor:
    """The row indices of :func:`kis_sample` (sorted, shape (rank,)), without the weights."""
    return kis_sample(A, G, rank, generator)[0]


def kid_select(A: Tensor, G: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """Interpolative decomposition of the local kernel: kept rows and their weight matrix.

    Orders the columns of ``K`` by ``K_ii`` (descending, stable), computes ``R`` of the QR
    factorization ``K[:, order] = Q R`` and the interpolation matrix ``P = [I_r, T]`` with
    ``T = R11^+ R12``, so that ``K ~ K[:, S] P`` for the first ``r`` ordered columns ``S``.

    Parameters
    ----------
    A, G : Tensor
        Factors of the layer.
    rank : int
        Number of rows to keep, ``1 <= rank <= n``.

    Returns
    -------
    idx : Tensor of int64, shape (rank,)
        Kept rows ``S`` (in pivot order).
    weights : Tensor, shape (rank, rank)
        ``W = P P^T = I + T T^T`` (the identity when ``rank == n``), so that the layer's
        ``U^T U ~ U_S^T W U_S``.

    Notes
    -----
    Cost O(n^2 (d_in + d_out) + n^3) for the kernel and its QR, O(r^3) for the pseudo-inverse of
    ``R11`` (robust when the kernel has rank below ``r``).
    """
    n = A.shape[0]
    K = kernel_matrix(A, G)
    order = torch.sort(torch.diagonal(K), descending=True, stable=True).indices
    idx = order[:rank]
    eye = torch.eye(rank, dtype=A.dtype, device=A.device)
    if rank == n:
        return idx, eye
    R = torch.linalg.qr(K[:, order], mode="r").R
    T = torch.linalg.pinv(R[:rank, :rank]) @ R[:rank, rank:]
    return idx, eye + T @ T.T


def kid_core(weights: Sequence[Tensor], damping: float, total_rows: int) -> Tensor:
    """Block-diagonal KID core ``(m / m') lambda blockdiag(W_1^{-1}, ..., W_P^{-1})``.

    Parameters
    ----------
    weights : sequence of Tensor
        Each worker's ``W_p`` from :func:`kid_select` (r_p x r_p), in the order in which the
        workers' kept rows are stacked.
    damping : float
        lambda > 0.
    total_rows : int
        m, the number of rows the reductions started from (summed over workers).

    Returns
    -------
    Tensor, shape (m', m') with m' = sum_p r_p
        The matrix to pass as ``core`` to :func:`woodbury_inverse`.
    """
    kept = sum(int(w.shape[0]) for w in weights)
    return torch.block_diag(*kid_block_inverses(weights)) * (damping * total_rows / kept)


def kid_block_inverses(weights: Sequence[Tensor]) -> list[Tensor]:
    """``[W_1^{-1}, ..., W_P^{-1}]``: the unscaled blocks of :func:`kid_core`.

    By Cholesky; when rounding defeats it (``T`` with huge entries, where ``I`` is lost in
    ``I + T T^T``), by an eigendecomposition with the eigenvalues clamped to 1, the smallest
    that ``W = I + T T^T`` can have."""
    out = []
    for w in weights:
        ws = _sym(w)
        L, info = torch.linalg.cholesky_ex(ws)
        if int(info) == 0:
            out.append(torch.cholesky_inverse(L))
            continue
        ws = torch.nan_to_num(ws, nan=0.0, posinf=0.0, neginf=0.0)
        vals, vecs = torch.linalg.eigh(ws.double())
        inv = (vecs / vals.clamp(min=1.0)) @ vecs.T
        out.append(inv.to(w.dtype))
    return out


def _sym(M: Tensor) -> Tensor:
    return 0.5 * (M + M.T)


def woodbury_inverse(A: Tensor, G: Tensor, damping: float, core: Tensor | None = None) -> Tensor:
    """Return ``C = (K/m + core)^{-1}`` for the m kept rows (``core = lambda I`` by default).

    Parameters
    ----------
    A : Tensor, shape (m, d_in)
    G : Tensor, shape (m, d_out)
        The (gathered) kept rows.
    damping : float
        lambda > 0.
    core : Tensor, shape (m, m), optional
        KID's block-diagonal core (:func:`kid_core`); ``lambda I`` (SNGD and KIS) if ``None``.

    Returns
    -------
    Tensor, shape (m, m)
        The symmetric positive definite inverse, by Cholesky (falling back to an LU inverse when
        rounding makes the Cholesky factorization fail).  When neither works (rows so large
        that the kernel overflows) it returns zeros, with a warning: the direction is then the
        damped gradient ``grad / lambda``, and training goes on.
    """
    m = A.shape[0]
    if core is None:
        core = damping * torch.eye(m, dtype=A.dtype, device=A.device)
    M = kernel_matrix(A, G) / m + core
    M = _sym(M)
    if bool(torch.isfinite(M).all()):
        L, info = torch.linalg.cholesky_ex(M)
        if int(info) == 0:
            return torch.cholesky_inverse(L)
        inv, info = torch.linalg.inv_ex(M)
        if int(info) == 0 and bool(torch.isfinite(inv).all()):
            return _sym(inv)
    log.warning(
        "HyLo: a %d x %d kernel could not be inverted (non-finite or singular): this "
        "layer's direction is grad / damping until the next inverse update",
        m,
        m,
    )
    return torch.zeros_like(M)


def woodbury_apply(A: Tensor, G: Tensor, inverse: Tensor, grad: Tensor, damping: float) -> Tensor:
    """Apply ``(1/lambda) [grad - (1/m) G^T diag(C s) A]`` with ``s_i = g_i^T grad a_i``.

    Parameters
    ----------
    A, G : Tensor
        The m kept rows (as passed to :func:`woodbury_inverse`).
    inverse : Tensor, shape (m, m)
        ``C`` from :func:`woodbury_inverse`.
    grad : Tensor, shape (d_out, d_in)
        The gradient to precondition.
    damping : float
        The lambda that ``C`` was built with.

    Returns
    -------
    Tensor, shape (d_out, d_in)
    """
    m = A.shape[0]
    s = ((G @ grad) * A).sum(dim=1)
    c = inverse @ s
    return (grad - (G * c.unsqueeze(1)).T @ A / m) / damping


# --------------------------------------------------------------------------------------------
# validating wrappers
# --------------------------------------------------------------------------------------------
def sngd_direction(A: Tensor, G: Tensor, grad: Tensor, damping: float) -> Tensor:
    """Exact natural-gradient direction ``(F + lambda I)^{-1} grad`` through the n x n kernel.

    Parameters
    ----------
    A : Tensor, shape (n, d_in)
        Layer inputs, ones column appended by the caller for a bias.
    G : Tensor, shape (n, d_out)
        Per-sample output gradients.
    grad : Tensor, shape (d_out, d_in)
        Gradient of the layer's parameters.
    damping : float
        lambda > 0.

    Returns
    -------
    Tensor, shape (d_out, d_in)

    Raises
    ------
    ValueError
        For a non-positive damping or inconsistent shapes, dtypes or devices.

    Notes
    -----
    F = (1/n) sum_i vec(g_i a_i^T) vec(g_i a_i^T)^T; the Woodbury identity
    (F + lambda I)^{-1} = (1/lambda)[I - U^T (U U^T + n lambda I)^{-1} U] (SMW natural gradient,
    Ren & Goldfarb 2019; SNGD in HyLo, SC22).
    """
    _check_factors(A, G, grad)
    lam = _check_damping(damping)
    return woodbury_apply(A, G, woodbury_inverse(A, G, lam), grad, lam)


def kis_direction(
    A: Tensor,
    G: Tensor,
    grad: Tensor,
    damping: float,
    rank: int,
    generator: torch.Generator | None = None,
) -> Tensor:
    """HyLo's KIS direction: SNGD on ``rank`` rows sampled with ``p_i`` proportional to K_ii,
    weighted by their inverse inclusion probabilities.

    Parameters
    ----------
    A, G, grad, damping
        As in :func:`sngd_direction`.
    rank : int
        Rows kept, ``1 <= rank <= n``; ``rank == n`` equals SNGD.
    generator : torch.Generator, optional
        Randomness of the sampling (see :func:`kis_select`).

    Returns
    -------
    Tensor, shape (d_out, d_in)
        ``(F_S + lambda I)^{-1} grad`` with ``F_S = (1/n) sum_{i in S} u_i u_i^T / pi_i`` (the
        unbiased estimate of :func:`kis_sample`).
    """
    _check_factors(A, G, grad)
    lam = _check_damping(damping)
    r = _check_rank(rank, A.shape[0])
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}"
        )
    idx, scale = kis_sample(A, G, r, generator)
    AS, GS = A[idx] * scale.unsqueeze(1), G[idx]
    return woodbury_apply(AS, GS, woodbury_inverse(AS, GS, lam), grad, lam)


def kid_direction(A: Tensor, G: Tensor, grad: Tensor, damping: float, rank: int) -> Tensor:
    """HyLo's KID direction: Woodbury on the interpolative decomposition ``K ~ K[:, S] P``.

    Parameters
    ----------
    A, G, grad, damping
        As in :func:`sngd_direction`.
    rank : int
        Rows kept, ``1 <= rank <= n``; ``rank == n`` equals SNGD.

    Returns
    -------
    Tensor, shape (d_out, d_in)
        ``(1/lambda)[grad - (1/r) G_S^T diag(C s_S) A_S]`` with
        ``C = (K_SS/r + (n/r) lambda W^{-1})^{-1}`` (see the module docstring).
    """
    _check_factors(A, G, grad)
    lam = _check_damping(damping)
    n = A.shape[0]
    r = _check_rank(rank, n)
    idx, W = kid_select(A, G, r)
    AS, GS = A[idx], G[idx]
    C = woodbury_inverse(AS, GS, lam, kid_core([W], lam, n))
    return woodbury_apply(AS, GS, C, grad, lam)

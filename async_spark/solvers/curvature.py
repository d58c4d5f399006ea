"""Curvature of a dataset, measured over its blocks on the driver (for automatic step sizes)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from async_spark.data.blocks import BlockSource, DatasetDescriptor, get_block
from async_spark.data.frame import augmented_gram

__all__ = ["gram_max_eigenvalue"]


#: Dense data with at most this many columns gets its Gram matrix in one pass (n d^2 flops, a
#: d x d array) instead of up to 50 power-iteration passes: at 10^6 x 20 that is 0.1 s
#: against 2.4 s, most of a default run's setup (benchmarks/peers.py, dense-1e6).
EXACT_GRAM_MAX_D = 1024


def gram_max_eigenvalue(
    source: BlockSource,
    desc: DatasetDescriptor,
    *,
    intercept: bool = True,
    iters: int = 50,
    tol: float = 1e-6,
    seed: int = 0,
) -> float:
    r""":math:`\lambda_{\max}(\tilde X^T\tilde X/n)` with :math:`\tilde x_i = (x_i, 1)`, over the
    blocks (each block read from this process's cache), unless the source measured it where its
    rows live (``desc.gram_max``: a DataFrame's partitions). The rows are read as the model reads
    them: minus the source's implicit ``center`` when it has one. Dense blocks of at most
    :data:`EXACT_GRAM_MAX_D` columns: the exact eigenvalue of the Gram matrix accumulated in one
    pass; otherwise power iteration (``iters``, ``tol``, ``seed``)."""
    if desc.gram_max is not None:
        return desc.gram_max[1 if intercept else 0]
    if desc.max_row_norm_sq is None:  # a frame opened with measure_rows=False
        raise RuntimeError(
            f"the Gram matrix's largest eigenvalue of {desc.dataset_id} was not measured "
            "(open_frame(..., measure_rows=True))"
        )
    center = getattr(source, "center", None)
    if not desc.sparse and desc.d <= EXACT_GRAM_MAX_D:
        return _exact(source, desc, intercept, center)
    d = desc.d + (1 if intercept else 0)
    v = np.random.default_rng(seed).standard_normal(d)
    v /= np.linalg.norm(v)
    lam = 0.0
    for _ in range(iters):
        w = np.zeros(d)
        # the shift every row's product gets: the intercept's entry, minus c.v when centered
        shift = (v[-1] if intercept else 0.0) - (
            0.0 if center is None else float(center @ v[: desc.d])
        )
        total = 0.0  # sum over the rows of xv, for the centered and the intercept's entries
        for p in range(desc.num_blocks):
            X = get_block(source, p).X
            xv = np.asarray(X @ v[: desc.d]).ravel() + shift
            w[: desc.d] += X.T @ xv if not sp.issparse(X) else np.asarray(X.T @ xv).ravel()
            total += float(xv.sum())
        if center is not None:
            w[: desc.d] -= center * total
        if intercept:
            w[-1] += total
        w /= desc.n
        new = float(v @ w)
        norm = np.linalg.norm(w)
        if norm == 0:
            return 0.0
        v = w / norm
        if abs(new - lam) <= tol * max(new, 1e-12):
            return new
        lam = new
    return lam


def _exact(source: BlockSource, desc: DatasetDescriptor, intercept: bool, center: Any) -> float:
    """The largest eigenvalue of the (centered, intercept-augmented) Gram matrix over ``n``."""
    d = desc.d
    G = np.zeros((d + 1, d + 1))
    for p in range(desc.num_blocks):
        G += augmented_gram(np.asarray(get_block(source, p).X, dtype=np.float64))
    if center is not None:  # (x - c, 1) = T (x, 1) with T = [[I, -c], [0, 1]]: G -> T G T^T
        T = np.eye(d + 1)
        T[:d, d] = -np.asarray(center, dtype=np.float64)
        G = T @ G @ T.T
    if not intercept:
        G = G[:d, :d]
    return float(max(np.linalg.eigvalsh(G / desc.n)[-1], 0.0))

"""Curvature of a dataset, measured over its blocks on the driver (for automatic step sizes)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from async_spark.data.blocks import BlockSource, DatasetDescriptor, get_block

__all__ = ["gram_max_eigenvalue"]


def gram_max_eigenvalue(
    source: BlockSource,
    desc: DatasetDescriptor,
    *,
    intercept: bool = True,
    iters: int = 50,
    tol: float = 1e-6,
    seed: int = 0,
) -> float:
    r""":math:`\lambda_{\max}(\tilde X^T\tilde X/n)` with :math:`\tilde x_i = (x_i, 1)`, by power
    iteration over the blocks (each block read from this process's cache), unless the source
    measured it where its rows live (``desc.gram_max``: a DataFrame's partitions). The rows are
    read as the model reads them: minus the source's implicit ``center`` when it has one."""
    if desc.gram_max is not None:
        return desc.gram_max[1 if intercept else 0]
    center = getattr(source, "center", None)
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

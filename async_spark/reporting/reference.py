"""A reference optimum of a linear run's objective, computed off the clock and cached.

Relative suboptimality :math:`(F(\\theta) - F^*) / |F^*|` needs :math:`F^*`, the minimum of the
objective the run minimized: mean loss over the training rows (the rows as the run saw them, i.e.
standardized when the run standardized) + :math:`\\tfrac{\\lambda_2}{2}\\|W\\|^2`, intercept
unpenalized. :func:`reference_optimum` computes it on the driver with scipy's L-BFGS-B to a
projected-gradient norm of ``gtol`` (the objective is smooth and strongly convex for
``l2 > 0``), using the same loss and gradient functions as the workers
(:mod:`async_spark.models.linear`), and caches the result as JSON keyed by the dataset id and
the model (loss, l2, l1). With ``l1 > 0`` the objective is not smooth and no reference is
computed here.

Unlike the rest of :mod:`async_spark.reporting` this module imports the model functions (lazily,
inside the function), so the package stays importable without them.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["Reference", "reference_optimum", "relative_suboptimality"]


class Reference(dict):  # type: ignore[type-arg]
    """``{"objective", "gradient_norm", "iterations", "seconds", "method", "key", ...}``."""

    @property
    def objective(self) -> float:
        return float(self["objective"])


def relative_suboptimality(objective: float, optimum: float) -> float:
    """:math:`(F - F^*) / |F^*|` (``F - F^*`` when :math:`F^* = 0`)."""
    gap = float(objective) - float(optimum)
    return gap / abs(optimum) if optimum != 0 else gap


def _digest(values: tuple[float, ...] | None) -> str | None:
    if values is None:
        return None
    return hashlib.blake2b(repr(values).encode(), digest_size=10).hexdigest()


def reference_optimum(
    source: Any,
    model: Any,
    *,
    dataset_id: str,
    cache: str | os.PathLike[str] | None = None,
    gtol: float = 1e-9,
    max_iterations: int = 5000,
) -> Reference:
    """Minimize the run's objective over all blocks of ``source`` with L-BFGS-B.

    Parameters
    ----------
    source : BlockSource
        The blocks the run trained on (as ``open_dataset`` returned them).
    model : LinearModel
        The run's model (loss, d, l2); ``l1`` must be 0.
    dataset_id : str
        Identifies the data in the cache key (``DatasetDescriptor.dataset_id``).
    cache : path, optional
        A JSON file: reused when its key matches, else (re)written.
    gtol, max_iterations
        L-BFGS-B stops at a projected gradient of max-norm ``gtol`` or after this many
        iterations; both are recorded.
    """
    if model.l1 != 0:
        raise ValueError("a reference optimum needs a smooth objective (l1 = 0)")
    key = {
        "dataset_id": dataset_id,
        "loss": model.loss,
        "d": int(model.num_features),
        "classes": model.num_classes,
        "l2": float(model.l2),
        "penalty_scale": _digest(model.penalty_scale),
        "gtol": gtol,
    }
    if not model.fit_intercept:  # (the keys of runs with an intercept stay as they were)
        key["fit_intercept"] = False
    path = None if cache is None else Path(cache)
    if path is not None and path.is_file():
        try:
            stored = json.loads(path.read_text())
            if stored.get("key") == key:
                return Reference(stored, cached=True)
        except (OSError, ValueError):
            pass
    import numpy as np
    from scipy.optimize import minimize

    from async_spark.models.linear import (
        full_gradient,
        init_params,
        objective,
    )

    blocks = [source.load(i) for i in range(source.num_blocks)]
    t0 = time.perf_counter()

    def fun(theta: np.ndarray) -> tuple[float, np.ndarray]:
        return objective(model, theta, blocks), full_gradient(model, theta, blocks)

    res = minimize(
        fun,
        init_params(model),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": max_iterations, "gtol": gtol, "ftol": 0.0, "maxcor": 20},
    )
    grad = full_gradient(model, res.x, blocks)
    ref = Reference(
        objective=float(res.fun),
        gradient_norm=float(np.linalg.norm(grad)),
        iterations=int(res.nit),
        seconds=time.perf_counter() - t0,
        method=f"scipy L-BFGS-B (gtol={gtol:g}, maxiter={max_iterations})",
        converged=bool(res.success),
        message=str(res.message),
        key=key,
        cached=False,
    )
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps({k: v for k, v in ref.items() if k != "cached"}, indent=2))
        os.replace(tmp, path)
    return ref

"""Run outputs, written atomically: ``summary.json``, ``trace.jsonl``, ``model.npz``.

Each file is written to a temporary name in the output folder and renamed into place, so a reader
(or a crash) never sees a half-written file; nothing is written before the run has finished.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import numpy as np

from async_spark.models.linear import split_params

__all__ = [
    "atomic_write",
    "json_bytes",
    "jsonl_bytes",
    "load_linear_model",
    "original_scale",
    "write_run",
]


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], object]) -> None:
    """Call ``write(fh)`` on a temporary file next to ``path``, fsync it, rename it to ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def json_bytes(obj: Any) -> bytes:
    """``obj`` as indented JSON with sorted keys (the format of ``summary.json``)."""
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def jsonl_bytes(records: Iterable[dict[str, Any]]) -> bytes:
    """One JSON object per line (the format of ``trace.jsonl``)."""
    return b"".join((json.dumps(r) + "\n").encode() for r in records)


def original_scale(model: Any, theta: np.ndarray, source: Any) -> tuple[np.ndarray, np.ndarray]:
    r"""Weights ``(K, d)`` and intercepts ``(K,)`` for the raw features of a model trained on
    standardized ones: with :math:`x' = (x - m)/s`, :math:`w'^T x' + b' = (w'/s)^T x + (b' -
    (w'/s)^T m)` (sparse data, centered implicitly by the model: :math:`b' - w'^T c` with
    :math:`c = m/s`, the same). A source that standardizes nothing gives the weights as they
    are."""
    w, b = split_params(model, theta)
    W = np.atleast_2d(np.asarray(w, dtype=np.float64))
    B = np.atleast_1d(np.asarray(b, dtype=np.float64)).copy()
    center = getattr(source, "center", None)
    if center is not None:
        B = B - W @ np.asarray(center)
    scale = getattr(source, "scale", None)
    if scale is not None:
        W = W / np.asarray(scale)[None, :]
        mean = getattr(source, "mean", None)
        if mean is not None:
            B = B - W @ np.asarray(mean)
    if not (np.all(np.isfinite(W)) and np.all(np.isfinite(B))):
        raise FloatingPointError("the fitted coefficients are not finite; try a smaller step")
    return W, B


def write_run(result: Any, out_dir: str | os.PathLike[str]) -> None:
    """Write a :class:`~async_spark.solvers.linear.TrainResult` into ``out_dir``.

    ``model.npz`` holds ``weights`` and ``intercept`` for the raw features (a model trained on
    standardized features is rescaled, see :func:`original_scale`): ``weights`` has shape ``(d,)``
    and ``intercept`` is a scalar for one output, ``(K, d)`` and ``(K,)`` for softmax.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    W, B = original_scale(result.model, result.theta, result.source)
    weights, intercept = (W[0], B[0]) if result.model.outputs == 1 else (W, B)
    summary = result.summary()
    trace = result.trace
    atomic_write(
        out / "model.npz",
        lambda fh: np.savez(
            fh,
            weights=np.asarray(weights, dtype=np.float64),
            intercept=np.asarray(intercept, dtype=np.float64),
            classes=np.asarray(result.descriptor.classes or (), dtype=np.float64),
        ),
    )
    atomic_write(out / "trace.jsonl", lambda fh: fh.write(jsonl_bytes(trace)))
    atomic_write(out / "summary.json", lambda fh: fh.write(json_bytes(summary)))


def load_linear_model(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read ``model.npz`` (never with pickle)."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}

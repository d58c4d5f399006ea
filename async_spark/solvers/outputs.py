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

__all__ = ["atomic_write", "json_bytes", "jsonl_bytes", "load_linear_model", "write_run"]


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


def write_run(result: Any, out_dir: str | os.PathLike[str]) -> None:
    """Write a :class:`~async_spark.solvers.linear.TrainResult` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    weights, intercept = split_params(result.model, result.theta)
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

"""Checkpoints of a training run: arrays + JSON with a checksum, written atomically, never pickled.

Layout under the run's output folder::

    DIR/checkpoints/ckpt-0000000120/
        arrays.npz      theta, the update rule's state arrays ("state.<field>"), snapshots
        state.json      counters, scalar state fields, block task counts, RNG seed, config, trace
        manifest.json   sha256 of the two files above (written last)

A checkpoint folder is written under a temporary name and renamed into place, so a crash leaves
either the whole checkpoint or none; the last ``keep`` are kept. :func:`load_latest` verifies the
checksums and falls back to the previous checkpoint when the newest one is damaged.

Everything needed to continue is here: the model, the rule's state (SAGA's table, momentum
buffers, the step count), the version clock, the engine's counters (dispatched, accepted,
rejected, cancelled, failed, staleness histograms; tasks in flight at the checkpoint count as
cancelled), the straggler models' measured base time, the trace (rejected results included) and
each block's task count — which seeds the
samples of its next task, so that a synchronous seeded run resumed from a checkpoint draws the
same samples and ends with exactly the same model as an uninterrupted run.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "check_compatible",
    "load_latest",
    "save_checkpoint",
    "state_from_parts",
]

FORMAT_VERSION = 2  # 2: tuple-valued state fields (SAGA's table by block)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used (missing, damaged, or of another run)."""


@dataclass
class Checkpoint:
    path: Path
    updates: int
    version: int
    seconds: float
    theta: np.ndarray
    state_arrays: dict[str, np.ndarray]
    state_scalars: dict[str, Any]
    block_tasks: list[int]
    config: dict[str, Any]
    trace: list[dict[str, Any]]
    snapshots: list[tuple[float, int, np.ndarray]]
    engine: dict[str, Any] = field(default_factory=dict)  # the engine's counters, straggler base


def _state_parts(state: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    arrays: dict[str, np.ndarray] = {}
    scalars: dict[str, Any] = {}
    for name, value in state._asdict().items():
        if isinstance(value, np.ndarray):
            arrays[name] = value
        elif isinstance(value, tuple) and all(isinstance(v, np.ndarray) for v in value):
            # A tuple of arrays (e.g. SAGA's table by block): one entry per element.
            scalars[f"{name}.len"] = len(value)
            arrays.update({f"{name}.{i}": v for i, v in enumerate(value)})
        elif isinstance(value, int | float | np.integer | np.floating):
            scalars[name] = value.item() if hasattr(value, "item") else value
        else:
            raise CheckpointError(f"cannot checkpoint state field {name!r} of type {type(value)}")
    return arrays, scalars


def _array(name: str, fresh: Any, arrays: dict[str, np.ndarray]) -> np.ndarray:
    if name not in arrays:
        raise CheckpointError(f"checkpoint lacks the state field {name!r}")
    value = arrays[name]
    if isinstance(fresh, np.ndarray) and value.shape != fresh.shape:
        raise CheckpointError(
            f"checkpoint state field {name!r} has shape {value.shape}, this run needs "
            f"{fresh.shape}: the checkpoint is of another model or dataset"
        )
    return np.array(value)  # writable copy


def state_from_parts(template: Any, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> Any:
    """Rebuild a rule's NamedTuple state shaped like ``template`` (the rule's fresh state).

    A field that the state's type gives a default, and that the checkpoint lacks (one written
    before the field existed), takes its value from ``template``."""
    values: dict[str, Any] = {}
    optional = type(template)._field_defaults
    for name, fresh in template._asdict().items():
        if name in optional and not (name in arrays or name in scalars or f"{name}.len" in scalars):
            values[name] = fresh
        elif isinstance(fresh, tuple):
            parts = scalars.get(f"{name}.len")
            if parts != len(fresh):
                raise CheckpointError(
                    f"checkpoint state field {name!r} has {parts} parts, this run needs "
                    f"{len(fresh)}: the checkpoint is of another model or dataset"
                )
            values[name] = tuple(_array(f"{name}.{i}", f, arrays) for i, f in enumerate(fresh))
        elif isinstance(fresh, np.ndarray) or name in arrays:
            values[name] = _array(name, fresh, arrays)
        elif name in scalars:
            values[name] = scalars[name]
        else:
            raise CheckpointError(f"checkpoint lacks the state field {name!r}")
    return type(template)(**values)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save_checkpoint(
    out_dir: str | os.PathLike[str],
    *,
    updates: int,
    version: int,
    seconds: float,
    theta: np.ndarray,
    state: Any,
    block_tasks: list[int],
    config: dict[str, Any],
    trace: list[dict[str, Any]],
    snapshots: list[tuple[float, int, np.ndarray]],
    engine: dict[str, Any] | None = None,
    keep: int = 3,
) -> Path:
    """Write one checkpoint atomically under ``out_dir/checkpoints`` and keep the last ``keep``."""
    root = Path(out_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    arrays, scalars = _state_parts(state)
    tmp = Path(tempfile.mkdtemp(prefix=".ckpt-", dir=root))
    try:
        npz = {"theta": np.asarray(theta)}
        npz.update({f"state.{k}": v for k, v in arrays.items()})
        if snapshots:
            npz["snapshot_thetas"] = np.stack([t for _, _, t in snapshots])
        buf = io.BytesIO()
        np.savez(buf, **npz)  # type: ignore[arg-type]
        (tmp / "arrays.npz").write_bytes(buf.getvalue())
        meta = {
            "format": FORMAT_VERSION,
            "updates": int(updates),
            "version": int(version),
            "seconds": float(seconds),
            "state_scalars": scalars,
            "state_type": type(state).__name__,
            "block_tasks": [int(t) for t in block_tasks],
            "config": config,
            "trace": trace,
            "snapshots": [[float(s), int(v)] for s, v, _ in snapshots],
            "engine": engine or {},
        }
        (tmp / "state.json").write_text(json.dumps(meta))
        manifest = {name: _sha256(tmp / name) for name in ("arrays.npz", "state.json")}
        (tmp / "manifest.json").write_text(json.dumps(manifest))
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        final = root / f"ckpt-{int(updates):010d}"
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in sorted(root.glob("ckpt-*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _load(path: Path) -> Checkpoint:
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: no readable manifest.json ({exc})") from None
    for name in ("arrays.npz", "state.json"):
        f = path / name
        if not f.is_file() or _sha256(f) != manifest.get(name):
            raise CheckpointError(f"{f}: missing or damaged (checksum mismatch)")
    meta = json.loads((path / "state.json").read_text())
    if meta.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: checkpoint format {meta.get('format')} is not supported")
    with np.load(path / "arrays.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    snaps = arrays.pop("snapshot_thetas", np.zeros((0, arrays["theta"].size)))
    snapshots = [(s, v, snaps[i]) for i, (s, v) in enumerate(meta["snapshots"])]
    return Checkpoint(
        path=path,
        updates=meta["updates"],
        version=meta["version"],
        seconds=meta["seconds"],
        theta=arrays.pop("theta"),
        state_arrays={k[len("state.") :]: v for k, v in arrays.items() if k.startswith("state.")},
        state_scalars=meta["state_scalars"],
        block_tasks=meta["block_tasks"],
        config=meta["config"],
        trace=meta["trace"],
        snapshots=snapshots,
        engine=meta.get("engine", {}),
    )


def check_compatible(ckpt: Checkpoint, desc: Any, num_params: int) -> None:
    """Refuse a checkpoint of another model shape or of other data (a file that changed)."""
    if ckpt.theta.size != num_params:
        raise CheckpointError(
            f"{ckpt.path}: the checkpoint's model has {ckpt.theta.size} parameters, this run's "
            f"{num_params}: it is a checkpoint of another model or dataset"
        )
    stored = ckpt.config.get("dataset_id")
    if stored is not None and stored != desc.dataset_id:
        raise CheckpointError(
            f"{ckpt.path}: the checkpoint is of another dataset (the data changed since it was "
            "written)"
        )


def load_latest(out_dir: str | os.PathLike[str]) -> Checkpoint:
    """The newest intact checkpoint of the run in ``out_dir`` (damaged ones are skipped)."""
    root = Path(out_dir) / "checkpoints"
    candidates = sorted(root.glob("ckpt-*"), reverse=True) if root.is_dir() else []
    if not candidates:
        raise CheckpointError(f"{root}: no checkpoint to resume from")
    errors = []
    for path in candidates:
        try:
            return _load(path)
        except CheckpointError as exc:
            errors.append(str(exc))
    raise CheckpointError("no intact checkpoint: " + "; ".join(errors))

"""Seeded runs of every linear method whose models and traces are pinned as fixtures.

The fixtures were written by ``python tests/solvers/reference_runs.py`` *before* the method layer
was rebuilt (issue 15); ``test_reference_runs.py`` replays the same runs and requires the same
update paths, and models and objectives equal to 1e-12 relative (bit-identical on the machine
that wrote them; the CPU's SIMD kernels change the last bits elsewhere). Synchronous methods run on the in-process transport (a round
combines its results in block order, so the order of arrival does not matter); asynchronous ones on
the virtual-time emulator, whose event order is deterministic. Regenerate only on purpose: a change
of these numbers is a change of behaviour. Regenerated on purpose once: ``sgd-auto`` and
``saga-auto`` when the step safeguard began to search an automatic step upward (their objectives
after 30 updates fell, 0.222 -> 0.187 and 0.630 -> 0.606; every other run was unchanged), and
``sgd-auto`` again when an automatic SGD step became constant between the safeguard's halvings
on plateaus (0.187 -> 0.123); and ``sgd-auto`` and ``ag-auto`` when dense data's Gram eigenvalue
became exact instead of power iteration's (tolerance 1e-6): their steps moved by 2e-7 relative
(0.13328697 -> 0.13328695, 0.30026411 -> 0.30026406), their objectives by 4e-8 and 2e-8, their
update paths not at all; every other run was unchanged; and ``ag-auto`` when the safeguard's
search upward began to cover the momentum methods, retuning the momentum with the raised step
(two raises within its 30 updates; objective 0.120 -> 0.105, update path unchanged; every other
run was unchanged), and ``ag-auto`` again when synchronous AG with an automatic step began to
restart its momentum (O'Donoghue & Candès's gradient test; 0.105 -> 0.101, path unchanged, every
other run unchanged). The asynchronous SGD and momentum runs pin ``block_weights=False``: their
results applied as they come, as when the fixtures were written (the weights, the default since,
are checked against a numpy loop in ``test_block_shares.py``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

FIXTURE = Path(__file__).with_name("fixtures") / "reference_runs"

_BASE: dict[str, Any] = dict(
    seed=7, max_updates=30, eval_every=1e9, quiet=True, batch_fraction=0.3, l2=1e-2
)

# name -> (dataset key, TrainConfig options); "emulated" runs go through the virtual engine.
RUNS: dict[str, tuple[str, dict[str, Any]]] = {
    "sgd": ("cancer", dict(method="sgd", step=0.5)),
    "sgd-auto": ("cancer", dict(method="sgd")),
    "sgd-l1": ("sparse", dict(method="sgd", step=1.0, l1=1e-3)),
    "saga": ("cancer", dict(method="saga", step=0.1)),
    "saga-auto": ("sparse", dict(method="saga")),
    "saga-softmax": ("digits", dict(method="saga", loss="softmax", step=0.05)),
    "hb": ("cancer", dict(method="hb", step=0.1, momentum=0.5)),
    "ag-auto": ("cancer", dict(method="ag")),
    "apg": ("cancer", dict(method="apg", step=0.1, momentum=0.6, l1=1e-3)),
    "asgd": ("cancer", dict(method="asgd", step=0.2, block_weights=False)),
    "asgd-staleness": (
        "cancer",
        dict(method="asgd", step=0.2, step_rule="staleness", block_weights=False),
    ),
    "asaga": ("cancer", dict(method="asaga", step=0.05)),
    "asaga-auto": ("sparse", dict(method="asaga")),
    "asaga-tau": ("cancer", dict(method="asaga", step=0.05, tau=1)),
    "ahb": (
        "cancer",
        dict(method="ahb", step=0.05, momentum=0.5, momentum_damping=0.5, block_weights=False),
    ),
    "aag": ("cancer", dict(method="aag", step=0.05, momentum=0.5, block_weights=False)),
    "aapg": (
        "cancer",
        dict(method="aapg", step=0.05, momentum=0.5, l1=1e-3, block_weights=False),
    ),
}

DATASETS: dict[str, tuple[str, int, dict[str, Any]]] = {
    "cancer": ("builtin:breast_cancer", 3, dict(standardize=True, loss="logistic")),
    "sparse": ("builtin:synthetic?n=600&d=40&nnz=6&seed=3", 4, dict(loss="logistic")),
    "digits": ("builtin:digits", 3, dict(standardize=True, loss="softmax")),
}


def open_datasets() -> dict[str, Any]:
    from async_spark.data.dataset import open_dataset

    return {k: open_dataset(spec, p, **kw) for k, (spec, p, kw) in DATASETS.items()}


def run(name: str, datasets: dict[str, Any]) -> Any:
    """Replay run ``name``; returns its TrainResult."""
    from async_spark.engine.emulator import CostModel
    from async_spark.solvers.config import TrainConfig
    from async_spark.solvers.emulation import virtual_engine_factory
    from async_spark.solvers.linear import train_linear

    key, options = RUNS[name]
    spec = DATASETS[key]
    config = TrainConfig(data=spec[0], partitions=spec[1], **{**_BASE, **spec[2], **options})
    factory = None
    if not config.synchronous:
        cost = CostModel(task_overhead_seconds=0.01, seconds_per_nnz=1e-7, driver_seconds=1e-3)
        factory = virtual_engine_factory(cost)
    return train_linear(config, dataset=datasets[key], engine_factory=factory)


def path_of(result: Any) -> list[list[Any]]:
    """The update path: (version, staleness, block, accepted) of every trace record."""
    return [
        [r["version"], r["staleness"], r["block"], r.get("accepted", True)] for r in result.trace
    ]


def record(result: Any) -> dict[str, Any]:
    return {
        "final_objective": result.final_objective,
        "step": result.step,
        "updates": result.updates,
        "path": path_of(result),
        "objectives": [s[2] for s in result.snapshots],
    }


def main() -> int:
    datasets = open_datasets()
    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, Any] = {}
    for name in RUNS:
        result = run(name, datasets)
        arrays[name] = result.theta
        meta[name] = record(result)
        print(f"{name}: objective {result.final_objective:.6f} after {result.updates} updates")
    FIXTURE.parent.mkdir(exist_ok=True)
    np.savez(FIXTURE.with_suffix(".npz"), **arrays)
    FIXTURE.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every notebook in ``notebooks/`` runs top to bottom without an error, and is stored without outputs.

Notebooks run in a fresh ``python3`` kernel of *this* interpreter (a kernel spec written to a
temporary folder that points at ``sys.executable``, so a user-level ``python3`` kernel spec that
points elsewhere is never picked), with ``ASYNC_SPARK_NOTEBOOK_QUICK=1`` so that they choose small
sizes. A notebook whose metadata has ``"async_spark": {"needs_spark": true}`` is marked ``spark``
(and skipped when Java is missing).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 300  # per cell; a quick-mode notebook takes well under a minute in all
KERNEL_NAME = "python3"


def _metadata(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")).get("metadata", {})


def _needs_spark(path: Path) -> bool:
    return bool(_metadata(path).get("async_spark", {}).get("needs_spark", False))


def _params() -> list:
    params = []
    for path in NOTEBOOKS:
        marks = [pytest.mark.spark] if _needs_spark(path) else []
        params.append(pytest.param(path, id=path.name, marks=marks))
    return params


def test_notebooks_exist():
    assert NOTEBOOKS, f"no notebooks found in {NOTEBOOK_DIR}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path: Path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb.get("nbformat") == 4, f"{path.name}: not an nbformat 4 notebook"
    dirty = [
        i
        for i, cell in enumerate(nb["cells"])
        if cell.get("cell_type") == "code"
        and (cell.get("outputs") or cell.get("execution_count") is not None)
    ]
    assert not dirty, (
        f"{path.name}: code cells {dirty} have outputs or execution counts; strip them "
        "(e.g. jupyter nbconvert --clear-output --inplace) before committing"
    )


@pytest.fixture(scope="session")
def kernel_dirs(tmp_path_factory) -> list[str]:
    """A folder holding one kernel spec, ``python3``, that runs ``sys.executable``."""
    pytest.importorskip("ipykernel", reason="install the dev extra (ipykernel) to run notebooks")
    from ipykernel.kernelspec import write_kernel_spec

    root = tmp_path_factory.mktemp("kernels")
    write_kernel_spec(path=str(root / KERNEL_NAME))
    spec = json.loads((root / KERNEL_NAME / "kernel.json").read_text())
    assert Path(spec["argv"][0]).resolve() == Path(sys.executable).resolve(), spec["argv"]
    return [str(root)]


@pytest.mark.parametrize("path", _params())
def test_notebook_runs(path: Path, kernel_dirs: list[str], monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="install the dev extra (nbformat)")
    nbclient = pytest.importorskip("nbclient", reason="install the dev extra (nbclient)")
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    if _needs_spark(path) and shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("notebook needs Spark and Java is not installed")
    for module in ("matplotlib", "sklearn"):  # what the notebooks plot with and load data from
        pytest.importorskip(module, reason="install the data extra to run the notebooks")
    # The kernel inherits the environment: small sizes, and the repository on the path even
    # where the package is not installed.
    monkeypatch.setenv("ASYNC_SPARK_NOTEBOOK_QUICK", "1")
    paths = [str(NOTEBOOK_DIR.parent), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))

    nb = nbformat.read(str(path), as_version=4)
    km = KernelManager(
        kernel_name=KERNEL_NAME, kernel_spec_manager=KernelSpecManager(kernel_dirs=kernel_dirs)
    )
    client = nbclient.NotebookClient(
        nb,
        km=km,
        kernel_name=KERNEL_NAME,
        timeout=CELL_TIMEOUT_S,
        allow_errors=False,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as exc:
        pytest.fail(f"{path.name}: a cell raised\n{exc}", pytrace=False)
    except nbclient.exceptions.CellTimeoutError as exc:
        pytest.fail(f"{path.name}: a cell ran over {CELL_TIMEOUT_S} s\n{exc}", pytrace=False)
    errors = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors, errors

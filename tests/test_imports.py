"""The import rules of DESIGN.md ("The house"), read from the package's own source with ``ast``.

Every ``import`` and ``from ... import`` of every ``.py`` file under ``async_spark/`` counts,
wherever it stands (module level, inside a function, under ``TYPE_CHECKING``); relative imports
are resolved against the file's package. Nothing is imported or executed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "async_spark"


def module_name(path: Path) -> list[str]:
    """``async_spark/gpu/data.py`` -> ``["async_spark", "gpu", "data"]`` (a package: its folder)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def imported_names(source: str, module: list[str], is_package: bool) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of everything ``source`` imports, relative imports resolved.

    ``from a.b import c`` gives ``a.b`` and ``a.b.c`` (``c`` may be a submodule).
    """
    package = module if is_package else module[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            name = ".".join(base + ([node.module] if node.module else []))
            found.append((node.lineno, name))
            found += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
    return found


def _imports() -> dict[str, list[tuple[int, str]]]:
    """Per file (``async_spark/...`` path), what it imports."""
    table = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        table[rel] = imported_names(
            path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py"
        )
    return table


IMPORTS = _imports()


def _matches(name: str, forbidden: str) -> bool:
    return name == forbidden or name.startswith(forbidden + ".")


def violations(folders: tuple[str, ...], forbidden: str, *, inside: bool = True) -> list[str]:
    """``file:line imports name`` for each import of ``forbidden`` in (or outside) ``folders``."""
    found = []
    for rel, names in IMPORTS.items():
        in_folders = any(rel.startswith(f"async_spark/{f}/") for f in folders)
        if in_folders != inside:
            continue
        found += [f"{rel}:{line} imports {n}" for line, n in names if _matches(n, forbidden)]
    return sorted(set(found))


PURE = ("optim", "models", "theory")
RULES = [
    *[
        pytest.param((pkg,), forbidden, id=f"{pkg} must not import {forbidden.split('.')[-1]}")
        for pkg in PURE
        for forbidden in ("pyspark", "torch", "async_spark.data")
    ],
    pytest.param(("hylo",), "pyspark", id="hylo must not import pyspark"),
    pytest.param(("engine",), "torch", id="engine must not import torch"),
    pytest.param(("hylo",), "argparse", id="hylo must not import argparse"),
    pytest.param(("gpu",), "argparse", id="gpu must not import argparse"),
]


@pytest.mark.parametrize(("folders", "forbidden"), RULES)
def test_package_does_not_import(folders, forbidden):
    assert violations(folders, forbidden) == []


def test_only_the_cli_package_imports_argparse():
    assert violations(("cli",), "argparse", inside=False) == []


def test_only_the_reporting_package_draws():
    """matplotlib is imported by ``reporting`` alone (``theory`` measures, the CLI passes the
    drawing in)."""
    assert violations(("reporting",), "matplotlib", inside=False) == []


def _private(name: str) -> bool:
    return any(p.startswith("_") and not p.startswith("__") for p in name.split(".")[1:])


@pytest.mark.parametrize("user", ["gpu", "cli"])
def test_the_spark_stage_and_the_cli_use_only_hylo_s_public_names(user):
    """``gpu`` (the Spark barrier stage) and the CLI drive ``hylo`` through its public API."""
    found = [
        f"{rel}:{line} imports {n}"
        for rel, names in IMPORTS.items()
        if rel.startswith(f"async_spark/{user}/")
        for line, n in names
        if _matches(n, "async_spark.hylo") and _private(n)
    ]
    assert found == []


def test_the_reader_sees_the_imports_it_checks():
    # Not vacuous: the files the rules read exist and their known imports are found.
    assert {"async_spark/optim/sgd.py", "async_spark/cli/__init__.py"} <= set(IMPORTS)
    assert violations(("cli",), "argparse")
    assert violations(("reporting",), "matplotlib")
    assert violations(("gpu",), "pyspark") and violations(("hylo",), "torch")
    module = ["async_spark", "gpu", "rank"]
    names = {
        n for _, n in imported_names("from ..data import blocks\nfrom . import x", module, False)
    }
    assert {"async_spark.data", "async_spark.data.blocks", "async_spark.gpu.x"} <= names
    pkg = ["async_spark", "reporting"]
    names = {n for _, n in imported_names("from .plots import Run", pkg, True)}
    assert names == {"async_spark.reporting.plots", "async_spark.reporting.plots.Run"}
    names = {n for _, n in imported_names("def f():\n    import torch.nn as nn\n", module, False)}
    assert names == {"torch.nn"}

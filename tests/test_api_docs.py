"""docs/api.md is generated from the docstrings: it must be current, and the docstrings clean."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def test_api_page_is_current():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "gen_api.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_docstring_holds_a_control_character():
    """A backslash in a plain (not raw) docstring turns \\b, \\f, \\t, \\a, \\v into control
    characters: the math of SAGAState and asynchronous_step once read "ar" and "au"."""
    bad = []
    for path in sorted((ROOT / "async_spark").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, DOCUMENTED):
                continue
            text = ast.get_docstring(node, clean=False)
            if text and any(c in text for c in "\b\f\a\v\t"):
                bad.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}")
    assert not bad, bad

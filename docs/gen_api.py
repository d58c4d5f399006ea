"""Write ``docs/api.md``: the public API of async_spark, from ``__all__`` and docstrings.

    .venv/bin/python docs/gen_api.py            # rewrites docs/api.md
    .venv/bin/python docs/gen_api.py --check    # exit 1 when docs/api.md is out of date

For each public module (``MODULES`` below) the page lists every name of its ``__all__`` with its
kind (class, function, exception, constant), its signature and the first paragraph of its
docstring. Nothing is executed beyond importing the modules (the ``hylo`` and ``gpu`` modules need
the ``hylo`` extra, i.e. torch; a module that cannot be imported is listed with the reason).
The output is deterministic, so the ``--check`` mode can run in CI.
"""

from __future__ import annotations

import argparse
import enum
import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "api.md"

# (module, one line on what it is for); in the order of the import direction, pure parts first.
MODULES = [
    ("async_spark.data", "datasets as partitioned blocks that live in the Python workers"),
    ("async_spark.models", "losses and regularizers as pure numpy/scipy functions"),
    ("async_spark.optim", "pure update rules (init / update), step sizes, projections"),
    ("async_spark.theory", "the stochastic momentum paper as code"),
    ("async_spark.engine", "the ASYNC engine on PySpark"),
    ("async_spark.solvers", "the training loop joining a rule, a model and the engine"),
    ("async_spark.ml", "pyspark.ml Estimators and Models"),
    ("async_spark.reporting", "progress bar and optional MLflow tracking of runs"),
    ("async_spark.reporting.plots", "figures of training runs (async-spark plot)"),
    ("async_spark.hylo", "HyLo natural-gradient preconditioner (PyTorch)"),
    ("async_spark.gpu", "the Spark side of HyLo: barrier stages on GPU executors"),
]


def first_paragraph(doc: str | None) -> str:
    """The first paragraph of a docstring, on one line (empty when there is none)."""
    if not doc:
        return ""
    text = inspect.cleandoc(doc)
    para = re.split(r"\n\s*\n", text, maxsplit=1)[0]
    return " ".join(line.strip() for line in para.splitlines())


def kind_of(obj: object) -> str:
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return "function"
    if callable(obj):
        return "callable"
    return "constant"


def signature_of(name: str, obj: object) -> str:
    if not callable(obj):
        return ""
    try:
        sig = str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    sig = re.sub(r" at 0x[0-9a-f]+", "", sig)  # no addresses: the output must be deterministic
    if len(sig) > 160:
        sig = sig[:157] + "..."
    return sig


def describe_constant(obj: object) -> str:
    text = repr(obj)
    if " at 0x" in text or len(text) > 120:
        return type(obj).__name__
    return text


def module_section(modname: str, blurb: str) -> list[str]:
    lines = [f"## `{modname}`", "", f"*{blurb}*", ""]
    try:
        mod = importlib.import_module(modname)
    except ImportError as exc:  # e.g. torch missing for hylo/gpu
        lines += [f"(not importable here: `{exc}`; install the extra it needs)", ""]
        return lines
    doc = first_paragraph(mod.__doc__)
    if doc:
        lines += [doc, ""]
    names = list(getattr(mod, "__all__", []))
    if not names:
        lines += ["(no `__all__`)", ""]
        return lines
    lines += ["| name | kind | summary |", "|---|---|---|"]
    details: list[str] = []
    for name in sorted(names, key=str.lower):
        obj = getattr(mod, name, None)
        kind = kind_of(obj)
        summary = first_paragraph(getattr(obj, "__doc__", None)) if kind != "constant" else ""
        if kind == "constant":
            summary = f"`{describe_constant(obj)}`"
        elif inspect.isclass(obj) and obj.__doc__ == type(obj).__doc__:
            summary = ""
        short = summary if len(summary) <= 140 else summary[:137].rstrip() + "..."
        lines.append(f"| [`{name}`](#{anchor(modname, name)}) | {kind} | {escape(short)} |")
        if kind != "constant":
            if inspect.isclass(obj) and issubclass(obj, enum.Enum):
                members = ", ".join(f"`{m.name}` = `{m.value!r}`" for m in obj)
                code, summary = f"class {name}(Enum)", summary or f"Members: {members}."
            else:
                code = f"{name}{signature_of(name, obj)}"
            details += [
                f'<a id="{anchor(modname, name)}"></a>',
                f"### `{modname}.{name}`",
                "",
                f"```python\n{code}\n```",
                "",
                summary or "(no docstring)",
                "",
            ]
    lines.append("")
    return lines + details


def anchor(modname: str, name: str) -> str:
    return f"{modname}.{name}".replace(".", "-").replace("_", "-").lower()


def escape(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    sys.path.insert(0, str(ROOT))
    import async_spark

    head = [
        "# API reference",
        "",
        "<!-- Generated by docs/gen_api.py from __all__ and the docstrings; do not edit by hand. -->",
        "",
        f"async_spark {async_spark.__version__}. Each public module re-exports its API in "
        "`__all__`; below, every exported name with its kind and the first paragraph of its "
        "docstring (the full docstrings, with the math and the references, are in the source "
        "and in `help(...)`). The command line is described in the README and in "
        "`docs/quickstart.md`; the concepts in `docs/concepts.md`.",
        "",
        "Modules:",
        "",
    ]
    head += [f"- [`{m}`](#{m.replace('.', '')}) — {b}" for m, b in MODULES]
    head.append("")
    body: list[str] = []
    for modname, blurb in MODULES:
        body += module_section(modname, blurb)
    text = "\n".join(head + body)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when docs/api.md is stale")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    text = render()
    out = Path(args.out)
    if args.check:
        current = out.read_text(encoding="utf-8") if out.is_file() else ""
        if current != text:
            print(f"{out} is out of date: run python docs/gen_api.py", file=sys.stderr)
            return 1
        return 0
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The per-model defaults: one row per reference model, each with its source, and the table of
``docs/hylo.md`` giving the values the code uses."""

from __future__ import annotations

import re
from pathlib import Path

from async_spark.hylo.defaults import RECOMMENDED, SOURCES, recommended
from async_spark.hylo.train import MODELS

DOC = Path(__file__).resolve().parents[2] / "docs" / "hylo.md"


def _spellings(v: float) -> set[str]:
    """How the docs may write ``v``: 0.03, 3e-2 and 1e-3 style."""
    return {f"{v:g}", re.sub(r"e-0*", "e-", f"{v:.0e}")}


def _has(text: str, prefix: str, v: float) -> bool:
    return any(
        re.search(rf"{re.escape(prefix)}{re.escape(s)}(?![\d.])", text) for s in _spellings(v)
    )


def test_every_reference_model_has_defaults_and_a_source():
    assert set(RECOMMENDED) == set(SOURCES) == set(MODELS)
    for model, rows in RECOMMENDED.items():
        assert set(rows) == {"hylo", "kfac", "smw", "sgd", "adam"}, model
        assert SOURCES[model]
        for family in rows:
            rec = recommended(model, family)
            assert rec["lr"] > 0 and rec["damping"] > 0 and rec["warmup_epochs"] >= 0


def test_the_docs_table_gives_the_values_the_code_uses():
    text = DOC.read_text()
    section = text[text.index("### Defaults, and where they come from") :]
    for model in RECOMMENDED:
        (row,) = [ln for ln in section.splitlines() if ln.startswith(f"| `{model}` |")]
        _, hylo, kfac, first_order, source = (c.strip() for c in row.strip("|").split("|"))
        h, k = recommended(model, "hylo"), recommended(model, "kfac")
        assert _has(hylo, "lr ", h["lr"]) and _has(hylo, "λ ", h["damping"]), (model, hylo)
        if h["kl_clip"] is not None:
            assert _has(hylo, "clip ", h["kl_clip"]), (model, hylo)
        if h["damping_target"] is not None:
            assert _has(hylo, "→ ", h["damping_target"]), (model, hylo)
        if h["fisher_window"] > 1:
            assert f"W = {h['fisher_window']}" in hylo, (model, hylo)
        if h["warmup_epochs"]:
            assert f"{h['warmup_epochs']} warm-up" in hylo, (model, hylo)
        assert _has(kfac, "lr ", k["lr"]) and _has(kfac, "λ ", k["damping"]), (model, kfac)
        sgd, adam = (c.strip() for c in first_order.split(",")[0].split("/"))
        assert sgd in _spellings(recommended(model, "sgd")["lr"]), (model, first_order)
        assert adam in _spellings(recommended(model, "adam")["lr"]), (model, first_order)
        assert source, model

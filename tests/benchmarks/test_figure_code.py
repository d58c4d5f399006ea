"""The code that turns benchmark rows into the figures RESULTS.md quotes: whole-network totals
of the inverse benchmark, and the weight comparison of the two HyLo launchers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _row(b, P, layers, kis, kid, sngd, inv, eig):
    return {
        "b": b,
        "P": P,
        "layers_with_shape": layers,
        "kis_s": kis,
        "kid_s": kid,
        "sngd_s": sngd,
        "kfac_inv_s": inv,
        "kfac_eig_s": eig,
    }


def test_network_totals_weigh_each_shape_by_its_layers():
    pytest.importorskip("torch")
    inverse = _load(ROOT / "benchmarks" / "hylo_inverse.py", "hylo_inverse_under_test")
    rows = [
        _row(32, 8, 3, 0.010, 0.020, 0.5, 2.0, 3.0),  # K-FAC 2.0 (inv faster)
        _row(32, 8, 1, 0.100, 0.300, 0.1, 0.9, 0.05),  # K-FAC 0.05 (eig faster), beats KIS
        _row(64, 8, 2, 0.040, 0.050, None, 1.0, 1.5),  # SNGD skipped at this size
    ]
    totals = {(t["b"], t["P"]): t for t in inverse.network_totals(rows)}
    first = totals[(32, 8)]
    assert first["shapes"] == 2 and first["layers"] == 4
    assert first["kis_s"] == pytest.approx(3 * 0.010 + 0.100)
    assert first["kid_s"] == pytest.approx(3 * 0.020 + 0.300)
    assert first["sngd_s"] == pytest.approx(3 * 0.5 + 0.1)
    assert first["kfac_s"] == pytest.approx(3 * 2.0 + 0.05)  # the faster of inv/eig per shape
    assert first["kfac_over_kis"] == pytest.approx((6.05) / 0.13)
    assert first["shapes_kfac_faster"] == 1
    second = totals[(64, 8)]
    assert second["sngd_s"] is None and second["kfac_s"] == pytest.approx(2.0)


def test_the_weight_comparison_finds_the_largest_difference(tmp_path):
    torch = pytest.importorskip("torch")
    run = _load(ROOT / "tests" / "gpu" / "gpu_cluster_run.py", "gpu_cluster_run_under_test")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    weights = {"w": torch.arange(6.0).reshape(2, 3), "bias": torch.zeros(3), "empty": torch.ones(0)}
    torch.save(weights, a / "model.pt")
    torch.save(weights, b / "model.pt")
    same = run.max_weight_difference(str(a), str(b))
    assert same["max_abs_diff"] == 0.0 and same["same_keys"] and same["parameters"] == 9
    changed = dict(weights, bias=torch.tensor([0.0, -0.25, 1e-3]))
    torch.save(changed, b / "model.pt")
    assert run.max_weight_difference(str(a), str(b))["max_abs_diff"] == 0.25
    torch.save({"w": weights["w"]}, b / "model.pt")
    other = run.max_weight_difference(str(a), str(b))
    assert other["max_abs_diff"] == float("inf") and not other["same_keys"]

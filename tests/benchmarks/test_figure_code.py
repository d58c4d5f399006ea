"""The code that turns benchmark rows into the figures RESULTS.md quotes: whole-network totals
of the inverse benchmark, the weight comparison of the two HyLo launchers, and the medians with
[min, max] of repeated runs (the shared helper, ``async_speedup.py``, ``transport_race.py``)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    saved = list(sys.path)  # a benchmark puts its folder first, for ``_common``
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
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


# --- medians with [min, max] of repeated runs ------------------------------------------------


def test_median_range_leaves_out_runs_without_the_figure():
    common = _load(ROOT / "benchmarks" / "_common.py", "bench_common_under_test")
    assert common.median_range([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0, 3)
    assert common.median_range([4, 1, 2, 10]) == (3.0, 1.0, 10.0, 4)  # even count: the mean
    assert common.median_range([2.5, None, math.nan, math.inf, 1.5]) == (2.0, 1.5, 2.5, 2)
    med, lo, hi, n = common.median_range([None, math.nan])
    assert n == 0 and all(math.isnan(x) for x in (med, lo, hi))
    fmt = common.format_median_range
    assert fmt([3.0, 1.0, 2.0]) == "2.00 [1.00, 3.00]"
    assert fmt([0.123456], ".3f") == "0.123"  # one run: the value alone
    assert fmt([12, 7, 30], ".0f") == "12 [7, 30]"
    assert fmt([2.0, None, 4.0], ".1f") == "3.0 [2.0, 4.0] (2 of 3 runs)"
    assert fmt([None]) == "-" and fmt([]) == "-"
    assert fmt(x for x in (0.25, 0.5, 0.75)) == "0.50 [0.25, 0.75]"  # any iterable


def _train_result(final, updates, times, objectives, staleness=1.0):
    """What ``async_speedup`` reads of a ``train_linear`` result."""
    return SimpleNamespace(
        final_objective=final,
        updates=updates,
        wall_seconds=times[-1],
        trace=[{"version": v, "seconds": t} for v, t in enumerate(times)],
        snapshots=[(t, v, o) for v, (t, o) in enumerate(zip(times, objectives, strict=True))],
        summary=lambda: {"mean_staleness": staleness},
    )


def test_async_speedup_figures_per_repeat_and_their_medians():
    speed = _load(ROOT / "benchmarks" / "async_speedup.py", "async_speedup_under_test")
    # no stragglers: sync rounds of 1 s reach 0.5 at t = 4, async reaches it at t = 1 (4x)
    clean = {
        "saga": _train_result(0.5, 4, [0, 1, 2, 3, 4], [1.0, 0.8, 0.7, 0.6, 0.5]),
        "asaga": _train_result(0.4, 9, [0, 1, 2], [1.0, 0.5, 0.4]),
    }
    # stragglers: sync rounds of 2 s reach 0.6 at t = 8, async reaches 0.6 at t = 1 (8x)
    slow = {
        "saga": _train_result(0.6, 4, [0, 2, 4, 6, 8], [1.0, 0.9, 0.8, 0.7, 0.6]),
        "asaga": _train_result(0.6, 9, [0, 1, 2], [1.0, 0.6, 0.6], staleness=3.0),
    }
    run = speed.run_figures(clean, slow, "saga")
    assert run["round_clean"] == 1.0 and run["round_slow"] == 2.0 and run["ceiling"] == 2.0
    assert run["speedup"] == 8.0 and run["speedup_without_stragglers"] == 4.0
    assert run["straggler_gain"] == 2.0 and run["gain_of_ceiling"] == 1.0
    assert run["sync_updates"] == 4 and run["async_updates"] == 9
    assert run["async_mean_staleness"] == 3.0
    # a repeat where the async run made no progress has no speedup: left out of the median
    stuck = dict(slow, asaga=_train_result(1.0, 9, [0, 1, 2], [1.0, 1.0, 1.0]))
    none = speed.run_figures(clean, stuck, "saga")
    assert none["speedup"] is None and none["straggler_gain"] is None
    other = dict(run, speedup=4.0, straggler_gain=1.0, ceiling=3.0)
    row = speed.summarize([run, none, other])
    assert row["repeats"] == 3 and row["runs"] == [run, none, other]
    assert row["speedup"] == 6.0 and row["speedup_range"] == [4.0, 8.0]
    assert row["speedup_runs_with"] == 2
    assert row["ceiling"] == 2.0 and row["ceiling_range"] == [2.0, 3.0]
    assert row["ceiling_runs_with"] == 3
    nothing = speed.summarize([none])
    assert nothing["speedup"] is None and nothing["speedup_range"] is None


def test_async_speedup_swaps_the_pair_order_each_repeat(monkeypatch):
    speed = _load(ROOT / "benchmarks" / "async_speedup.py", "async_speedup_order_under_test")
    ran = []
    monkeypatch.setattr(speed, "train_linear", lambda cfg, **kw: ran.append(cfg.method))
    base = speed.TrainConfig(data="builtin:synthetic?n=10&d=2", quiet=True)
    assert list(speed.run_pair(None, None, base, "saga", "none", 1.0, 0.1)) == ["saga", "asaga"]
    assert list(speed.run_pair(None, None, base, "sgd", "cloud", 1.0, 0.1, reverse=True)) == [
        "asgd",
        "sgd",
    ]
    assert ran == ["saga", "asaga", "asgd", "sgd"]


def test_transport_race_alternates_and_takes_the_median_of_same_repeat_ratios():
    race = _load(ROOT / "benchmarks" / "transport_race.py", "transport_race_under_test")
    assert [race.transport_order(i) for i in range(3)] == [
        ("resident", "jobs"),
        ("jobs", "resident"),
        ("resident", "jobs"),
    ]

    def rep(resident, jobs):
        return {("resident", "asaga"): {"updates": resident}, ("jobs", "asaga"): {"updates": jobs}}

    runs = [rep(1000, 10), rep(900, 3), rep(500, 10)]  # ratios 100, 300, 50
    assert race.updates_ratio(runs, "asaga") == 100.0  # not 800 / 10 (the ratio of medians)
    assert race.updates_ratio([rep(40, 0)], "asaga") == 40.0  # no update on jobs: over 1


@pytest.mark.parametrize("script", ["async_speedup.py", "transport_race.py"])
def test_repeats_below_one_are_refused_before_spark_starts(script, capsys):
    module = _load(ROOT / "benchmarks" / script, script.removesuffix(".py") + "_args_under_test")
    with pytest.raises(SystemExit) as exc:
        module.main(["--repeats", "0"])
    assert exc.value.code == 2
    assert "--repeats must be at least 1, got 0" in capsys.readouterr().err


def test_compiled_driver_names_the_modules_it_compiles_and_refuses_bad_options(capsys):
    """The mypyc comparison (run by hand: it compiles for minutes) must find every hot module it
    lists, and refuse a module that does not exist or no run, before building anything."""
    pytest.importorskip("mypyc")
    module = _load(ROOT / "benchmarks" / "compiled_driver.py", "compiled_driver_under_test")
    for path in module.HOT_MODULES:
        assert (ROOT / "async_spark" / path).is_file(), path
    with pytest.raises(SystemExit) as exc:
        module.main(["--modules", "engine/wire.py,engine/no_such.py"])
    assert "engine/no_such.py" in str(exc.value)
    with pytest.raises(SystemExit) as exc:
        module.main(["--repeats", "0"])
    assert exc.value.code == 2
    assert "--repeats and --runs must be at least 1, got 0" in capsys.readouterr().err

"""Every benchmark's ``--smoke`` mode: it must exit 0 and print its RESULT lines, in order, each
with a finite number (smoke sizes: the numbers are not figures).

The scripts that use Spark run one after the other in one process (``smoke_runner.py``), so that
they share one JVM: each process's first Spark session starts the JVM, about 8 s of every such
script's smoke run on 2 cores, where a later session in the same process takes under 1 s. Each
still runs as its command line would (``sys.argv``, its own working directory, its ``main``),
and a session it leaves running is stopped before the next. The others run each in its own
process, as a user runs them.

``plot_scale.py`` (no RESULT: it
draws ``scale.py --json`` output) runs on the scale smoke's JSON. ``compiled_driver.py`` has no
smoke here: mypyc takes minutes to build even one module (its options are tested in
``test_figure_code.py``). ``gpu_check.py`` without CUDA
must say so and exit 3; with CUDA its smoke must pass.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
NOT_HERE = {"_common.py", "plot_scale.py", "compiled_driver.py"}  # the last compiles for minutes

# script -> (RESULT names in order, what it needs: "spark", "torch", "mnist1d", "asdl")
SMOKES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "async_speedup.py": (("asaga_speedup_cloud",), ("spark",)),
    "block_weights.py": (
        ("block_weights_end_gap_ratio_unthrottled", "block_weights_end_gap_ratio_throttled"),
        ("spark", "sklearn"),
    ),
    "engine_overhead.py": (
        (
            "engine_throughput_ratio",
            "resident_vs_jobs_throughput_d100",
            "resident_vs_jobs_throughput_d1e5",
            "connect_vs_classic_resident_throughput_d100",
        ),
        ("spark",),
    ),
    "transport_race.py": (("resident_vs_jobs_updates_asaga",), ("spark",)),
    "saga_tables.py": (("held_tables_vs_shipped_rows_updates",), ("spark",)),
    "fit_race.py": (
        ("async_linear_fit_vs_mllib_fit_seconds", "async_fit_vs_lbfgs_fit_seconds"),
        ("spark", "sklearn"),
    ),
    "peers.py": (
        ("ours_default_vs_lbfgs_min", "ours_default_vs_best_grid_max"),
        ("spark", "sklearn"),
    ),
    "data_path.py": (("data_path_overhead_ratio_largest",), ("spark",)),
    "emulator_validation.py": (("emulator_validation_max_error",), ("spark",)),
    "momentum_engine.py": (("ag_vs_sgd_updates_sync",), ("spark", "sklearn")),
    "step_search.py": (("searched_vs_best_fixed_updates_max",), ("sklearn",)),
    "soak.py": (("soak_rss_growth_mb",), ("spark",)),
    "tol_stop.py": (("tol_vs_no_tol_call_seconds", "tol_final_gap_max"), ("spark",)),
    "scale.py": (("asaga_speedup_emulated_32",), ()),
    "peers_sweep.py": (("fewest_updates_to_target",), ()),
    "conditioning.py": (("std_over_raw_kappa_sparse",), ("sklearn",)),
    "hylo_error.py": (("kis_over_kid_error_rho0.1",), ("torch", "mnist1d")),
    "hylo_inverse.py": (("kis_vs_kfac_inverse_speedup",), ("torch",)),
    "hylo_width.py": (("kfac_vs_hylo_epoch_seconds",), ("torch", "mnist1d", "asdl")),
    "hylo_mnist1d.py": (
        ("hylo_vs_kfac_sustained_time_to_85", "hylo_vs_kfac_time_to_85"),
        ("torch", "mnist1d", "asdl"),
    ),
    "hylo_autoencoder.py": (
        ("hylo_vs_kfac_time_to_target", "hylo_vs_best_first_order_time_to_target"),
        ("torch", "sklearn", "asdl"),
    ),
    "gpu_check.py": (("gpu_check_failed_sections",), ("torch", "cuda")),
}
TIMEOUT = 300  # seconds per script; each takes seconds to tens of seconds on an idle 2-core box
#: The scripts run in one process by smoke_runner.py: those that start a Spark session.
SHARED = sorted(s for s, (_, needs) in SMOKES.items() if "spark" in needs)

RESULT = re.compile(r"^RESULT (\S+) (\S+)$", re.M)


def _missing(needs: tuple[str, ...]) -> str | None:
    modules = {"torch": "torch", "mnist1d": "mnist1d", "asdl": "asdl", "sklearn": "sklearn"}
    for need in needs:
        if need in modules and importlib.util.find_spec(modules[need]) is None:
            return f"needs {modules[need]}"
        if need == "spark":
            from async_spark.engine.session import JavaNotFoundError, check_java

            try:
                check_java()
            except JavaNotFoundError as exc:
                return str(exc)
        if need == "cuda":
            import torch

            if not torch.cuda.is_available():
                return "needs a CUDA device (the no-GPU answer is tested below)"
    return None


def _run(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYTHONUNBUFFERED="1",
        MPLBACKEND="Agg",
    )
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=cwd,  # whatever a script writes next to itself lands here
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )


def _results(stdout: str) -> list[tuple[str, float]]:
    out = []
    for name, value in RESULT.findall(stdout):
        try:
            out.append((name, float(value)))
        except ValueError:
            out.append((name, math.nan))
    return out


def test_every_benchmark_has_a_smoke_run():
    scripts = {p.name for p in BENCH.glob("*.py")} - NOT_HERE
    assert scripts == set(SMOKES), "a benchmark without a smoke entry (or a stale entry)"
    for name in SMOKES:
        assert "--smoke" in (BENCH / name).read_text(), name


@pytest.fixture(scope="module")
def shared_runs(tmp_path_factory) -> tuple[Path, str]:
    """The SHARED scripts' smoke runs, in one process: (their output folder, its stderr tail)."""
    out = tmp_path_factory.mktemp("smoke")
    scripts = [s for s in SHARED if _missing(SMOKES[s][1]) is None]
    env = dict(
        os.environ,
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYTHONUNBUFFERED="1",
        MPLBACKEND="Agg",
    )
    runner = Path(__file__).with_name("smoke_runner.py")
    try:
        proc = subprocess.run(
            [sys.executable, str(runner), str(out), *scripts],
            capture_output=True,
            text=True,
            timeout=TIMEOUT * len(scripts),
            env=env,
        )
        return out, f"runner exit {proc.returncode}:\n{proc.stderr[-3000:]}"
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        return out, f"runner timed out:\n{err[-3000:]}"


def _shared_run(script: str, shared_runs: tuple[Path, str]) -> tuple[int, str, str]:
    out, runner = shared_runs
    name = script.removesuffix(".py")
    status = out / f"{name}.json"
    if not status.exists():
        running = out / "running"
        at = running.read_text() if running.exists() else "?"
        pytest.fail(f"{script} did not finish in the shared run (running: {at}); {runner}")
    stderr = (out / f"{name}.err").read_text() + f"\n--- runner ---\n{runner}"
    return json.loads(status.read_text())["rc"], (out / f"{name}.out").read_text(), stderr


@pytest.mark.parametrize("script", sorted(SMOKES), ids=lambda s: s.removesuffix(".py"))
def test_smoke_prints_finite_results(script, tmp_path, request):
    names, needs = SMOKES[script]
    why = _missing(needs)
    if why:
        pytest.skip(why)
    if script in SHARED:
        rc, stdout, stderr = _shared_run(script, request.getfixturevalue("shared_runs"))
    else:
        extra = ["--json", str(tmp_path / "scale.json")] if script == "scale.py" else []
        proc = _run(script, "--smoke", *extra, cwd=tmp_path)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    tail = f"\n--- stdout ---\n{stdout[-3000:]}\n--- stderr ---\n{stderr[-3000:]}"
    assert rc == 0, tail
    results = _results(stdout)
    assert [n for n, _ in results] == list(names), tail
    assert all(math.isfinite(v) for _, v in results), (results, tail)
    if script == "conditioning.py":  # and scikit-learn's SAGA timed on both coordinates
        assert "scikit-learn's SAGA in one process" in stdout, tail
        saga_rows = stdout.split("SAGA in one process")[1].splitlines()
        assert any(r.split()[:2] == ["sparse-2e3", "std"] for r in saga_rows), tail
    if script == "scale.py":  # and the plot drawn from its JSON
        assert json.loads((tmp_path / "scale.json").read_text())
        plot = _run(
            "plot_scale.py", str(tmp_path / "s.png"), str(tmp_path / "scale.json"), cwd=tmp_path
        )
        assert plot.returncode == 0, plot.stderr[-3000:]
        assert (tmp_path / "s.png").stat().st_size > 1000


# --- gpu_check: the answer without a GPU, and its verdict logic --------------------------------


def _gpu_check():
    pytest.importorskip("torch")
    sys.path.insert(0, str(BENCH))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(BENCH))
    return gpu_check


def test_gpu_check_without_cuda_says_so_and_exits_3(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the smoke run above checks it")
    proc = _run("gpu_check.py", "--smoke", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert json.loads(proc.stdout.splitlines()[0])["skipped"] is True
    assert "no CUDA device" in proc.stderr and "nothing was checked" in proc.stderr
    assert _run("gpu_check.py", "--allow-no-gpu", cwd=tmp_path).returncode == 0


def test_gpu_check_exits_1_and_names_each_failed_section(monkeypatch, capsys):
    gc = _gpu_check()
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "fake GPU")
    monkeypatch.setattr(gc, "check_kernels", lambda *a, **k: {"ok": False, "max_f64_rel_err": 0.3})
    monkeypatch.setattr(gc, "check_preconditioner", lambda *a, **k: {"ok": True})

    def boom():
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(gc, "check_inverse", boom)
    monkeypatch.setattr(gc, "check_resnet32", lambda *a: {"ok": True})
    monkeypatch.setattr(gc, "check_spark_stage", lambda: {"skipped": True, "reason": "no Java"})
    assert gc.main([]) == 1
    out, err = capsys.readouterr()
    assert "gpu_check: FAILED kernels: check did not hold ({'max_f64_rel_err': 0.3})" in err
    assert "gpu_check: FAILED inverse: RuntimeError: CUDA error: out of memory" in err
    assert "FAILED preconditioner" not in err and "FAILED spark_stage" not in err
    assert out.splitlines()[-1] == "RESULT gpu_check_failed_sections 2"
    report = json.loads(out[: out.rindex("RESULT")])
    assert report["failed_sections"] == ["inverse", "kernels"]
    monkeypatch.setattr(gc, "check_kernels", lambda *a, **k: {"ok": True})
    monkeypatch.setattr(gc, "check_inverse", lambda: {"ok": True})
    assert gc.main([]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "RESULT gpu_check_failed_sections 0"
    assert gc.main(["--smoke"]) == 0  # the smoke runs kernels and preconditioner only
    assert '"inverse"' not in capsys.readouterr().out


def test_gpu_check_sections_run_on_cpu_against_cpu():
    """The checks' own code runs here with the target device set to the CPU (errors are 0)."""
    gc = _gpu_check()
    kernels = gc.check_kernels(gc.KERNEL_SHAPES[:1], device="cpu")
    assert kernels["ok"] and kernels["max_f64_rel_err"] == 0.0
    precond = gc.check_preconditioner("cpu")
    assert precond["ok"] and precond["max_rel_err"] == 0.0 and len(precond["step_rel_err"]) == 5
    # under autocast (bfloat16 on a CPU): float32 rows and inverses, the float32 kernels' answer
    autocast = precond["autocast"]
    assert autocast["ok"] and autocast["output_dtype"] == "torch.bfloat16"
    assert set(autocast["dtypes"]) == {"0", "3"} and autocast["max_rel_err"] < 1e-4


def test_gpu_check_autocast_fails_when_step_leaves_autocast_on(monkeypatch):
    """The autocast check's verdict: a step whose algebra runs in half precision fails it."""
    gc = _gpu_check()
    from async_spark.hylo import preconditioner

    monkeypatch.setattr(
        preconditioner.HyLo, "_full_precision", lambda self: contextlib.nullcontext()
    )
    result = gc.check_autocast("cpu")
    assert result["ok"] is False and result["max_rel_err"] >= 1e-4, result


def test_gpu_check_autoencoder_epoch_runs_every_optimizer_on_cpu():
    """One autoencoder epoch per optimizer, as on the GPU, at a width a CPU runs in seconds."""
    gc = _gpu_check()
    pytest.importorskip("sklearn")
    have_asdl = importlib.util.find_spec("asdl") is not None
    out = gc.check_autoencoder("cpu", width=32, threads=1)
    assert out["ok"], out
    assert out["data"] == "builtin:digits" and out["width"] == 32
    assert set(gc.AUTOENCODER_OPTIMIZERS) == {"hylo", "kis", "kid", "kfac", "smw", "sgd", "adam"}
    for opt in gc.AUTOENCODER_OPTIMIZERS:
        if opt in ("kfac", "smw") and not have_asdl:
            assert out[opt]["skipped"]
            continue
        run = out[opt]
        assert not run["diverged"] and len(run["train_loss"]) == 2, (opt, run)
        assert run["train_loss"][-1] < 784 * math.log(2.0) and run["train_seconds"] > 0

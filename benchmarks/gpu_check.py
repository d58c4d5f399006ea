"""One short check for a machine with an NVIDIA GPU (under 5 minutes on one modern GPU).

Sections (each one JSON object under its name; a failing section records its error and the
others still run):

1. ``kernels``  -- SNGD / KID directions, the kernel matrix and the Woodbury inverse on CUDA agree
   with CPU in float64 (max relative error), and the float32 CUDA error against CPU float64;
2. ``preconditioner`` -- the HyLo preconditioner (hooks, hybrid KID/KIS, ``fisher_window`` 3) on
   a small Conv2d + Linear model: CUDA float64 directions against CPU float64, step by step;
   then (``autocast``) one KID step with forward, backward and ``step()`` inside
   ``torch.autocast(float16)``: rows and inverses must be float32 and the directions those of
   the float32 kernels on the same rows;
3. ``inverse``  -- inverse-update times of KIS / KID / SNGD / K-FAC on ResNet-50 layer shapes
   (``benchmarks/hylo_inverse.py``'s ``measure_layer``; local batch 32, P = 1 and 64);
4. ``resnet32`` -- two epochs of ResNet-32 on CIFAR-shaped synthetic data, HyLo vs SGD
   (``async_spark.hylo.train.train`` on ``cuda``; HyLo also with ``fisher_window`` 10): seconds
   per epoch and test accuracy; then (under ``autoencoder`` in the same section) one epoch of
   the deep autoencoder (784-1000-500-250-30, ``builtin:digits``, or synthetic images without
   scikit-learn) per optimizer -- hylo, kis, kid, kfac, smw (ASDL; skipped without it), sgd,
   adam -- with the per-model defaults: seconds per epoch and the training loss at mid-epoch
   and at its end;
5. ``spark_stage`` -- a short HyLo run on the GPU barrier stage of a ``local-cluster[1,2,4096]``
   whose worker discovers the GPUs with ``spark-conf/gpu/getGpusResources.sh``: the task must get
   its GPU from Spark's resource profile; then two ranks asking for 0.5 GPU each (one GPU, NCCL)
   must be refused with a clear error, not hang. Skipped without Java.

Every section ends with an ``ok`` flag: 1 and 2 their error bounds (float64 CUDA within 1e-8 of
CPU; under autocast float32 within 1e-4 of the kernels); 3 every time finite and > 0; 4 no run diverged, accuracies in [0, 1], times finite, every
autoencoder loss finite and below 784 ln 2 (where it starts) after its epoch; 5 the GPU
came from Spark and the shared-GPU request was refused. A section that raised records
``ok: false`` with its error; a section skipped for want of Java records ``skipped``.

Exit status (the last stdout line is ``RESULT gpu_check_failed_sections <count>``):

* 0 -- every section that ran is ok;
* 1 -- at least one failed; stderr names each (``gpu_check: FAILED kernels: ...``);
* 3 -- no CUDA device (or no torch): nothing was checked. It prints ``{"skipped": true, ...}`` and
  a ``gpu_check: no CUDA device ...`` line on stderr. A distinct code, so that a GPU job whose
  device went missing is not mistaken for a pass; ``--allow-no-gpu`` turns it into 0 for scripts
  that run the check on any machine.

``--smoke``: sections 1 and 2 only, at their smallest size (seconds on any GPU).

    python benchmarks/gpu_check.py --out runs/gpu_check.json
    python benchmarks/gpu_check.py --smoke
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXIT_FAILED = 1
EXIT_NO_GPU = 3
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _rel(a: Any, b: Any) -> float:
    return float(
        (a.double().cpu() - b.double().cpu()).norm() / max(float(b.double().norm()), 1e-300)
    )


KERNEL_SHAPES = ((64, 577, 64), (128, 1153, 128), (256, 4609, 512))


def check_kernels(
    shapes: tuple[tuple[int, int, int], ...] = KERNEL_SHAPES, device: str = "cuda"
) -> dict[str, Any]:
    import torch

    from async_spark.hylo import kernels as K

    out: dict[str, Any] = {}
    g = torch.Generator().manual_seed(0)
    for n, d_in, d_out in shapes:
        A = torch.randn(n, d_in, generator=g, dtype=torch.float64)
        G = torch.randn(n, d_out, generator=g, dtype=torch.float64) / d_out**0.5
        grad = torch.randn(d_out, d_in, generator=g, dtype=torch.float64)
        lam, r = 0.03, max(1, n // 10)
        cpu = {
            "kernel": K.kernel_matrix(A, G),
            "inverse": K.woodbury_inverse(A, G, lam),
            "sngd": K.sngd_direction(A, G, grad, lam),
            "kid": K.kid_direction(A, G, grad, lam, r),
        }
        row: dict[str, Any] = {}
        for dtype in (torch.float64, torch.float32):
            Ac, Gc, gc = (t.to(device, dtype) for t in (A, G, grad))
            gpu = {
                "kernel": K.kernel_matrix(Ac, Gc),
                "inverse": K.woodbury_inverse(Ac, Gc, lam),
                "sngd": K.sngd_direction(Ac, Gc, gc, lam),
                "kid": K.kid_direction(Ac, Gc, gc, lam, r),
            }
            tag = "f64" if dtype == torch.float64 else "f32"
            for k in cpu:
                row[f"{k}_{tag}_rel_err"] = _rel(gpu[k], cpu[k])
        out[f"n{n}_din{d_in}_dout{d_out}"] = row
    worst64 = max(v for row in out.values() for k, v in row.items() if "_f64_" in k)
    out["max_f64_rel_err"] = worst64
    out["ok"] = worst64 < 1e-8
    return out


def check_preconditioner(device: str = "cuda") -> dict[str, Any]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    from async_spark.hylo import HyLo
    from async_spark.hylo.schedules import EpochWindowRule

    def directions(on: str) -> list[Any]:
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10)
        ).to(on, torch.float64)
        precond = HyLo(
            model,
            method="hybrid",
            switch=EpochWindowRule([(0, 1)]),
            rank_ratio=0.25,
            damping=0.05,
            fisher_window=3,
        )
        g = torch.Generator().manual_seed(1)
        out = []
        for step in range(5):
            if step == 2:
                precond.set_epoch(1)  # KID captures, then KIS ones, in one window
            x = torch.randn(32, 3, 8, 8, generator=g, dtype=torch.float64).to(on)
            y = torch.randint(0, 10, (32,), generator=g).to(on)
            model.zero_grad()
            F.cross_entropy(model(x), y).backward()
            precond.step()
            out.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).cpu())
        return out

    cpu, gpu = directions("cpu"), directions(device)
    errs = [_rel(a, b) for a, b in zip(gpu, cpu, strict=True)]
    autocast = check_autocast(device)
    return {
        "step_rel_err": errs,
        "max_rel_err": max(errs),
        "autocast": autocast,
        "ok": max(errs) < 1e-8 and autocast["ok"],
    }


def check_autocast(device: str = "cuda") -> dict[str, Any]:
    """HyLo inside ``torch.autocast`` (float16 on CUDA, bfloat16 on CPU; forward, backward and
    ``step()`` all inside it): the rows must be captured and the inverses built in float32, and
    each layer's direction must be the one the float32 kernels give on the same rows outside
    autocast (relative error below 1e-4)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from async_spark.hylo import HyLo
    from async_spark.hylo import kernels as K
    from async_spark.hylo.layers import grad_matrix

    kind = torch.device(device).type
    half = torch.float16 if kind == "cuda" else torch.bfloat16
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10)
    ).to(device)
    rho, lam = 0.25, 0.05
    precond = HyLo(model, method="kid", rank_ratio=rho, damping=lam)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 3, 8, 8, generator=g).to(device)
    y = torch.randint(0, 10, (32,), generator=g).to(device)
    with torch.autocast(kind, dtype=half):
        out = model(x)
        F.cross_entropy(out, y).backward()
        rows = {ly.name: (ly.A, ly.G, grad_matrix(ly)) for ly in precond.layers}
        precond.step()
    errs: dict[str, float] = {}
    dtypes: dict[str, dict[str, str]] = {}
    for ly in precond.layers:
        A, G, grad = rows[ly.name]
        r = min(A.shape[0], max(1, math.ceil(rho * A.shape[0])))
        ref = K.kid_direction(A, G, grad, lam, r)  # float32, autocast off
        errs[ly.name] = _rel(grad_matrix(ly), ref)
        inverse = None if ly.inverse is None else ly.inverse.dtype
        dtypes[ly.name] = {"rows": str(A.dtype), "inverse": str(inverse)}
    single = all(
        d == {"rows": "torch.float32", "inverse": "torch.float32"} for d in dtypes.values()
    )
    worst = max(errs.values())
    return {
        "autocast_dtype": str(half),
        "output_dtype": str(out.dtype),
        "dtypes": dtypes,
        "rel_err": errs,
        "max_rel_err": worst,
        "ok": out.dtype == half and single and worst < 1e-4,
    }


def check_inverse() -> dict[str, Any]:
    import torch
    from hylo_inverse import kfac_times, measure_layer

    from async_spark.hylo.models import resnet50_layer_shapes

    device = torch.device("cuda")
    shapes = resnet50_layer_shapes()
    picked = sorted(set([shapes[0], shapes[len(shapes) // 2], shapes[-1]]))
    picked.append(max(shapes[:-1], key=lambda s: s[1] * s[2]))
    rows = []
    for name, d_in, d_out in picked:
        for P in (1, 64):
            row = measure_layer(d_in, d_out, 32, P, device, repeats=3, sngd_max=4096)
            t_inv, t_eig = kfac_times(d_in, d_out, device, repeats=3)
            row.update(name=name, kfac_inv_s=t_inv, kfac_eigh_s=t_eig)
            rows.append(row)
    times = [float(v) for r in rows for k, v in r.items() if k.endswith("_s") and v is not None]
    return {"rows": rows, "ok": bool(times) and all(math.isfinite(t) and t > 0 for t in times)}


def check_resnet32(n_train: int, epochs: int) -> dict[str, Any]:
    from async_spark.hylo.train import train

    out: dict[str, Any] = {}
    for key, opt, window in (("sgd", "sgd", 1), ("hylo", "hylo", 1), ("hylo_w10", "hylo", 10)):
        s = train(
            {
                "model": "resnet32",
                "data": "synthetic",
                "optimizer": opt,
                "fisher_window": window,
                "epochs": epochs,
                "batch_size": 128,
                "device": "cuda",
                "n_train": n_train,
                "n_test": 2000,
                "inv_update_steps": 10,
                "threads": 4,
            }
        )
        out[key] = {
            "test_accuracy": s["test_accuracy"],
            "train_seconds": s["wall_seconds"],
            "seconds_per_epoch": s["wall_seconds"] / max(1, s["epochs_run"]),
        }
        out[key]["diverged"] = bool(s["diverged"])
    out["hylo_over_sgd_time"] = out["hylo"]["train_seconds"] / out["sgd"]["train_seconds"]
    runs = [out[k] for k in ("sgd", "hylo", "hylo_w10")]
    resnet_ok = all(
        not r["diverged"]
        and 0.0 <= r["test_accuracy"] <= 1.0
        and math.isfinite(r["train_seconds"])
        and r["train_seconds"] > 0
        for r in runs
    )
    # the autoencoder rides in this section (its verdict joins the section's): a section of its
    # own would run, unpatched, in tests/benchmarks/test_smoke.py's fake-CUDA check of main()
    out["autoencoder"] = check_autoencoder()
    out["ok"] = resnet_ok and out["autoencoder"]["ok"]
    return out


AUTOENCODER_OPTIMIZERS = ("hylo", "kis", "kid", "kfac", "smw", "sgd", "adam")


def check_autoencoder(device: str = "cuda", width: int = 1000, threads: int = 4) -> dict[str, Any]:
    """One epoch of the deep autoencoder per optimizer on ``device``, with the per-model
    defaults (``async_spark.hylo.defaults``): the training-set loss must be finite and, after
    the epoch, below 784 ln 2 = 543.4 (an output of 1/2 everywhere, where an untrained net
    starts).  ``width`` is the first hidden layer's (the classic 1000); ``threads`` the CPU
    threads each run sets (``torch.set_num_threads``)."""
    import importlib.util

    from async_spark.hylo.train import train

    data = "builtin:digits" if importlib.util.find_spec("sklearn") else "synthetic"
    have_asdl = importlib.util.find_spec("asdl") is not None
    out: dict[str, Any] = {"data": data, "width": width}
    for opt in AUTOENCODER_OPTIMIZERS:
        if opt in ("kfac", "smw") and not have_asdl:
            out[opt] = {"skipped": True, "reason": "asdl (asdfghjkl) is not installed"}
            continue
        t = time.perf_counter()
        s = train(
            {
                "model": "autoencoder",
                "data": data,
                "width": width,
                "optimizer": opt,
                "epochs": 1,
                "evals_per_epoch": 2,  # the loss after half an epoch and after the epoch
                "n_train": 1500,
                "n_test": 300,
                "device": device,
                "threads": threads,
            }
        )
        evals = [loss for _, loss in s["train_loss_evaluations"]]
        out[opt] = {
            "seconds": time.perf_counter() - t,
            "train_seconds": s["wall_seconds"],
            "train_loss": evals,
            "diverged": bool(s["diverged"]),
        }
    ran = [r for k, r in out.items() if isinstance(r, dict) and not r.get("skipped")]
    out["ok"] = bool(ran) and all(
        not r["diverged"]
        and len(r["train_loss"]) == 2
        and all(math.isfinite(v) for v in r["train_loss"])
        and r["train_loss"][-1] < 784 * math.log(2.0)
        and r["train_seconds"] > 0
        for r in ran
    )
    return out


def check_spark_stage() -> dict[str, Any]:
    from async_spark.engine.session import JavaNotFoundError, build_session, check_java

    try:
        check_java()
    except JavaNotFoundError as exc:
        return {"skipped": True, "reason": str(exc)}
    from async_spark.gpu import RankFailedError, train_hylo_spark

    script = str(ROOT / "spark-conf" / "gpu" / "getGpusResources.sh")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = build_session(
        "local-cluster[1,2,4096]",
        app_name="async-spark gpu_check",
        conf={
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.worker.resource.gpu.amount": "1",
            "spark.worker.resource.gpu.discoveryScript": script,
            "spark.executor.resource.gpu.amount": "1",
            "spark.executor.resource.gpu.discoveryScript": script,
            "spark.executor.cores": "2",
            "spark.barrier.sync.timeout": "120s",
            "spark.stage.maxConsecutiveAttempts": "1",
            "spark.dynamicAllocation.enabled": "false",
        },
    )
    out: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            s = train_hylo_spark(
                {
                    "model": "cnn1d",
                    "data": "synthetic",
                    "optimizer": "hylo",
                    "epochs": 3,
                    "batch_size": 128,
                    "n_train": 4096,
                    "n_test": 512,
                    "workers": 1,
                    "device": "cuda",
                    "timeout": 120.0,
                    "out": tmp,
                },
                spark,
                gpus_per_task=1.0,
            )
            out["one_rank"] = {
                "seconds": time.perf_counter() - t,
                "startup_seconds": s["startup_seconds"],
                "train_seconds": s["wall_seconds"],
                "test_accuracy": s["test_accuracy"],
                "device": s["device"],
                "gpu_from_spark": any("assigned by Spark" in ln for ln in s["rank_logs"]["0"]),
                "files": sorted(os.listdir(tmp)),
            }
        t = time.perf_counter()
        try:
            train_hylo_spark(
                {
                    "model": "cnn1d",
                    "data": "synthetic",
                    "epochs": 1,
                    "n_train": 256,
                    "batch_size": 64,
                    "workers": 2,
                    "device": "cuda",
                    "timeout": 60.0,
                },
                spark,
                gpus_per_task=0.5,
            )
            out["shared_gpu_nccl"] = {"error": None}
        except (RankFailedError, TimeoutError) as exc:
            out["shared_gpu_nccl"] = {"error": str(exc)[:500], "type": type(exc).__name__}
        out["shared_gpu_nccl"]["seconds"] = time.perf_counter() - t
    finally:
        spark.stop()
    out["ok"] = bool(out["one_rank"]["gpu_from_spark"] and out["shared_gpu_nccl"].get("error"))
    return out


def failed_sections(report: dict[str, Any], names: list[str]) -> dict[str, str]:
    """Section name -> why it failed, for each section in ``names`` that is not ok or skipped."""
    out: dict[str, str] = {}
    for name in names:
        sec = report.get(name, {})
        if sec.get("skipped"):
            continue
        if "error" in sec:
            out[name] = sec["error"]
        elif sec.get("ok") is not True:
            worst = {k: v for k, v in sec.items() if k.startswith("max_")}
            out[name] = f"check did not hold ({worst or 'ok is ' + repr(sec.get('ok'))})"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default=None, help="write the JSON here as well")
    ap.add_argument("--n-train", type=int, default=10000, help="ResNet-32 training rows")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument(
        "--skip", default="", help="comma-separated sections to skip (kernels,inverse,...)"
    )
    ap.add_argument(
        "--smoke", action="store_true", help="kernels (smallest shape) and preconditioner only"
    )
    ap.add_argument(
        "--allow-no-gpu", action="store_true", help="exit 0 instead of 3 when there is no CUDA"
    )
    args = ap.parse_args(argv)
    no_gpu = EXIT_NO_GPU if not args.allow_no_gpu else 0
    try:
        import torch
    except ImportError:
        print(json.dumps({"skipped": True, "reason": "torch is not installed"}))
        print("gpu_check: torch is not installed; nothing was checked", file=sys.stderr)
        return no_gpu
    if not torch.cuda.is_available():
        reason = (
            "no CUDA device (torch.cuda.is_available() is False); "
            "run this on a machine with an NVIDIA GPU"
        )
        print(json.dumps({"skipped": True, "reason": reason, "torch": torch.__version__}))
        print(f"gpu_check: {reason}; nothing was checked", file=sys.stderr)
        return no_gpu
    report: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "smoke": args.smoke,
    }
    skip = set(filter(None, args.skip.split(",")))
    sections = {
        "kernels": (lambda: check_kernels(KERNEL_SHAPES[:1])) if args.smoke else check_kernels,
        "preconditioner": check_preconditioner,
        "inverse": check_inverse,
        "resnet32": lambda: check_resnet32(args.n_train, args.epochs),
        "spark_stage": check_spark_stage,
    }
    if args.smoke:
        skip |= {"inverse", "resnet32", "spark_stage"}
    unknown = skip - set(sections)
    if unknown:
        ap.error(f"--skip: unknown sections {sorted(unknown)}; known: {sorted(sections)}")
    ran = [name for name in sections if name not in skip]
    t_all = time.perf_counter()
    for name in ran:
        t = time.perf_counter()
        try:
            report[name] = sections[name]()
        except Exception as exc:  # record and go on: one call should give all it can
            report[name] = {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "trace": traceback.format_exc(),
            }
        report[name]["section_seconds"] = time.perf_counter() - t
        print(f"gpu_check: {name} done in {report[name]['section_seconds']:.1f}s", file=sys.stderr)
    report["total_seconds"] = time.perf_counter() - t_all
    failed = failed_sections(report, ran)
    report["failed_sections"] = sorted(failed)
    text = json.dumps(report, indent=2, default=str)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(text)
    for name, why in failed.items():
        print(f"gpu_check: FAILED {name}: {why.splitlines()[0][:300]}", file=sys.stderr)
    print(f"RESULT gpu_check_failed_sections {len(failed)}")
    return EXIT_FAILED if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Time, memory and communication of one inverse update on ResNet-50 layer shapes.

For each ResNet-50 layer shape (d_in, d_out), local batch b and world size P, with rank ratio
rho = 0.1 (r = ceil(rho b) kept rows per rank, m' = P r gathered rows):

* KIS   -- local importance sampling (b rows), then the m' x m' kernel and its inverse;
* KID   -- local interpolative decomposition (b x b kernel, QR), the block-diagonal core, then the
           m' x m' kernel and its inverse;
* SNGD  -- the (P b) x (P b) kernel and its inverse (every row kept);
* K-FAC -- the inverses of the damped Kronecker factors (d_in x d_in and d_out x d_out), by
           ``torch.linalg.inv`` or by eigendecomposition (``eigh``), the two options of KAISA.

The gather is simulated by stacking P ranks' worth of random rows (the work after the gather
does not depend on the values).  Times are the best of ``--repeats`` runs, on one process.
Memory is the size of the matrices an update creates (analytic, float32); on CUDA the peak
allocated memory is measured too.  Communication per inverse update (float32 bytes, per layer):
KIS P r (d_in + d_out) + (P r)^2, KID that plus P r^2 cores, SNGD P b (d_in + d_out) + (P b)^2,
K-FAC 2 (d_in^2 + d_out^2) (factor all-reduce and inverse broadcast).

Whole network, one inverse update: for each (b, P) the script sums its per-shape rows, each
times the number of ResNet-50 layers of that shape (``layers_with_shape``): KIS, KID, SNGD (only
when no shape skipped it) and K-FAC (the faster of its inverse and eigendecomposition per shape),
K-FAC / KIS, and the number of distinct shapes where K-FAC is faster than KIS.
``--totals-from FILE`` prints that table from the rows of an earlier ``--out FILE``, measuring
nothing.

Last line: ``RESULT kis_vs_kfac_inverse_speedup <x>`` -- at P = 64 and b = 32 on the largest layer
(3 x 3 conv with 512 channels, d_in = 4608), the faster of K-FAC's two inverse times divided by
KIS's time.

Usage::

    python benchmarks/hylo_inverse.py --quick          # the largest layer, b = 32, P = 1, 64
    python benchmarks/hylo_inverse.py --out runs/hylo_inverse.json
    python benchmarks/hylo_inverse.py --smoke          # seconds: the smallest layer, b = 32, P = 64
    python benchmarks/hylo_inverse.py --totals-from runs/hylo_inverse.json   # totals, no timing

``--smoke`` reports its RESULT on the smallest layer shape (the largest one's K-FAC inverse alone
takes seconds on a CPU): it checks that the script runs, it is not the figure.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from collections.abc import Callable
from typing import Any

import torch

from async_spark.hylo import kernels as K
from async_spark.hylo.models import resnet50_layer_shapes

RHO = 0.1
BYTES = 4


def _best(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t)
    return min(times)


def _rows(n: int, d_in: int, d_out: int, device: torch.device, gen: torch.Generator):
    A = torch.randn(n, d_in, generator=gen).to(device)
    G = torch.randn(n, d_out, generator=gen).to(device) / math.sqrt(d_out)
    return A, G


def measure_layer(
    d_in: int, d_out: int, b: int, P: int, device: torch.device, repeats: int, sngd_max: int
) -> dict[str, object]:
    gen = torch.Generator().manual_seed(0)
    lam = 0.03
    r = max(1, math.ceil(RHO * b))
    m = P * r
    A_loc, G_loc = _rows(b, d_in, d_out, device, gen)
    A_gat, G_gat = _rows(m, d_in, d_out, device, gen)
    kgen = torch.Generator(device="cpu").manual_seed(1)

    def kis() -> None:
        idx = K.kis_select(A_loc, G_loc, r, kgen)
        _ = (A_loc[idx], G_loc[idx])
        K.woodbury_inverse(A_gat, G_gat, lam)

    def kid() -> None:
        _, W = K.kid_select(A_loc, G_loc, r)
        core = K.kid_core([W] * P, lam, P * b)
        K.woodbury_inverse(A_gat, G_gat, lam, core)

    out: dict[str, object] = {"d_in": d_in, "d_out": d_out, "b": b, "P": P, "r": r, "m_prime": m}
    out["kis_s"] = _best(kis, repeats, device)
    out["kid_s"] = _best(kid, repeats, device)
    n_all = P * b
    if n_all <= sngd_max:
        A_all, G_all = _rows(n_all, d_in, d_out, device, gen)
        out["sngd_s"] = _best(lambda: K.woodbury_inverse(A_all, G_all, lam), repeats, device)
    else:
        out["sngd_s"] = None  # skipped: (P b)^2 kernel too large for this run
    out["mem_kis_bytes"] = BYTES * (m * m * 2 + m * (d_in + d_out))
    out["mem_kid_bytes"] = BYTES * (b * b * 2 + m * m * 2 + m * (d_in + d_out))
    out["mem_sngd_bytes"] = BYTES * (n_all * n_all * 2 + n_all * (d_in + d_out))
    out["mem_kfac_bytes"] = BYTES * 2 * (d_in * d_in + d_out * d_out)
    out["comm_kis_bytes"] = BYTES * (m * (d_in + d_out) + m * m)
    out["comm_kid_bytes"] = BYTES * (m * (d_in + d_out) + m * m + P * r * r)
    out["comm_sngd_bytes"] = BYTES * (n_all * (d_in + d_out) + n_all * n_all)
    out["comm_kfac_bytes"] = BYTES * 2 * (d_in * d_in + d_out * d_out)
    return out


def kfac_times(d_in: int, d_out: int, device: torch.device, repeats: int) -> tuple[float, float]:
    gen = torch.Generator().manual_seed(2)
    lam = 0.03
    facs = []
    for d in (d_in, d_out):
        X = torch.randn(max(d, 64), d, generator=gen).to(device)
        facs.append(X.T @ X / X.shape[0] + lam * torch.eye(d, device=device))
    t_inv = _best(lambda: [torch.linalg.inv(f) for f in facs], repeats, device)
    t_eig = _best(lambda: [torch.linalg.eigh(f) for f in facs], repeats, device)
    return t_inv, t_eig


def network_totals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Whole-network totals per (b, P), computed from the per-shape rows (seconds)."""
    groups: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((int(row["b"]), int(row["P"])), []).append(row)
    out = []
    for (b, P), rs in groups.items():
        n = [int(r["layers_with_shape"]) for r in rs]
        kfac_each = [min(float(r["kfac_inv_s"]), float(r["kfac_eig_s"])) for r in rs]
        kis = sum(c * float(r["kis_s"]) for c, r in zip(n, rs, strict=True))
        sngd = None
        if all(r["sngd_s"] is not None for r in rs):
            sngd = sum(c * float(r["sngd_s"]) for c, r in zip(n, rs, strict=True))
        kfac = sum(c * k for c, k in zip(n, kfac_each, strict=True))
        out.append(
            {
                "b": b,
                "P": P,
                "shapes": len(rs),
                "layers": sum(n),
                "kis_s": kis,
                "kid_s": sum(c * float(r["kid_s"]) for c, r in zip(n, rs, strict=True)),
                "sngd_s": sngd,
                "kfac_s": kfac,
                "kfac_over_kis": kfac / kis,
                "shapes_kfac_faster": sum(
                    k < float(r["kis_s"]) for k, r in zip(kfac_each, rs, strict=True)
                ),
            }
        )
    return out


def print_totals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    totals = network_totals(rows)
    print(
        "# whole network, one inverse update (each shape x its layers in ResNet-50; K-FAC: the "
        "faster of inv/eig per shape)"
    )
    print(
        f"# {'b':>4}{'P':>4}{'shapes':>7}{'layers':>7}{'KIS ms':>10}{'KID ms':>10}"
        f"{'SNGD ms':>11}{'K-FAC ms':>10}{'K-FAC/KIS':>10}  shapes where K-FAC is faster"
    )
    for t in totals:
        sngd = f"{1e3 * t['sngd_s']:11.1f}" if t["sngd_s"] is not None else f"{'skipped':>11}"
        print(
            f"# {t['b']:>4}{t['P']:>4}{t['shapes']:>7}{t['layers']:>7}{1e3 * t['kis_s']:10.1f}"
            f"{1e3 * t['kid_s']:10.1f}{sngd}{1e3 * t['kfac_s']:10.1f}{t['kfac_over_kis']:10.1f}"
            f"  {t['shapes_kfac_faster']} / {t['shapes']}"
        )
    return totals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="largest layer only, b=32, P=1,64")
    ap.add_argument(
        "--smoke", action="store_true", help="smallest layer, b=32, P=64, 1 repeat (seconds)"
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sngd-max", type=int, default=4096, help="largest P*b for SNGD")
    ap.add_argument("--out", default=None, help="write all rows as JSON here")
    ap.add_argument(
        "--totals-from", default=None, help="print the whole-network totals of an --out file"
    )
    args = ap.parse_args()
    if args.totals_from:
        with open(args.totals_from) as f:
            saved = json.load(f)
        print(f"# totals from {args.totals_from} (device={saved.get('device')}), nothing measured")
        print_totals(saved["rows"])
        return
    device = torch.device(args.device)
    shapes = resnet50_layer_shapes()
    largest = max(shapes[:-1], key=lambda s: s[1] * s[2])
    if args.smoke:
        largest = min(shapes, key=lambda s: s[1] * s[2])  # the RESULT's layer in this mode
        shapes_run = [largest]
        batches, worlds = [32], [64]
        args.repeats, args.sngd_max = 1, 256
    elif args.quick:
        shapes_run = [largest]
        batches, worlds = [32], [1, 64]
    else:
        seen: dict[tuple[int, int], str] = {}
        for name, d_in, d_out in shapes:
            seen.setdefault((d_in, d_out), name)
        shapes_run = [(n, a, b) for (a, b), n in seen.items()]
        batches, worlds = [32, 64, 128], [1, 8, 64]
    counts: dict[tuple[int, int], int] = {}
    for _, d_in, d_out in shapes:
        counts[(d_in, d_out)] = counts.get((d_in, d_out), 0) + 1

    print(
        f"# device={device} torch={torch.__version__} threads={torch.get_num_threads()} "
        f"cpu={platform.processor() or platform.machine()} rho={RHO}"
    )
    print(
        f"{'layer':<20}{'d_in':>6}{'d_out':>6}{'b':>5}{'P':>4}{'m_prime':>8}"
        f"{'KIS ms':>10}{'KID ms':>10}{'SNGD ms':>10}{'KFACinv ms':>11}{'KFACeig ms':>11}"
        f"{'speedup':>9}"
    )
    rows = []
    kfac_cache: dict[tuple[int, int], tuple[float, float]] = {}
    for name, d_in, d_out in shapes_run:
        if (d_in, d_out) not in kfac_cache:
            kfac_cache[(d_in, d_out)] = kfac_times(d_in, d_out, device, args.repeats)
        t_inv, t_eig = kfac_cache[(d_in, d_out)]
        for b in batches:
            for P in worlds:
                row = measure_layer(d_in, d_out, b, P, device, args.repeats, args.sngd_max)
                row.update(
                    layer=name,
                    kfac_inv_s=t_inv,
                    kfac_eig_s=t_eig,
                    layers_with_shape=counts[(d_in, d_out)],
                )
                kis_s = float(row["kis_s"])  # type: ignore[arg-type]
                row["kis_vs_kfac"] = min(t_inv, t_eig) / kis_s
                rows.append(row)
                sngd = row["sngd_s"]
                sngd_txt = f"{1e3 * float(sngd):10.2f}" if sngd is not None else f"{'skip':>10}"
                print(
                    f"{name:<20}{d_in:>6}{d_out:>6}{b:>5}{P:>4}{row['m_prime']:>8}"
                    f"{1e3 * kis_s:10.2f}{1e3 * float(row['kid_s']):10.2f}{sngd_txt}"  # type: ignore[arg-type]
                    f"{1e3 * t_inv:11.2f}{1e3 * t_eig:11.2f}{row['kis_vs_kfac']:9.1f}"
                )
    totals = print_totals(rows)
    # communication per inverse update, whole network (all 54 layers)
    for b in batches:
        for P in worlds:
            tot = {k: 0 for k in ("kis", "kid", "sngd", "kfac")}
            for _, d_in, d_out in shapes:
                r = max(1, math.ceil(RHO * b))
                m, n_all = P * r, P * b
                tot["kis"] += BYTES * (m * (d_in + d_out) + m * m)
                tot["kid"] += BYTES * (m * (d_in + d_out) + m * m + P * r * r)
                tot["sngd"] += BYTES * (n_all * (d_in + d_out) + n_all * n_all)
                tot["kfac"] += BYTES * 2 * (d_in * d_in + d_out * d_out)
            print(
                f"# comm ResNet-50 b={b} P={P}: KIS {tot['kis'] / 2**20:.1f} MiB, KID "
                f"{tot['kid'] / 2**20:.1f} MiB, SNGD {tot['sngd'] / 2**20:.1f} MiB, K-FAC "
                f"{tot['kfac'] / 2**20:.1f} MiB; K-FAC/KIS {tot['kfac'] / tot['kis']:.1f}x"
            )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": str(device), "rows": rows, "totals": totals}, f, indent=1)
    target = [
        r
        for r in rows
        if r["b"] == 32 and r["P"] == 64 and (r["d_in"], r["d_out"]) == (largest[1], largest[2])
    ]
    print(f"RESULT kis_vs_kfac_inverse_speedup {float(target[0]['kis_vs_kfac']):.1f}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()

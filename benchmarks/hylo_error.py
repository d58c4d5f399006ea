"""HyLo's diagnostics: KID and KIS gradient error across rank ratios, kernel rank across batches.

On the MNIST-1D CNN (trained for ``--warm-epochs`` epochs of SGD first, so that the gradients are
those of a model in training), for each preconditioned layer:

* gradient error ||d - d_SNGD|| / ||d_SNGD|| of KID and of KIS (mean over ``--seeds`` samplings)
  against the exact SNGD direction, for rank ratios rho in {0.05, 0.1, 0.2, 0.4, 0.8, 1};
* the kernel's rank: the number of singular values of K = (A A^T) o (G G^T) that cover 90% of
  the sum of singular values, for batch sizes 32 ... 512 (the paper's Fig. on rank vs batch).

Last line: ``RESULT kis_over_kid_error_rho0.1 <x>`` -- the mean (over layers) KIS error divided by
the mean KID error at rho = 0.1, batch 128 (above 1 when KID is more accurate).

Usage::

    python benchmarks/hylo_error.py --quick
    python benchmarks/hylo_error.py --smoke   # seconds: 1 warm-up epoch, rho 0.1 and 1, 1 seed
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F

from async_spark.hylo import HyLo
from async_spark.hylo import kernels as K
from async_spark.hylo.data import load_dataset
from async_spark.hylo.layers import grad_matrix
from async_spark.hylo.models import CNN1D

DAMPING = 0.03


def capture(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor):
    """Per-layer (name, A, G, grad) of one batch, in float64, through HyLo's hooks."""
    p = HyLo(model, method="sngd", damping=DAMPING)
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    out = []
    for layer in p.layers:
        g = grad_matrix(layer)
        assert layer.A is not None and layer.G is not None and g is not None
        out.append((layer.name, layer.A.double(), layer.G.double(), g.double()))
    p.remove_hooks()
    return out


def rank90(A: torch.Tensor, G: torch.Tensor) -> int:
    s = torch.linalg.svdvals(K.kernel_matrix(A, G))
    c = torch.cumsum(s, 0) / s.sum()
    return int((c < 0.9).sum()) + 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--smoke", action="store_true", help="tiny sizes, seconds: checks the script runs"
    )
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--warm-epochs", type=int, default=None, help="default 2 (smoke: 1)")
    args = ap.parse_args()
    if args.warm_epochs is None:
        args.warm_epochs = 1 if args.smoke else 2
    torch.manual_seed(0)
    data = load_dataset("builtin:mnist1d", "cnn1d")
    model = CNN1D()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(args.warm_epochs):
        perm = torch.randperm(data.x_train.shape[0])
        for i in range(0, len(perm) - 127, 128):
            idx = perm[i : i + 128]
            opt.zero_grad()
            F.cross_entropy(model(data.x_train[idx]), data.y_train[idx]).backward()
            opt.step()
    ratios = (
        [0.1, 1.0]
        if args.smoke
        else [0.1, 0.4, 1.0]
        if args.quick
        else [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]
    )
    seeds = 1 if args.smoke else 2 if args.quick else args.seeds
    batch = 128
    layers = capture(model, data.x_train[:batch], data.y_train[:batch])
    print(f"# gradient error vs SNGD, batch {batch}, damping {DAMPING}, {seeds} KIS seeds")
    print(f"{'layer':<8}{'rho':>6}{'r':>5}{'KID err':>12}{'KIS err':>12}")
    mean_err: dict[float, list[float]] = {rho: [0.0, 0.0] for rho in ratios}
    for name, A, G, grad in layers:
        ref = K.sngd_direction(A, G, grad, DAMPING)
        for rho in ratios:
            r = max(1, math.ceil(rho * batch))
            kid = float((K.kid_direction(A, G, grad, DAMPING, r) - ref).norm() / ref.norm())
            kis = 0.0
            for s in range(seeds):
                gen = torch.Generator().manual_seed(s)
                d = K.kis_direction(A, G, grad, DAMPING, r, generator=gen)
                kis += float((d - ref).norm() / ref.norm()) / seeds
            mean_err[rho][0] += kid / len(layers)
            mean_err[rho][1] += kis / len(layers)
            print(f"{name:<8}{rho:>6}{r:>5}{kid:12.3e}{kis:12.3e}")
    for rho in ratios:
        print(
            f"# mean over layers rho={rho}: KID {mean_err[rho][0]:.3e} KIS {mean_err[rho][1]:.3e}"
        )
    sizes = [32, 128] if args.smoke else [32, 128, 512] if args.quick else [32, 64, 128, 256, 512]
    print("# kernel rank (singular values covering 90% of the spectrum) vs batch size")
    print(f"{'layer':<8}" + "".join(f"{f'b={b}':>9}" for b in sizes))
    ranks: dict[str, list[int]] = {}
    for b in sizes:
        for name, A, G, _ in capture(model, data.x_train[:b], data.y_train[:b]):
            ranks.setdefault(name, []).append(rank90(A, G))
    for name, rs in ranks.items():
        print(f"{name:<8}" + "".join(f"{r:>9}" for r in rs))
    kid0, kis0 = mean_err[0.1]
    print(f"RESULT kis_over_kid_error_rho0.1 {kis0 / kid0:.2f}")


if __name__ == "__main__":
    main()

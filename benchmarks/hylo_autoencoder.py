"""Wall-clock time to a target training reconstruction loss on the deep autoencoder.

The workload where natural gradient should win: Hinton & Salakhutdinov's deep autoencoder
(784-1000-500-250-30 and its mirror, ReLU units here, ``async_spark.hylo.models.AutoEncoder``),
trained to reconstruct scikit-learn's handwritten digits upsampled to 28 x 28
(``builtin:digits``: 1500 training images, no download) with the sigmoid cross-entropy summed
over an image's pixels.  The measure is the training seconds until the loss over the whole
training set (evaluated ``--evals-per-epoch`` times per epoch with the clock stopped) first
reaches ``--target``; each run stops at the end of that epoch.

Optimizers (all through ``async_spark.hylo.train.train``): HyLo ``hylo`` (hybrid KID/KIS),
``kis`` and ``kid`` (rho = 0.1 as in the paper), ASDL's (``asdfghjkl``) K-FAC ``kfac`` and
SMW-NGD ``smw``, torch SGD with momentum ``sgd`` and Adam ``adam``.

Fairness:

* every optimizer gets the same search budget: the same number of grid points
  (:data:`GRIDS`), each run once on the tuning seed (:data:`TUNE_SEED`); the point with the
  smallest time to the target wins (runs that never reach it rank by their final loss);
* the step-size knob is each method's own: the learning rate for SGD, Adam and SMW-NGD (which
  preconditions inside its backward pass and runs unclipped), and for HyLo and K-FAC the KL
  clip, which binds at every step on this loss (the clip scale was ~0.01 throughout with
  ``kl_clip`` 1e-3: the learning rate, 0.1 for both, no longer sets the step);
* damping is swept for the curvature methods, and each has one curvature-memory setting in its
  grid: HyLo's ``fisher_window`` (10, chosen on MNIST-1D; the full grid also tries 1) and
  K-FAC's running-average ``factor_decay`` (0 and 0.9 in the full grid);
* the chosen point of each optimizer then runs on ``--seeds`` evaluation seeds (0, 1, ...,
  distinct from the tuning seed), seed by seed with every optimizer in turn (so that a change
  of the machine's load falls on all alike); medians with [min, max] are reported, with the
  median epochs to the target (a count, free of timing noise) and seconds per epoch.  A seed
  that never reaches the target counts as infinitely slow (the count that reached it is shown).

The HyLo variant reported in the RESULT lines is the one (of hylo, kis, kid) that was fastest on
the tuning seed; the first-order baseline is the better of SGD and Adam on the evaluation seeds
(a choice that favours the baseline).

Last two lines::

    RESULT hylo_vs_kfac_time_to_target <K-FAC median time / HyLo median time>
    RESULT hylo_vs_best_first_order_time_to_target <min(SGD, Adam) median time / HyLo median>

(``nan`` when HyLo never reached the target on most seeds; when the baseline never did, the
ratio is a lower bound, the baseline's median training seconds over HyLo's time, and the line
before says so.)

Usage::

    python benchmarks/hylo_autoencoder.py --quick   # width 250, 3 seeds: a few minutes on 1 CPU
    python benchmarks/hylo_autoencoder.py            # width 1000 (the classic), 5 seeds
    python benchmarks/hylo_autoencoder.py --smoke   # width 32, 1 point, 1 seed: seconds
    python benchmarks/hylo_autoencoder.py --device cuda --out ae.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import warnings
from typing import Any

import torch

from async_spark.hylo import train as train_mod

TUNE_SEED = 100
HYLO_VARIANTS = ("hylo", "kis", "kid")
FIRST_ORDER = ("sgd", "adam")
OPTIMIZERS = (*HYLO_VARIANTS, "kfac", "smw", "sgd", "adam")

# per mode and optimizer: the grid points (each a dict of TrainConfig fields), the same number
# for every optimizer within a mode
_CURV = {"lr": 0.1}
GRIDS: dict[str, dict[str, list[dict[str, Any]]]] = {
    # centred, for every optimizer, on where it did best in an exploration on the tuning seed
    "quick": {
        **{
            v: [
                {**_CURV, "kl_clip": k, "damping": lam, "fisher_window": 10}
                for k, lam in ((0.01, 3.0), (0.03, 3.0), (0.01, 1.0))
            ]
            for v in HYLO_VARIANTS
        },
        "kfac": [
            {**_CURV, "kl_clip": k, "damping": lam}
            for k, lam in ((0.03, 0.3), (0.01, 3.0), (0.03, 1.0))
        ],
        "smw": [{"lr": lr, "damping": lam} for lr, lam in ((0.3, 3.0), (0.1, 1.0), (1.0, 10.0))],
        "sgd": [{"lr": lr} for lr in (2e-3, 3e-3, 5e-3)],
        "adam": [{"lr": lr} for lr in (2e-3, 3e-3, 5e-3)],
    },
    "full": {
        **{
            v: [
                {**_CURV, "kl_clip": k, "damping": lam, "fisher_window": w}
                for k in (0.003, 0.01, 0.03)
                for lam, w in ((1.0, 10), (3.0, 10), (3.0, 1))
            ]
            for v in HYLO_VARIANTS
        },
        "kfac": [
            {**_CURV, "kl_clip": k, "damping": lam, "factor_decay": fd}
            for k in (0.01, 0.03, 0.1)
            for lam, fd in ((0.3, 0.0), (3.0, 0.0), (1.0, 0.9))
        ],
        "smw": [{"lr": lr, "damping": lam} for lr in (0.1, 0.3, 1.0) for lam in (1.0, 3.0, 10.0)],
        "sgd": [{"lr": lr} for lr in (3e-4, 1e-3, 2e-3, 3e-3, 5e-3, 1e-2, 2e-2, 3e-2, 1e-1)],
        "adam": [{"lr": lr} for lr in (3e-4, 1e-3, 2e-3, 3e-3, 5e-3, 1e-2, 2e-2, 3e-2, 1e-1)],
    },
    # one point each: checks that the script runs (not a figure)
    "smoke": {
        **{
            v: [{**_CURV, "kl_clip": 0.01, "damping": 1.0, "fisher_window": 2}]
            for v in HYLO_VARIANTS
        },
        "kfac": [{**_CURV, "kl_clip": 0.01, "damping": 1.0}],
        "smw": [{"lr": 0.01, "damping": 10.0}],
        "sgd": [{"lr": 3e-3}],
        "adam": [{"lr": 3e-3}],
    },
}
# mode -> width, epochs budget, target loss, seeds, evaluations per epoch, n_train
MODES: dict[str, dict[str, Any]] = {
    "full": {"width": 1000, "epochs": 30, "target": 300.0, "seeds": 5, "evals": 2},
    "quick": {"width": 250, "epochs": 16, "target": 330.0, "seeds": 3, "evals": 2},
    "smoke": {"width": 32, "epochs": 3, "target": 480.0, "seeds": 1, "evals": 1},
}


def run(opt: str, point: dict[str, Any], seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One training run; the summary with ``time`` (to the target, ``inf`` if never),
    ``epochs_to_target`` and ``epoch_seconds`` added."""
    cfg: dict[str, Any] = {
        "model": "autoencoder",
        "data": "builtin:digits",
        "activation": args.activation,
        "width": args.width,
        "optimizer": opt,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "weight_decay": 0.0,
        "inv_update_steps": args.inv_update_steps,
        "evals_per_epoch": args.evals_per_epoch,
        "target_loss": args.target,
        "stop_at_target": True,
        "threads": args.threads,
        "device": args.device,
        "seed": seed,
        "kl_clip": None,  # HyLo's and K-FAC's points set it
        **point,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = train_mod.train(cfg)
    t = s["time_to_target_loss"]
    s["time"] = math.inf if t is None else float(t)
    epochs_run = max(1, int(s["epochs_run"]))
    s["epoch_seconds"] = s["wall_seconds"] / epochs_run
    s["epochs_to_target"] = epochs_run if t is not None else None
    return s


def _rank(entry: dict[str, Any]) -> tuple[float, float]:
    """A tuning run's rank: its time to the target, then its final loss."""
    final = entry["final"]
    return (entry["time"], final if final is not None and math.isfinite(final) else math.inf)


def _fmt(v: float | None, spec: str = ".2f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return "never" if math.isinf(v) else format(v, spec)


def _point(p: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="width 250, 3 seeds (minutes on CPU)")
    mode.add_argument("--smoke", action="store_true", help="width 32, one point, 1 seed (seconds)")
    ap.add_argument("--seeds", type=int, default=None, help="evaluation seeds (default per mode)")
    ap.add_argument("--width", type=int, default=None, help="first hidden layer (default per mode)")
    ap.add_argument("--epochs", type=int, default=None, help="epoch budget per run")
    ap.add_argument("--target", type=float, default=None, help="target training loss per image")
    ap.add_argument("--evals-per-epoch", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--inv-update-steps", type=int, default=10)
    ap.add_argument("--activation", choices=("relu", "sigmoid"), default="relu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument(
        "--optimizers", default=",".join(OPTIMIZERS), help="comma-separated subset to run"
    )
    ap.add_argument("--out", default=None, help="write every run's figures here as JSON")
    args = ap.parse_args()
    name = "smoke" if args.smoke else "quick" if args.quick else "full"
    m = MODES[name]
    args.width = args.width or m["width"]
    args.epochs = args.epochs or m["epochs"]
    args.target = args.target or m["target"]
    args.seeds = args.seeds or m["seeds"]
    args.evals_per_epoch = args.evals_per_epoch or m["evals"]
    opts = [o for o in args.optimizers.split(",") if o]
    unknown = set(opts) - set(OPTIMIZERS)
    if unknown:
        ap.error(f"--optimizers: unknown {sorted(unknown)}; known: {OPTIMIZERS}")
    torch.set_num_threads(args.threads)
    grids = GRIDS[name]
    t0 = time.perf_counter()
    print(
        f"# autoencoder 784-{args.width}-... ({args.activation}), builtin:digits, batch "
        f"{args.batch_size}, target {args.target} (per-image sigmoid cross-entropy; the data's "
        f"entropy floor is 253.6, the mean image gives 354), <= {args.epochs} epochs, "
        f"{args.evals_per_epoch} evaluations per epoch, {args.threads} thread(s), "
        f"{args.device}, {len(grids[opts[0]])} grid points each, tuning seed {TUNE_SEED}, "
        f"{args.seeds} evaluation seeds"
    )
    print("# tuning: every grid point on the tuning seed (times in training seconds)")
    tuning: dict[str, list[dict[str, Any]]] = {opt: [] for opt in opts}
    for i in range(max(len(grids[opt]) for opt in opts)):  # point by point, optimizers in turn
        for opt in opts:
            if i >= len(grids[opt]):
                continue
            point = grids[opt][i]
            s = run(opt, point, TUNE_SEED, args)
            tuning[opt].append({"point": point, "time": s["time"], "final": s["final_train_loss"]})
            print(
                f"  {opt:<5} {_point(point):<48} time to target {_fmt(s['time']):>6}  final "
                f"{_fmt(s['final_train_loss'], '.1f'):>7}  {s['epoch_seconds']:.3f} s/epoch"
                + ("  diverged" if s["diverged"] else ""),
                flush=True,
            )
    chosen = {opt: min(tuning[opt], key=_rank)["point"] for opt in opts}
    results: dict[str, dict[str, Any]] = {}
    print(f"# evaluation: the chosen point on seeds 0..{args.seeds - 1}")
    print(
        f"  {'optimizer':<9} {'chosen':<48} {'time to target (s)':>24} {'reached':>7} "
        f"{'epochs':>6} {'s/epoch':>8}"
    )
    # seed by seed, every optimizer in turn: a change of load on the machine (other processes)
    # then falls on all of them alike, and same-seed ratios compare runs made back to back
    by_opt: dict[str, list[dict[str, Any]]] = {opt: [] for opt in opts}
    for seed in range(args.seeds):
        for opt in opts:
            by_opt[opt].append(run(opt, chosen[opt], seed, args))
    for opt in opts:
        runs = by_opt[opt]
        times = [r["time"] for r in runs]
        reached = [r for r in runs if math.isfinite(r["time"])]
        med = statistics.median(times)
        epochs = [r["epochs_to_target"] for r in reached]
        results[opt] = {
            "chosen": chosen[opt],
            "times": times,
            "median": med,
            "min": min(times),
            "max": max(times),
            "reached": len(reached),
            "epochs_to_target": statistics.median(epochs) if epochs else None,
            "epoch_seconds": statistics.median(r["epoch_seconds"] for r in runs),
            "final_losses": [r["final_train_loss"] for r in runs],
            # a median time that is "never" is at least the median training time spent
            "bound": statistics.median(
                r["time"] if math.isfinite(r["time"]) else r["wall_seconds"] for r in runs
            ),
        }
        r = results[opt]
        span = f"{_fmt(med)} [{_fmt(r['min'])}, {_fmt(r['max'])}]"
        print(
            f"  {opt:<9} {_point(chosen[opt]):<48} {span:>24} {r['reached']:>4}/{args.seeds} "
            f"{_fmt(r['epochs_to_target'], '.0f'):>6} {r['epoch_seconds']:>8.3f}",
            flush=True,
        )
    hylo_pool = [o for o in HYLO_VARIANTS if o in results]
    first = [o for o in FIRST_ORDER if o in results]
    hylo = min(hylo_pool, key=lambda o: min(map(_rank, tuning[o]))) if hylo_pool else None

    def ratio(other: str | None, mine: float | None) -> tuple[float, str]:
        """other's median time / mine; a lower bound (from the time other spent) when other
        never reached the target on most seeds."""
        if other is None or mine is None or not math.isfinite(mine):
            return math.nan, ""
        r = results[other]
        if math.isinf(r["median"]):
            return r["bound"] / mine, f"  (a lower bound: {other} did not reach the target)"
        return r["median"] / mine, ""

    mine = results[hylo]["median"] if hylo else None
    best_first = min(first, key=lambda o: results[o]["median"]) if first else None
    r_kfac, note_kfac = ratio("kfac" if "kfac" in results else None, mine)
    r_first, note_first = ratio(best_first, mine)
    print(
        f"# HyLo variant (fastest on the tuning seed): {hylo}; best first-order: "
        f"{best_first}; {time.perf_counter() - t0:.0f} s in all{note_kfac}{note_first}"
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "args": vars(args),
                    "tuning": tuning,
                    "results": results,
                    "hylo_variant": hylo,
                    "hylo_vs_kfac": r_kfac,
                    "hylo_vs_best_first_order": r_first,
                },
                f,
                indent=1,
                default=str,
            )
    print(f"RESULT hylo_vs_kfac_time_to_target {r_kfac:.2f}")
    print(f"RESULT hylo_vs_best_first_order_time_to_target {r_first:.2f}")


if __name__ == "__main__":
    main()

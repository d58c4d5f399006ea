"""ASYNC's experiment at cluster scale, emulated: P = 8, 32, 128, 1024 workers in virtual time.

Each emulated worker has its own core and one block (as in ASYNC); tasks run in this process on
the real data with the real update rules, and their durations come from a cost model calibrated
on this machine's Spark engine (per-task overhead, per-nonzero compute), plus a 10 Gbit/s network
(0.5 ms latency) and a serial driver whose cost per result and per update is measured here,
plus the transport's own driver CPU per task from the calibration (``message_seconds``;
:mod:`async_spark.engine.emulator`). For each P and straggler model the synchronous method and
its asynchronous counterpart run for the same virtual budget; as in ``async_speedup.py``:

    target  = the larger (worse) of the two final objectives, so both reach it
    speedup = time of the synchronous run to target / time of the asynchronous run to target

The budget is ``--rounds`` x 8 mean task times (about that many synchronous rounds under the
cloud model). Each method gets the best step of a grid (16, 4, 1, 1/4, 1/16 x the ``--step auto``
value), chosen by its final objective after a fifth of the budget under the first straggler
model, as ASYNC tuned its steps. Staleness distribution of the asynchronous run at each scale: mean, p50, p90, p99, max.
Straggler delays are multiples of the cost model's uncontended task time (ASYNC's mean task time).

Usage:
    python benchmarks/scale.py [--quick] [--workers 8,32,128,1024] [--stragglers cloud,intensity:1.0]
        [--pairs saga,sgd] [--data SPEC] [--cost-model FILE] [--rounds R] [--json FILE]
Without ``--cost-model`` the cost model is calibrated first on ``local[2]`` (one Spark session,
stopped before the emulation starts) on ``--transport`` (resident, the default, or jobs: the
predictions of the two differ by the per-task overhead and the driver's CPU per task: one
message each way against one Spark job). Last line: ``RESULT asaga_speedup_emulated_32 <x>``.
``--smoke`` (seconds, no Spark): P = 32 only, tiny data, one step each, 4 rounds, and a fixed cost
model (:data:`SMOKE_COST`, round figures, not measured) unless ``--cost-model`` is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from async_speedup import speedup_of, time_to  # noqa: E402

from async_spark.data.blocks import clear_cache, get_block  # noqa: E402
from async_spark.data.dataset import open_dataset  # noqa: E402
from async_spark.engine import Policy  # noqa: E402
from async_spark.engine.emulator import CostModel, VirtualEngine, payload_nbytes  # noqa: E402
from async_spark.models.linear import init_params  # noqa: E402
from async_spark.optim.saga import SAGAMessage, saga  # noqa: E402
from async_spark.optim.sgd import SGDMessage, sgd  # noqa: E402
from async_spark.optim.steps import auto_step, make_step_rule  # noqa: E402
from async_spark.solvers import TrainConfig, build_model, train_linear  # noqa: E402
from async_spark.solvers.emulation import calibrate, virtual_engine_factory  # noqa: E402
from async_spark.solvers.worker import sample_rows  # noqa: E402

PAIRS = {"saga": "asaga", "sgd": "asgd"}
RCV1_SHAPE = "builtin:synthetic?n=700000&d=47000&nnz=75&seed=0"
QUICK_DATA = "builtin:synthetic?n=100000&d=10000&nnz=50&seed=0"
CALIBRATION_DATA = "builtin:synthetic?n=40000&d=47000&nnz=75&seed=1"
STEP_GRID = (16.0, 4.0, 1.0, 0.25, 1 / 16)  # multiples of the auto step (1/(3L) SAGA, 1/(2L) SGD)
NETWORK = {"bandwidth_bytes_per_second": 1.25e9, "latency_seconds": 5e-4}
SMOKE_DATA = "builtin:synthetic?n=3200&d=200&nnz=5&seed=0"
SMOKE_COST = CostModel(
    task_overhead_seconds=0.05,
    seconds_per_nnz=1e-8,
    compute_fixed_seconds=1e-4,
    source="benchmarks/scale.py --smoke: round figures, not measured",
)


def calibrated_cost(path: str | None, save: str | None, transport: str = "resident") -> CostModel:
    if path:
        return CostModel.load(path)
    from async_spark.engine import build_session

    source, desc = open_dataset(CALIBRATION_DATA, 2, loss="logistic")
    spark = build_session(
        "local[2]", app_name="scale-calibrate", conf={"spark.ui.enabled": "false"}
    )
    try:
        cost = calibrate(spark, source, desc, tasks_per_fraction=10, transport=transport)
    finally:
        spark.stop()
    if save:
        cost.save(save)
    return cost


def _min_mean_seconds(fn: Any, calls: int, reps: int = 5) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def driver_costs(source: Any, desc: Any, cfg: TrainConfig) -> dict[str, float]:
    """Serial driver seconds per result (engine bookkeeping, task arguments, dispatch) and per
    update (the rule) on this machine, least-loaded of 5 repetitions (the machine is shared)."""
    model = build_model(cfg, desc)
    P, n = desc.num_blocks, desc.n
    theta = init_params(model)
    block = get_block(source, 0)
    idx = sample_rows(0, 0, 1, block.rows, cfg.batch_fraction)
    out: dict[str, float] = {}
    g = np.random.default_rng(0).standard_normal(theta.size) * 1e-3
    rules: dict[str, tuple[Any, Any]] = {
        "sgd": (
            sgd(
                model,
                n=n,
                num_blocks=P,
                batch_fraction=cfg.batch_fraction,
                step=make_step_rule("sqrt", 0.1, num_blocks=P),
            ),
            SGDMessage(g, 3),
        ),
        "saga": (
            saga(
                model, block_rows=desc.rows_per_block, batch_fraction=cfg.batch_fraction, step=0.1
            ),
            SAGAMessage((0,), (idx,), g, (np.zeros(idx.size),), 3),
        ),
    }
    for name, (rule, msg) in rules.items():
        state = rule.init(theta)

        def apply(rule: Any = rule, msg: Any = msg, state: Any = state) -> None:
            rule.update(msg, state, theta)

        out[f"update_{name}"] = _min_mean_seconds(apply, 200)
    # Per result: the engine's own driver work with a trivial task, measured by the emulator.
    best = float("inf")
    for _ in range(3):
        eng = VirtualEngine(
            lambda b, m, a: None,
            num_blocks=P,
            policy=Policy.asynchronous(),
            initial_model=theta,
            task_seconds=lambda t: 1.0,
            cost=CostModel(driver_seconds=None),
            keep_trajectory=True,
        )
        with eng:
            for k, _r in enumerate(eng.results()):
                eng.publish(theta)
                if k >= max(2000, 4 * P):
                    break
            stats = eng.virtual_transport.stats()
        best = min(best, stats["driver_seconds_per_result"])
    out["result"] = best
    return out


def run_one(
    dataset: Any,
    base: TrainConfig,
    method: str,
    step: float,
    stragglers: str,
    task_s: float,
    seconds: float,
    evals: int,
    cost: CostModel,
) -> Any:
    """One emulated run; None when it diverged with this step."""
    cfg = dataclasses.replace(
        base,
        **{
            "method": method,
            "step": step,
            "stragglers": stragglers,
            "straggler_base": task_s,
            "time_budget": seconds,
            "eval_every": seconds / evals,
        },
    )
    try:
        return train_linear(cfg, dataset=dataset, engine_factory=virtual_engine_factory(cost))
    except FloatingPointError:
        return None


def staleness_quantiles(pairs: Any) -> dict[str, float]:
    """Quantiles of a summary's staleness histogram ([staleness, count] pairs, or an object)."""
    hist = dict(pairs.items() if isinstance(pairs, dict) else ((k, v) for k, v in pairs))
    if not hist:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    keys = np.array([int(k) for k in hist])
    counts = np.array([hist[k] for k in hist], dtype=float)
    order = np.argsort(keys)
    keys, counts = keys[order], counts[order]
    cdf = np.cumsum(counts) / counts.sum()

    def q(p: float) -> float:
        return float(keys[np.searchsorted(cdf, p)])

    return {
        "mean": float((keys * counts).sum() / counts.sum()),
        "p50": q(0.5),
        "p90": q(0.9),
        "p99": q(0.99),
        "max": float(keys[-1]),
    }


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--smoke", action="store_true", help="tiny sizes, seconds, no Spark: checks the script runs"
    )
    ap.add_argument(
        "--workers", default=None, help="comma list (default 8,32,128,1024; quick 8,32)"
    )
    ap.add_argument(
        "--stragglers", default=None, help="comma list (default cloud,intensity:1.0; quick cloud)"
    )
    ap.add_argument(
        "--pairs", default=None, help="synchronous methods (default saga,sgd; quick saga)"
    )
    ap.add_argument("--data", default=None, help=f"default {RCV1_SHAPE} (quick: {QUICK_DATA})")
    ap.add_argument("--batch-fraction", type=float, default=0.1)
    ap.add_argument("--l2", type=float, default=1e-4)
    ap.add_argument(
        "--rounds", type=float, default=None, help="budget in ~sync rounds (default 30; quick 20)"
    )
    ap.add_argument("--cost-model", default=None, help="JSON cost model (default: calibrate now)")
    ap.add_argument(
        "--transport",
        default="resident",
        choices=("resident", "jobs"),
        help="the transport whose per-task overhead is calibrated (default: resident, the "
        "runs' default; jobs: one Spark job per task)",
    )
    ap.add_argument("--save-cost-model", default=None, help="write the calibrated model here")
    ap.add_argument(
        "--step-grid",
        default=None,
        help="comma list of multiples of the auto step (default 16,4,1,0.25,0.0625); asynchronous "
        "runs need about 1/P at large P (staleness ~ P)",
    )
    ap.add_argument(
        "--sync-step-grid",
        default=None,
        help="grid for the synchronous methods (default: --step-grid)",
    )
    ap.add_argument("--json", default=None, help="also write every row to this JSON file")
    args = ap.parse_args(argv)
    if args.smoke:
        args.quick = True
        args.workers, args.data = args.workers or "32", args.data or SMOKE_DATA
        args.rounds = args.rounds or 4.0
        # one step per method; the asynchronous one small (staleness ~ P = 32)
        args.step_grid, args.sync_step_grid = args.step_grid or "0.0625", args.sync_step_grid or "1"
    workers = [
        int(p) for p in (args.workers or ("8,32" if args.quick else "8,32,128,1024")).split(",")
    ]
    models = (args.stragglers or ("cloud" if args.quick else "cloud,intensity:1.0")).split(",")
    pairs = (args.pairs or ("saga" if args.quick else "saga,sgd")).split(",")
    data = args.data or (QUICK_DATA if args.quick else RCV1_SHAPE)
    rounds = args.rounds or (20.0 if args.quick else 30.0)
    grid = tuple(float(g) for g in args.step_grid.split(",")) if args.step_grid else STEP_GRID
    sync_grid = (
        tuple(float(g) for g in args.sync_step_grid.split(",")) if args.sync_step_grid else grid
    )

    if args.smoke and not args.cost_model:
        base_cost = SMOKE_COST.replace(**NETWORK)
    else:
        base_cost = calibrated_cost(args.cost_model, args.save_cost_model, args.transport)
        base_cost = base_cost.replace(**NETWORK)
    print(f"# cost model: {json.dumps(base_cost.to_dict())}", flush=True)
    rows: list[dict[str, Any]] = []
    for P in workers:
        t_open = time.monotonic()
        clear_cache()
        dataset = open_dataset(data, P, loss="logistic")
        source, desc = dataset
        for p in range(P):  # decode every block now, off the emulated clock
            get_block(source, p)
        base = TrainConfig(
            data=data,
            loss="logistic",
            partitions=P,
            l2=args.l2,
            batch_fraction=args.batch_fraction,
            quiet=True,
            seed=0,
        )
        drv = driver_costs(source, desc, base)
        nnz_task = args.batch_fraction * (desc.nnz or 0) / P
        theta_bytes = payload_nbytes(init_params(build_model(base, desc)))
        task_s = base_cost.expected_task_seconds(nnz_task, theta_bytes, theta_bytes)
        budget = rounds * 8 * task_s
        print(
            f"# P={P}: n={desc.n} d={desc.d} nnz={desc.nnz} opened in "
            f"{time.monotonic() - t_open:.0f}s; task {task_s * 1e3:.1f} ms ({nnz_task:.0f} nnz), "
            f"budget {budget:.2f} virtual s; driver {drv['result'] * 1e6:.0f} us/result, "
            f"update sgd {drv['update_sgd'] * 1e6:.0f} us, saga {drv['update_saga'] * 1e6:.0f} us",
            flush=True,
        )
        for sync in pairs:
            cost = base_cost.replace(
                driver_seconds=drv["result"], update_seconds=drv[f"update_{sync}"]
            )

            def run(
                method: str, model: str, scale: float, seconds: float, tuning: bool = False
            ) -> Any:
                step = gammas[method] * scale  # noqa: B023 - called within this iteration
                evals = 1 if tuning else (30 if method in PAIRS else 50)
                return run_one(dataset, base, method, step, model, task_s, seconds, evals, cost)  # noqa: B023

            gammas = {
                m: auto_step(m, build_model(base, desc), float(desc.max_row_norm_sq or 0.0))
                for m in (sync, PAIRS[sync])
            }
            # Each method gets its best step of the grid (final objective after a fifth of the
            # budget under the first straggler model); then the full runs.
            chosen: dict[str, float] = {}
            for method in (sync, PAIRS[sync]):
                finals = {}
                for scale in sync_grid if method == sync else grid:
                    r = run(method, models[0], scale, budget / 5, tuning=True)
                    finals[scale] = math.inf if r is None else r.final_objective
                chosen[method] = min(finals, key=lambda k: finals[k])
                print(
                    f"#   {method}: step x{chosen[method]:g} of auto {gammas[method]:.3g} "
                    f"(finals at a fifth of the budget: "
                    + ", ".join(f"x{k:g} {v:.5f}" for k, v in finals.items())
                    + ")",
                    flush=True,
                )
            for model in models:
                wall = time.monotonic()
                runs = {m: run(m, model, chosen[m], budget) for m in (sync, PAIRS[sync])}
                s, a = runs[sync], runs[PAIRS[sync]]
                if s is None or a is None:
                    print(f"P={P:5d} {PAIRS[sync]}/{sync} {model}: diverged", flush=True)
                    continue
                target = max(s.final_objective, a.final_objective)
                sa = a.summary()
                stale = staleness_quantiles(sa["staleness_histogram"])
                row = {
                    "P": P,
                    "pair": f"{PAIRS[sync]}/{sync}",
                    "stragglers": model,
                    "task_seconds": task_s,
                    "budget": budget,
                    "steps": {m: gammas[m] * chosen[m] for m in chosen},
                    "target": target,
                    "sync_time_to_target": time_to(s.snapshots, target),
                    "async_time_to_target": time_to(a.snapshots, target),
                    "speedup": speedup_of(s, a),
                    "sync_updates": s.updates,
                    "async_updates": a.updates,
                    "sync_final": s.final_objective,
                    "async_final": a.final_objective,
                    "staleness": stale,
                    "driver_busy": (
                        a.engine_snapshot["emulator"]["driver_seconds_total"] / a.wall_seconds
                    ),
                    "real_seconds": time.monotonic() - wall,
                }
                rows.append(row)
                if args.json:  # after every row: a long run interrupted keeps what it measured
                    Path(args.json).write_text(json.dumps(rows, indent=2))

                def fmt(x: float | None, spec: str = ".2f") -> str:
                    return "-" if x is None else format(x, spec)

                print(
                    f"P={P:5d} {row['pair']:10s} {model:14s} speedup={fmt(row['speedup']):>6s} "
                    f"to {target:.5f} ({fmt(row['sync_time_to_target'])}s vs "
                    f"{fmt(row['async_time_to_target'])}s) updates {s.updates}/{a.updates} "
                    f"final {s.final_objective:.5f}/{a.final_objective:.5f} staleness "
                    f"mean {stale['mean']:.1f} p50 {stale['p50']:.0f} p90 {stale['p90']:.0f} "
                    f"p99 {stale['p99']:.0f} max {stale['max']:.0f} driver busy "
                    f"{row['driver_busy']:.0%} [{row['real_seconds']:.0f}s real]",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    print("\n# speedup of the asynchronous method to the common target, by P")
    print(f"#  {'pair':10s} {'stragglers':14s} " + " ".join(f"{P:>7d}" for P in workers))
    for sync in pairs:
        for model in models:
            cells = []
            for P in workers:
                r = next(
                    (
                        r
                        for r in rows
                        if r["P"] == P and r["stragglers"] == model and r["pair"].endswith(sync)
                    ),
                    None,
                )
                sp = None if r is None else r["speedup"]
                cells.append(f"{sp:7.2f}" if sp else "      -")
            print(f"#  {PAIRS[sync] + '/' + sync:10s} {model:14s} " + " ".join(cells))
    head = [
        r for r in rows if r["P"] == 32 and r["stragglers"] == "cloud" and r["pair"] == "asaga/saga"
    ]
    value = head[0]["speedup"] if head and head[0]["speedup"] else float("nan")
    print(f"RESULT asaga_speedup_emulated_32 {value:.3f}")
    return value


if __name__ == "__main__":
    t0 = time.monotonic()
    main(sys.argv[1:])
    print(f"# {time.monotonic() - t0:.0f} s", file=sys.stderr)

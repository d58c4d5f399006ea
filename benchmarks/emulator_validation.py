"""Validation of the emulator against reality: local[P] Spark runs vs their emulation, P = 4 and 8.

For each P: one Spark session ``local[P]`` (P task slots on this machine's cores); the cost model is
calibrated on it (:func:`async_spark.engine.emulator.calibrate`: one task at a time, so no queueing)
and given the machine's contention (``cores``: the CPU phases of the tasks in flight share C cores)
and the measured driver time. Then ``sgd``, ``asgd``, ``saga``, ``asaga`` run under the cloud
straggler model for the same budget, for real on Spark and emulated; the straggler delays are the
same in both (same seed, same base: the calibrated uncontended task time).

Per method, the time to reach the pair's common target (the worst of the best objectives of the
pair's four runs, so that every run reaches it: a run whose objective rises again before its
budget ends, as a default SAGA run's search can leave it in a short smoke run, still reached its
best) is compared: predicted (emulated) vs measured (Spark).
The machine is shared: the load average is printed with the table, as it moves the measurements.

Usage:
    python benchmarks/emulator_validation.py [--quick] [--workers 4,8] [--budget SECONDS]
        [--methods sgd,asgd,saga,asaga] [--cores 2] [--json FILE]
    python benchmarks/emulator_validation.py --smoke   # seconds: P = 2, ASAGA/SAGA, tiny data
Last line: ``RESULT emulator_validation_max_error <fraction>`` (largest |predicted/measured - 1|).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from async_speedup import time_to  # noqa: E402

from async_spark.data.dataset import open_dataset  # noqa: E402
from async_spark.engine import build_session  # noqa: E402
from async_spark.engine.emulator import payload_nbytes  # noqa: E402
from async_spark.models.linear import init_params  # noqa: E402
from async_spark.solvers import TrainConfig, build_model, train_linear  # noqa: E402
from async_spark.solvers.emulation import calibrate, virtual_engine_factory  # noqa: E402

PAIRS = (("sgd", "asgd"), ("saga", "asaga"))
DEFAULT_METHODS = "sgd,asgd,saga,asaga"
DEFAULT_DATA = "builtin:synthetic?n=100000&d=10000&nnz=50&seed=0"
SMOKE_DATA = "builtin:synthetic?n=4000&d=200&nnz=10&seed=0"


def round_or_rate(run: Any) -> str:
    """Synchronous: mean seconds per round; asynchronous: updates per second."""
    if run.config.synchronous:
        return f"{run.wall_seconds / max(run.updates, 1):.3f} s/round"
    return f"{run.updates / max(run.wall_seconds, 1e-9):.1f} upd/s"


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--smoke", action="store_true", help="tiny sizes, seconds: checks the script runs"
    )
    ap.add_argument("--workers", default=None, help="comma list (default 4,8; quick 4)")
    ap.add_argument("--methods", default=DEFAULT_METHODS)
    ap.add_argument(
        "--budget", type=float, default=None, help="seconds per run (default 15; quick 6)"
    )
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--batch-fraction", type=float, default=0.5)
    ap.add_argument("--stragglers", default="cloud")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    tasks_per_fraction = 6
    if args.smoke:
        args.workers, args.budget = args.workers or "2", args.budget or 2.0
        if args.methods == DEFAULT_METHODS:
            args.methods = "saga,asaga"
        if args.data == DEFAULT_DATA:
            args.data = SMOKE_DATA
        tasks_per_fraction = 2
    workers = [int(p) for p in (args.workers or ("4" if args.quick else "4,8")).split(",")]
    methods = args.methods.split(",")
    budget = args.budget or (6.0 if args.quick else 15.0)

    rows: list[dict[str, Any]] = []
    for P in workers:
        dataset = open_dataset(args.data, P, loss="logistic")
        source, desc = dataset
        base = TrainConfig(
            data=args.data,
            loss="logistic",
            partitions=P,
            batch_fraction=args.batch_fraction,
            stragglers=args.stragglers,
            time_budget=budget,
            eval_every=budget / (8 if args.smoke else 40),
            quiet=True,
            seed=0,
        )
        spark = build_session(
            f"local[{P}]", app_name=f"emulator-validation-{P}", conf={"spark.ui.enabled": "false"}
        )
        real: dict[str, Any] = {}
        try:
            # Every block into the workers' caches first (a block's first task loads it).
            warm = dataclasses.replace(base, **{"method": "asgd", "stragglers": "none"})
            warm.time_budget, warm.max_updates = None, 4 * P
            train_linear(warm.validate(), spark=spark, dataset=dataset)
            cost = calibrate(  # on the transport the real runs use
                spark, source, desc, tasks_per_fraction=tasks_per_fraction, transport=base.transport
            )
            model_bytes = payload_nbytes(init_params(build_model(base, desc)))
            nnz_task = args.batch_fraction * (desc.nnz or 0) / P
            task_s = cost.expected_task_seconds(nnz_task, model_bytes, model_bytes)
            for method in methods:
                cfg = dataclasses.replace(base, **{"method": method, "straggler_base": task_s})
                real[method] = train_linear(cfg, spark=spark, dataset=dataset)
        finally:
            spark.stop()
        load = os.getloadavg()[0]
        emu_cost = cost.replace(cores=args.cores, driver_seconds=None)
        print(
            f"# P={P}: calibrated overhead {cost.task_overhead_seconds * 1e3:.1f} ms, "
            f"{cost.seconds_per_nnz or 0:.3g} s/nnz + {cost.compute_fixed_seconds * 1e3:.2f} ms; "
            f"task {task_s * 1e3:.1f} ms; emulated with cores={args.cores}, measured driver; "
            f"load average {load:.1f}",
            flush=True,
        )
        emu: dict[str, Any] = {}
        for method in methods:
            cfg = dataclasses.replace(base, **{"method": method, "straggler_base": task_s})
            emu[method] = train_linear(
                cfg, dataset=dataset, engine_factory=virtual_engine_factory(emu_cost)
            )
        for pair in PAIRS:
            if not all(m in methods for m in pair):
                continue
            target = max(min(snap[2] for snap in r[m].snapshots) for r in (real, emu) for m in pair)
            for m in pair:
                measured = time_to(real[m].snapshots, target)
                predicted = time_to(emu[m].snapshots, target)
                err = None if not measured or not predicted else predicted / measured - 1
                rows.append(
                    {
                        "P": P,
                        "method": m,
                        "target": target,
                        "measured": measured,
                        "predicted": predicted,
                        "error": err,
                        "real_pace": round_or_rate(real[m]),
                        "emulated_pace": round_or_rate(emu[m]),
                        "real_updates": real[m].updates,
                        "emulated_updates": emu[m].updates,
                        "real_staleness": real[m].summary()["mean_staleness"],
                        "emulated_staleness": emu[m].summary()["mean_staleness"],
                        "load_average": load,
                    }
                )
            a, s = pair[1], pair[0]
            sp_real = time_to(real[s].snapshots, target), time_to(real[a].snapshots, target)
            sp_emu = time_to(emu[s].snapshots, target), time_to(emu[a].snapshots, target)
            rows[-1]["speedup_measured"] = sp_real[0] / sp_real[1] if all(sp_real) else None
            rows[-1]["speedup_predicted"] = sp_emu[0] / sp_emu[1] if all(sp_emu) else None

    def fmt(x: float | None, spec: str = ".2f") -> str:
        return "-" if x is None else format(x, spec)

    print(
        f"\n{'P':>3s} {'method':6s} {'target':>8s} {'measured':>9s} {'predicted':>9s} {'error':>7s}  "
        f"{'pace real / emulated':30s} {'staleness r/e':>13s}"
    )
    for r in rows:
        print(
            f"{r['P']:3d} {r['method']:6s} {r['target']:8.5f} {fmt(r['measured']):>9s} "
            f"{fmt(r['predicted']):>9s} {fmt(r['error'], '+.0%'):>7s}  "
            f"{r['real_pace'] + ' / ' + r['emulated_pace']:30s} "
            f"{r['real_staleness']:6.1f}/{r['emulated_staleness']:<6.1f}"
        )
        if "speedup_measured" in r:
            print(
                f"    speedup {r['method']}: measured {fmt(r['speedup_measured'])}, "
                f"predicted {fmt(r['speedup_predicted'])}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    errors = [abs(r["error"]) for r in rows if r["error"] is not None]
    worst = max(errors) if errors else float("nan")
    print(f"RESULT emulator_validation_max_error {worst:.3f}")
    return worst


if __name__ == "__main__":
    t0 = time.monotonic()
    main(sys.argv[1:])
    print(f"# {time.monotonic() - t0:.0f} s", file=sys.stderr)

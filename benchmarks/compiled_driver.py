"""What compiling the driver's hot path would buy: the resident transport's driver CPU per result,
pure Python beside a mypyc build of the same modules, in one run.

The driver's cost per result at d = 100 is the Python it runs (``engine_overhead.py
--profile-driver``: most of its CPU in the interpreter, spread over decoding, accounting, encoding
and sending). This copies the package to a temporary directory, compiles the modules on that path
with mypyc (``--modules``; nothing is compiled in the checkout, which stays pure Python), and
measures the no-op run of ``engine_overhead.py`` (4 blocks, a new dense version after every
result) in alternating child processes, one per build: results/s and the driver process's CPU
time per result. The compiled build runs the very same source; it is an experiment, not how the
package ships.

Last line: ``RESULT compiled_vs_pure_driver_cpu_d100 <x>`` (the compiled build's median driver
CPU per result over the pure build's; < 1: compiling saves), after ``RESULT
driver_cpu_us_pure_d100`` and ``RESULT driver_cpu_us_compiled_d100``.

Usage: python benchmarks/compiled_driver.py [--repeats 3] [--seconds 3] [--master local[2]]
       [--modules engine/wire.py,engine/core.py,...] [--smoke]
Needs mypyc (it comes with mypy, in the ``dev`` extra) and a C compiler.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HOT_MODULES = (
    "engine/wire.py",
    "engine/core.py",
    "engine/resident.py",
    "engine/resident_poll.py",
    "engine/resident_tickets.py",
    "engine/resident_versions.py",
    "engine/history.py",
    "engine/engine.py",
    "engine/policies.py",
    "engine/tables.py",
)


def measure(master: str, seconds: float, runs: int, modules: list[str]) -> None:
    """(child) The no-op resident run ``runs`` times after a warm-up; prints one line, which
    says whether every module of ``modules`` was imported compiled."""
    import importlib

    sys.path.insert(0, HERE)
    import engine_overhead

    from async_spark.engine import build_session

    spark = build_session(master, app_name="compiled-driver", conf={"spark.ui.enabled": "false"})
    try:
        _, timed = engine_overhead.resident_runs(spark, 4, seconds, runs)
    finally:
        spark.stop()
    names = ["async_spark." + m.removesuffix(".py").replace("/", ".") for m in modules]
    compiled = all(not importlib.import_module(n).__file__.endswith(".py") for n in names)
    print(
        f"MEASURED compiled={int(compiled)} "
        f"rate={statistics.median(r for r, _ in timed):.1f} "
        f"us={statistics.median(u for _, u in timed):.2f} "
        f"runs={','.join(f'{u:.1f}' for _, u in timed)}",
        flush=True,
    )


def build(modules: list[str], into: str) -> float:
    """Copy the package into ``into`` and compile ``modules`` there; returns the seconds taken."""
    t0 = time.monotonic()
    src = os.path.join(ROOT, "async_spark")
    shutil.copytree(
        src, os.path.join(into, "async_spark"), ignore=shutil.ignore_patterns("__pycache__", "*.so")
    )
    files = [os.path.join("async_spark", m) for m in modules]
    done = subprocess.run(
        [sys.executable, "-m", "mypyc", *files], cwd=into, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"mypyc failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return time.monotonic() - t0


def child(path: str, args: argparse.Namespace, modules: list[str]) -> dict[str, float]:
    """One measurement in a child process that imports the package from ``path``."""
    # HERE too: the no-op task is engine_overhead's, which the Python workers import by name
    search = [path, HERE, os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in search if p))
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        "--master",
        args.master,
        "--seconds",
        str(args.seconds),
        "--runs",
        str(args.runs),
        "--modules",
        ",".join(modules),
    ]
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    line = next((x for x in done.stdout.splitlines() if x.startswith("MEASURED ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"measurement failed ({path}):\n{done.stderr[-4000:]}")
    fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    print(f"  {line[len('MEASURED ') :]}", flush=True)
    return {
        "compiled": float(fields["compiled"]),
        "rate": float(fields["rate"]),
        "us": float(fields["us"]),
    }


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="one short pair")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeats", type=int, default=3, help="alternating pairs of child processes")
    ap.add_argument("--runs", type=int, default=3, help="timed runs in each child (its median)")
    ap.add_argument("--seconds", type=float, default=3.0, help="of each timed run")
    ap.add_argument("--modules", default=",".join(HOT_MODULES), help="paths under async_spark/")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    modules = [m.strip() for m in args.modules.split(",") if m.strip()]
    if args.child:
        measure(args.master, args.seconds, args.runs, modules)
        return float("nan")
    if args.smoke:
        args.repeats, args.runs, args.seconds = 1, 1, 1.0
    if args.repeats < 1 or args.runs < 1:
        ap.error(f"--repeats and --runs must be at least 1, got {args.repeats} and {args.runs}")
    if not args.seconds > 0:
        ap.error(f"--seconds must be > 0, got {args.seconds}")
    try:
        import mypyc  # noqa: F401
    except ImportError:
        raise SystemExit("needs mypyc: pip install mypy (the dev extra has it)") from None
    missing = [m for m in modules if not os.path.isfile(os.path.join(ROOT, "async_spark", m))]
    if missing:
        raise SystemExit(f"--modules: no such file under async_spark/: {missing}")
    with tempfile.TemporaryDirectory(prefix="async-spark-mypyc-") as tmp:
        seconds = build(modules, tmp)
        print(
            f"compiled {len(modules)} modules with mypyc in {seconds:.0f} s: {', '.join(modules)}"
        )
        pure: list[float] = []
        compiled: list[float] = []
        for i in range(args.repeats):  # alternate: the machine's drift hits both builds alike
            print(f"pair {i + 1}/{args.repeats}: pure, then compiled")
            p, c = child(ROOT, args, modules), child(tmp, args, modules)
            if p["compiled"] or not c["compiled"]:
                raise SystemExit("the child processes did not import the builds asked for")
            pure.append(p["us"])
            compiled.append(c["us"])
    mp, mc = statistics.median(pure), statistics.median(compiled)
    print(
        f"driver CPU per result at d=100, medians of {args.repeats} pairs: pure {mp:.1f} us "
        f"[{min(pure):.1f}, {max(pure):.1f}], compiled {mc:.1f} us [{min(compiled):.1f}, "
        f"{max(compiled):.1f}] (target <= 50 us)"
    )
    print(f"RESULT driver_cpu_us_pure_d100 {mp:.1f}")
    print(f"RESULT driver_cpu_us_compiled_d100 {mc:.1f}")
    print(f"RESULT compiled_vs_pure_driver_cpu_d100 {mc / mp:.3f}")
    return mc / mp


if __name__ == "__main__":
    main()

"""Run several benchmarks' ``--smoke`` modes one after the other in this one process.

Started by ``test_smoke.py`` for the scripts that use Spark, so that they share one JVM: the first
Spark session of a process starts the JVM (about 8 s on 2 cores), a later one in the same process
reuses it (under 1 s). Each script runs as ``python benchmarks/SCRIPT --smoke`` would: its
module loaded fresh as ``__main__``, ``sys.argv`` set, in its own working directory, so that its
``if __name__ == "__main__":`` block runs it; what it prints on ``sys.stdout`` and ``sys.stderr``
is kept in its own files. A script that leaves a Spark session running has it stopped before the
next starts, and the environment variables it set are undone.

Usage: python smoke_runner.py OUT_DIR SCRIPT [SCRIPT...]; writes ``OUT_DIR/NAME.json`` per
script: ``{"rc": 0 | 1 | SystemExit code, "seconds": s}``, beside ``NAME.out`` and ``NAME.err``,
and ``OUT_DIR/running`` names the script in progress (a hang is then attributed).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _stop_spark() -> None:
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()


def run_one(script: str, out: Path) -> int:
    name = script.removesuffix(".py")
    work = out / name
    work.mkdir(parents=True, exist_ok=True)
    # Loaded as __main__, as `python SCRIPT` loads it: cloudpickle ships __main__'s functions to
    # the Python workers by value (an importable module's by reference, which they cannot find)
    spec = importlib.util.spec_from_file_location("__main__", BENCH / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    here, environ, runner = os.getcwd(), dict(os.environ), sys.modules["__main__"]
    rc = 0
    with (
        open(out / f"{name}.out", "w") as fout,
        open(out / f"{name}.err", "w") as ferr,
        contextlib.redirect_stdout(fout),
        contextlib.redirect_stderr(ferr),
    ):
        sys.argv = [str(BENCH / script), "--smoke"]
        os.chdir(work)  # whatever a script writes next to itself lands here
        sys.modules["__main__"] = module  # (dataclasses look their module up there too)
        try:
            spec.loader.exec_module(module)  # its `if __name__ == "__main__":` block runs
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 (reported as the script's failure)
            traceback.print_exc()
            rc = 1
        finally:
            os.chdir(here)
            sys.stdout.flush()
            with contextlib.suppress(Exception):
                _stop_spark()
            # e.g. a Spark Connect session sets SPARK_CONNECT_MODE_ENABLED, after which pyspark
            # builds only Connect sessions in this process
            os.environ.clear()
            os.environ.update(environ)
            sys.modules["__main__"] = runner
    return rc


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(BENCH))  # the scripts import _common and each other
    for script in argv[1:]:
        name = script.removesuffix(".py")
        (out / "running").write_text(script)
        start = time.monotonic()
        rc = run_one(script, out)
        result = {"rc": rc, "seconds": time.monotonic() - start}
        (out / f"{name}.json").write_text(json.dumps(result))
    (out / "running").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env bash
# Set up .venv on a fresh machine (if needed) and run the main job on built-in data: ASAGA beside
# SAGA (and L-BFGS for reference) on builtin:synthetic under ASYNC's cloud straggler model, in
# local mode, then the report:
# runs/main/report.md (with objective.png), runs/main/{asaga,saga,lbfgs}/ and runs/main/spark.log.
# Extra arguments go to jobs/main.py (e.g. --time-budget 40, --rows 65536; --help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-env.sh
# local[8]: one task slot per block, so a sleeping straggler holds a slot but not a core.
# Straggler delays are multiples of 0.1 s, about one Spark task's latency on a small machine.
exec "$PY" jobs/main.py --master "local[8]" --out runs/main "$@"

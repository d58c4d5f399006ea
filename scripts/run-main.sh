#!/usr/bin/env bash
# Set up .venv on a fresh machine (if needed) and run the main job on built-in data:
# ASAGA beside SAGA on builtin:synthetic under ASYNC's cloud straggler model, in local mode.
# Extra arguments go to `async-spark train` (e.g. --time-budget 60, --method asgd,sgd).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-env.sh
# local[8]: one task slot per block, so a sleeping straggler holds a slot but not a core.
# Straggler delays are multiples of 0.1 s, about one Spark task's latency on a small machine.
exec .venv/bin/async-spark train --master "local[8]" --method asaga,saga --stragglers cloud \
  --straggler-base 0.1 --time-budget 20 --out runs/main "$@"

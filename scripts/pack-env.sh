#!/usr/bin/env bash
# Pack a Python environment for executors that lack async_spark and its dependencies:
#
#   bash scripts/pack-env.sh [OUT.tar.gz]          # default: env.tar.gz
#   spark-submit --archives env.tar.gz#env --conf spark.pyspark.python=./env/bin/python ...
#   async-spark train --master spark://... --conf spark.archives=env.tar.gz#env \
#     --conf spark.pyspark.python=./env/bin/python ...
#
# It builds a fresh virtual environment from the driver's base interpreter (the executors must run
# the same Python version), installs this project (not editable: venv-pack refuses editable
# installs) and the driver's exact versions of numpy, scipy, pyarrow, pandas and tqdm, and packs
# it with venv-pack. pyspark is left out: Spark puts its own on the executors' path.
# The archive's bin/python is a link to that base interpreter, which must exist at the same path
# on every node (see docs/clusters.md for conda-pack or a container image when it does not).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-env.tar.gz}")
DRIVER_PY=${DRIVER_PY:-.venv/bin/python}
if [ ! -x "$DRIVER_PY" ]; then
  echo "error: no driver environment at $DRIVER_PY (run scripts/setup-env.sh, or set DRIVER_PY)" >&2
  exit 1
fi
BASE=${PYTHON:-$("$DRIVER_PY" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')}
PINS=$("$DRIVER_PY" -c '
import importlib.metadata as m
print(" ".join(f"{p}=={m.version(p)}" for p in ("numpy", "scipy", "pyarrow", "pandas", "tqdm")))')
BUILD=$(mktemp -d)
trap 'rm -rf "$BUILD"' EXIT
echo "building the environment with $BASE: async_spark $PINS" >&2
"$BASE" -m venv "$BUILD/env"
"$BUILD/env/bin/python" -m pip install -q --upgrade pip
"$BUILD/env/bin/python" -m pip install -q $PINS venv-pack
"$BUILD/env/bin/python" -m pip install -q --no-deps .
"$BUILD/env/bin/python" -c "import async_spark, numpy, scipy, pyarrow, pandas" # it imports
"$BUILD/env/bin/venv-pack" -p "$BUILD/env" -o "$OUT" --force -q
echo "$OUT ($(du -h "$OUT" | cut -f1)): --archives $OUT#env --conf spark.pyspark.python=./env/bin/python" >&2

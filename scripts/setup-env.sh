# Sourced by the scripts: create .venv (if missing) and install the project with its extras.
# Needs Python >= 3.10 and Java 17 (or 21) for Spark.
set -euo pipefail
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
  echo "error: Spark needs Java 17 or 21 and none was found (install e.g. openjdk-17-jre-headless or set JAVA_HOME)" >&2
  exit 1
fi
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
PY=.venv/bin/python
stamp=.venv/.installed-$(cat pyproject.toml | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
  "$PY" -m pip install -q --upgrade pip
  # torch first, pinned to the CPU build (an unpinned torch pulls a multi-GB CUDA build, and
  # asdfghjkl asks for an unpinned torch); then the project with its extras.
  "$PY" -m pip install -q "torch==2.13.0"
  "$PY" -m pip install -q -e ".[dev,hylo,data,connect]"
  rm -f .venv/.installed-*; touch "$stamp"
fi
export PY
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
export PYSPARK_PYTHON="$PWD/$PY"

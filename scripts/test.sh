#!/usr/bin/env bash
# Set up a virtual environment from the project's own files and run every check:
# ruff (lint + format), mypy on async_spark/, then the test suite.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-env.sh
echo "== ruff"; "$PY" -m ruff check async_spark tests benchmarks jobs
"$PY" -m ruff format --check async_spark tests benchmarks jobs
echo "== mypy"; "$PY" -m mypy async_spark
echo "== pytest"; "$PY" -m pytest "$@"

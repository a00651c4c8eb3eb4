#!/usr/bin/env bash
# Creates .venv with the Python test dependencies (skipped when they are already there).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! .venv/bin/python -c "import pytest, jsonschema, yaml, confluent_kafka, choix, scipy, krippendorff, pandas, sklearn" 2>/dev/null; then
  .venv/bin/pip install --quiet -r tests/python/requirements.txt
fi
if ! .venv/bin/python -c "from crowdkit.aggregation import OneCoinDawidSkene" 2>/dev/null; then
  .venv/bin/pip install --quiet --no-deps crowd-kit==1.4.2
fi

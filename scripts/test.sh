#!/usr/bin/env bash
# Runs every jurystream test on a fresh machine: installs what the tests need (a Python venv with
# jsonschema, pytest and confluent-kafka; the tansu broker), then the Rust and Python suites.
# The Kafka tests start their own broker (see tests/support/broker.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-tansu.sh
scripts/install-python.sh

cargo test --all-targets --locked
.venv/bin/python -m pytest -q tests/python

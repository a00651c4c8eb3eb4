#!/usr/bin/env bash
# Runs every jurystream test on a fresh machine: installs what the tests need (the tansu broker,
# a Python venv with jsonschema, pytest and confluent-kafka, Debian's prometheus; cargo-afl and
# AFL++ for the fuzzing smoke run), then the Rust, fuzzing and Python suites. The Kafka tests
# start their own broker (see tests/support/mod.rs), or use KAFKA_BOOTSTRAP_SERVERS when it is
# set.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-tansu.sh
scripts/install-python.sh
scripts/install-prometheus.sh

# The recovery tests inject crashes, which only a build with `fault-injection` can do.
cargo test --all-targets --locked --features fault-injection
# Every input decoder on every input of the committed fuzz corpus, then 30 s of AFL++ from it.
cargo test --locked -p jurystream-fuzz
scripts/fuzz.sh 30
.venv/bin/python -m pytest -q tests/python

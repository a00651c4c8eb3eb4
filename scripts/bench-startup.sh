#!/usr/bin/env bash
# Start-up on an empty broker: one vote is produced, `jurystream run` launched with the defaults
# (topics prefixed per run), and the time from launch to its score's record measured, RUNS times
# (benches/startup/probe.py). The first run's log lines are shown with their times since launch.
#
# usage: scripts/bench-startup.sh [RUNS]    (default 5)
# The broker is KAFKA_BOOTSTRAP_SERVERS if set, else a tansu started here (scripts/broker.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-python.sh
cargo build --release --locked --bin jurystream
# shellcheck source=broker.sh
source scripts/broker.sh
.venv/bin/python benches/startup/probe.py "$bootstrap" target/release/jurystream "${1:-5}"

#!/usr/bin/env bash
# Start-up on an empty broker: one vote is produced, `jurystream run` launched with the defaults
# (topics prefixed per run), and the time from launch to its score's record measured, RUNS times
# (benches/startup/probe.py). The first run's log lines are shown with their times since launch.
#
# usage: scripts/bench-startup.sh [RUNS]    (default 5)
# The broker is KAFKA_BOOTSTRAP_SERVERS if set, else a tansu started here: the release build under
# TANSU_RELEASE_ROOT if that is set (see scripts/bench-load.sh), else the tests' debug build.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-python.sh
cargo build --release --locked --bin jurystream
bootstrap="${KAFKA_BOOTSTRAP_SERVERS:-}"
if [ -z "$bootstrap" ]; then
  if [ -n "${TANSU_RELEASE_ROOT:-}" ]; then
    scripts/install-tansu.sh --release "$TANSU_RELEASE_ROOT"
    bin="$TANSU_RELEASE_ROOT/bin/tansu"
  else
    scripts/install-tansu.sh
    bin="${CARGO_HOME:-$HOME/.cargo}/bin/tansu"
  fi
  # shellcheck source=start-tansu.sh
  source scripts/start-tansu.sh "$bin"
fi
.venv/bin/python benches/startup/probe.py "$bootstrap" target/release/jurystream "${1:-5}"

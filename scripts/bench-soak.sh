#!/usr/bin/env bash
# Runs the soak benchmark (benches/soak.rs) against a release tansu (see scripts/bench-load.sh).
#   SOAK_SECS (default 1800), SOAK_RATE (10000), SOAK_PROJECTS (100), SOAK_SAMPLE_SECS (60)
exec "$(dirname "$0")/bench-load.sh" --bench soak "$@"

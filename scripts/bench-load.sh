#!/usr/bin/env bash
# Runs the service load benchmark (benches/load.rs) against a release build of the tansu broker,
# started here on a free port with memory storage and stopped at the end. The tests use a debug
# broker (quick to build); a benchmark should not measure an unoptimised broker. The release
# build is cached under target/tansu-release (or $TANSU_RELEASE_ROOT); building it takes ~15 min.
set -euo pipefail
cd "$(dirname "$0")/.."
root="${TANSU_RELEASE_ROOT:-$PWD/target/tansu-release}"
scripts/install-tansu.sh --release "$root"
# shellcheck source=start-tansu.sh
source scripts/start-tansu.sh "$root/bin/tansu"
KAFKA_BOOTSTRAP_SERVERS="$bootstrap" cargo bench --bench load "$@"

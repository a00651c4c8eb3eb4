#!/usr/bin/env bash
# Runs a service benchmark against a release build of the tansu broker, started here on a free
# port with memory storage and stopped at the end: the load benchmark (benches/load.rs) by
# default, or `--bench soak` (benches/soak.rs; scripts/bench-soak.sh). The tests use a debug
# broker (quick to build); a benchmark should not measure an unoptimised broker. The release
# build is cached under target/tansu-release (or $TANSU_RELEASE_ROOT); building it takes ~15 min.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=load
if [[ "${1:-}" == "--bench" ]]; then
  bench="$2"
  shift 2
fi
root="${TANSU_RELEASE_ROOT:-$PWD/target/tansu-release}"
scripts/install-tansu.sh --release "$root"
# shellcheck source=start-tansu.sh
source scripts/start-tansu.sh "$root/bin/tansu"
KAFKA_BOOTSTRAP_SERVERS="$bootstrap" cargo bench --bench "$bench" "$@"

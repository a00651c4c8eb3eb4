#!/usr/bin/env bash
# Runs the service load benchmark (benches/load.rs) against a release build of the tansu broker,
# started here on a free port with memory storage and stopped at the end. The tests use a debug
# broker (quick to build); a benchmark should not measure an unoptimised broker. The release
# build is cached under target/tansu-release (or $TANSU_RELEASE_ROOT); building it takes ~15 min.
set -euo pipefail
cd "$(dirname "$0")/.."
root="${TANSU_RELEASE_ROOT:-$PWD/target/tansu-release}"
scripts/install-tansu.sh --release "$root"
bin="$root/bin/tansu"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
(cd "$dir" && exec "$bin" broker --listener-url "tcp://127.0.0.1:$port" \
  --advertised-listener-url "tcp://127.0.0.1:$port" --storage-engine memory://tansu/ >tansu.log 2>&1) &
broker=$!
trap 'kill "$broker" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:$port" cargo bench --bench load "$@"

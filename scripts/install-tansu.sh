#!/usr/bin/env bash
# Installs the tansu broker (an Apache-Kafka-compatible broker from crates.io) with the dynostore
# storage engine, unless a usable one is already installed. A debug build without debug info
# takes ~4 minutes instead of ~11 and serves the tests as fast.
#
# `install-tansu.sh --release ROOT` installs an optimised build under ROOT/bin instead (~15
# minutes), for the load benchmark (scripts/bench-load.sh).
set -euo pipefail
TANSU_VERSION=0.6.0
if [ "${1:-}" = "--release" ]; then
  root="${2:?usage: install-tansu.sh [--release ROOT]}"
  profile=()
else
  root="${CARGO_HOME:-$HOME/.cargo}"
  profile=(--debug)
fi
bin="$root/bin/tansu"
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "$TANSU_VERSION" && "$bin" --help 2>/dev/null | grep -q dynostore; then
  exit 0
fi
echo "installing tansu $TANSU_VERSION (dynostore) into $root..." >&2
CARGO_PROFILE_DEV_DEBUG=0 cargo install tansu --version "$TANSU_VERSION" --locked --features dynostore \
  --root "$root" "${profile[@]}" --force
"$bin" --help | grep -q dynostore || { echo "tansu lacks the dynostore feature" >&2; exit 1; }

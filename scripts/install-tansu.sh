#!/usr/bin/env bash
# Installs the tansu broker (an Apache-Kafka-compatible broker from crates.io) with the dynostore
# storage engine, unless a usable one is already installed. A debug build without debug info
# takes ~4 minutes instead of ~11 and serves the tests as fast.
set -euo pipefail
TANSU_VERSION=0.6.0
bin="${CARGO_HOME:-$HOME/.cargo}/bin/tansu"
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "$TANSU_VERSION" && "$bin" --help 2>/dev/null | grep -q dynostore; then
  exit 0
fi
echo "installing tansu $TANSU_VERSION (dynostore)..." >&2
CARGO_PROFILE_DEV_DEBUG=0 cargo install tansu --version "$TANSU_VERSION" --locked --features dynostore --debug --force
"$bin" --help | grep -q dynostore || { echo "tansu lacks the dynostore feature" >&2; exit 1; }

#!/usr/bin/env bash
# Installs Debian's prometheus (prometheus and promtool) for the dashboard test, unless present.
set -euo pipefail
if command -v promtool >/dev/null && command -v prometheus >/dev/null; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null

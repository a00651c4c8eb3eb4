# Sourced by the benchmark scripts that run the service against a broker: sets $bootstrap to
# KAFKA_BOOTSTRAP_SERVERS if set, else starts a tansu here (start-tansu.sh): the release build
# under TANSU_RELEASE_ROOT if that is set (see scripts/bench-load.sh), else the tests' debug build.
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

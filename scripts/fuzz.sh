#!/usr/bin/env bash
# Coverage-guided fuzzing of every input decoder (fuzz/src/lib.rs) with AFL++ on stable Rust.
#   scripts/fuzz.sh [SECONDS]   fuzz for SECONDS (default 60) from the committed corpus, then
#                               print executions, coverage and crashes; exit 1 on any crash.
#   scripts/fuzz.sh --minimize  fold the run's queue into fuzz/corpus/decoders (afl-cmin).
# Installs cargo-afl and builds AFL++ on first use (about a minute). Builds into target/afl so the
# instrumented build never replaces the normal one.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="$PWD/target/afl"
out="$CARGO_TARGET_DIR/out"
if ! cargo afl --version >/dev/null 2>&1; then
  cargo install cargo-afl --locked --version 0.18.2
fi
afl_bin() { ls -d "$HOME"/.local/share/afl.rs/rustc-*/afl.rs-*/afl/bin 2>/dev/null | tail -1; }
if [[ ! -x "$(afl_bin)/afl-fuzz" ]]; then
  cargo afl config --build
fi
(cd fuzz && cargo afl build --release --locked --features afl --bin decoders)
bin="$CARGO_TARGET_DIR/release/decoders"
export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_QUIET=1
if [[ "${1:-}" == "--minimize" ]]; then
  min="$CARGO_TARGET_DIR/min"
  rm -rf "$min"
  # AFL++'s shell afl-cmin: the Python one `cargo afl cmin` runs found no coverage here.
  cmin="$(afl_bin)/afl-cmin.bash"
  "$cmin" -i "$out/default/queue" -o "$min" -- "$bin" >/dev/null 2>&1
  [[ -n "$(ls -A "$min" 2>/dev/null)" ]] || { echo "fuzz: afl-cmin kept nothing" >&2; exit 1; }
  rm -f fuzz/corpus/decoders/*
  n=0
  for f in "$min"/*; do cp "$f" "fuzz/corpus/decoders/$(printf 'input-%05d' "$n")"; n=$((n + 1)); done
  echo "fuzz: corpus minimized to $n inputs"
  exit 0
fi
rm -rf "$out"
cargo afl fuzz -i fuzz/corpus/decoders -o "$out" -V "${1:-60}" -- "$bin" >"$CARGO_TARGET_DIR/fuzz.log" 2>&1 || true
stats="$out/default/fuzzer_stats"
[[ -f "$stats" ]] || { cat "$CARGO_TARGET_DIR/fuzz.log"; exit 1; }
get() { awk -F': ' -v k="$1" '$1 ~ "^"k" *$" {print $2}' "$stats"; }
echo "fuzz: $(get execs_done) executions in $(get run_time) s ($(get execs_per_sec)/s), corpus $(get corpus_count), coverage $(get bitmap_cvg), crashes $(get saved_crashes), hangs $(get saved_hangs)"
[[ "$(get saved_crashes)" == "0" ]]

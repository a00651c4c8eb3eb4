#!/usr/bin/env bash
# Floods replay (the engine every runtime drives) with unique projects and oversized sessions,
# and reports its peak RSS for several limits: memory follows limits.max_projects, not the flood.
#   scripts/bench-flood.sh [PROJECTS] [SESSIONS]   (defaults 1000000 and 100)
set -euo pipefail
cd "$(dirname "$0")/.."
projects="${1:-1000000}" sessions="${2:-100}"
cargo build --release --locked --quiet
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 benches/flood/generate.py "$projects" "$sessions" >"$tmp/flood.jsonl"
echo "flood: $projects new projects, $sessions ballots of 10000 candidates, 200 judges on one session ($(du -m "$tmp/flood.jsonl" | cut -f1) MB)"
for limit in 10000 100000 1000000; do
  printf '[limits]\nmax_projects = %s\n' "$limit" >"$tmp/config.toml"
  /usr/bin/time -f "%M" -o "$tmp/rss" target/release/jurystream --config "$tmp/config.toml" \
    replay --input "$tmp/flood.jsonl" --output "$tmp/out.jsonl" 2>"$tmp/summary"
  letters() { grep -c "\"error\":\"$1\"" "$tmp/out.jsonl" || true; }
  echo "max_projects=$limit: peak RSS $(( $(cat "$tmp/rss") / 1024 )) MB; project_limit $(letters project_limit), session_limit $(letters session_limit); $(tail -1 "$tmp/summary")"
done

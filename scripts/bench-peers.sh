#!/usr/bin/env bash
# Runs jurystream beside what a user would otherwise write (a hand-written confluent-kafka
# consumer and a Quix Streams app applying the same HumanJudge update per project) on one broker
# and one corpus: events/s, CPU per event and peak RSS of each (benches/peers/run.py).
#
# usage: scripts/bench-peers.sh [EVENTS] [PROJECTS]    (default 300000 10000)
# The broker is KAFKA_BOOTSTRAP_SERVERS if set, else a tansu started here (scripts/broker.sh).
# PEERS_SERVICE_CONFIG appends TOML to jurystream's configuration; PEERS_ONLY=jurystream runs it
# alone (no restarts, no other contenders), to compare builds or configurations. With a tansu
# started here, it also prints the broker's CPU over the whole run (loading the corpus and every
# contender): what the service writes costs the broker too, on the same cores.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-peers/bin/python ]; then
  python3 -m venv .venv-peers
fi
if ! .venv-peers/bin/python -c "import quixstreams, confluent_kafka" 2>/dev/null; then
  .venv-peers/bin/pip install --quiet -r benches/peers/requirements.txt
fi
cargo build --release --locked --bin jurystream
# shellcheck source=broker.sh
source scripts/broker.sh
.venv-peers/bin/python benches/peers/run.py "$bootstrap" target/release/jurystream "$@"
if [ -n "${tansu_pid:-}" ] && [ -r "/proc/$tansu_pid/stat" ]; then
  awk -v hz="$(getconf CLK_TCK)" '{ printf "broker CPU %.2f s\n", ($14 + $15) / hz }' \
    "/proc/$tansu_pid/stat"
fi

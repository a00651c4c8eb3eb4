#!/usr/bin/env bash
# The whole stack on this machine, without Docker, in one command:
#
#   scripts/stack.sh
#
# A Kafka-compatible broker (tansu, built and installed on first use, which takes a few minutes;
# it keeps its topics in memory), jurystream built from this repository with its defaults, the
# demo producer (deploy/compose/producer.py) streaming examples/demo.jsonl in a loop, and, where
# Debian's prometheus is installed (scripts/install-prometheus.sh), Prometheus scraping the
# service with the shipped alerting rules. It prints where each part answers and runs until
# Ctrl-C, which stops them all; their logs are in the directory it prints.
#
#   scripts/stack.sh --check    start it all, wait until jurystream publishes and answers for
#                               the demo's projects (and Prometheus scrapes it, if there), stop:
#                               exit 0 if so, else 1 with the logs' last lines (the tests run it)
#
# Ports: the broker on BROKER_PORT (9092), jurystream on HTTP_PORT (9464), Prometheus on
# PROMETHEUS_PORT (9090); --check takes free ones. STACK_BINARY runs that jurystream binary
# instead of building the release one. The producer needs Python 3 with venv: it runs from
# .venv when that has confluent-kafka (scripts/install-python.sh), else from .venv-demo, made
# on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

check=false
case "${1:-}" in
  --check) check=true ;;
  "") ;;
  *) echo "usage: scripts/stack.sh [--check]" >&2; exit 2 ;;
esac

for tool in curl python3; do
  command -v "$tool" >/dev/null || { echo "scripts/stack.sh needs $tool" >&2; exit 1; }
done
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}
if $check; then
  broker_port=$(free_port) http_port=$(free_port) prometheus_port=$(free_port)
else
  broker_port="${BROKER_PORT:-9092}" http_port="${HTTP_PORT:-9464}"
  prometheus_port="${PROMETHEUS_PORT:-9090}"
fi
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in "$broker_port" "$http_port"; do
  if listening "$port"; then
    echo "port $port is in use: stop what listens there, or choose another" \
      "(BROKER_PORT, HTTP_PORT)" >&2
    exit 1
  fi
done

# What the stack runs: the broker, jurystream, and a Python with the Kafka client.
scripts/install-tansu.sh
tansu="${CARGO_HOME:-$HOME/.cargo}/bin/tansu"
jurystream="${STACK_BINARY:-}"
if [ -z "$jurystream" ]; then
  cargo build --release --locked
  jurystream=target/release/jurystream
fi
python=""
for candidate in .venv/bin/python .venv-demo/bin/python; do
  if [ -x "$candidate" ] && "$candidate" -c "import confluent_kafka" 2>/dev/null; then
    python="$candidate"
    break
  fi
done
if [ -z "$python" ]; then
  python3 -m venv .venv-demo
  .venv-demo/bin/pip install --quiet confluent-kafka==2.6.1
  python=.venv-demo/bin/python
fi

run=$(mktemp -d "${TMPDIR:-/tmp}/jurystream-stack.XXXXXX")
pids=()
stop() {
  # Each with SIGTERM, the last started first, each gone before the next: jurystream commits
  # and leaves its groups while the broker still answers.
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  pids=()
}
trap stop EXIT
trap 'exit 130' INT TERM
# Started in reverse: the last started is the first stopped.
start() {
  local log="$run/$1.log"
  shift
  "$@" >"$log" 2>&1 &
  pids=("$!" "${pids[@]}")
}
started_or_fail() {
  echo "$1 did not start; the last lines of $run/$2.log:" >&2
  tail -n 20 "$run/$2.log" >&2
  exit 1
}

bootstrap="127.0.0.1:$broker_port"
mkdir "$run/tansu"
start tansu env -C "$run/tansu" "$tansu" broker --listener-url "tcp://$bootstrap" \
  --advertised-listener-url "tcp://$bootstrap" --storage-engine memory://tansu/
for _ in $(seq 100); do listening "$broker_port" && break; sleep 0.1; done
listening "$broker_port" || started_or_fail "the broker" tansu

# jurystream with its defaults; the broker holds every topic once (no replicas).
start jurystream env JURYSTREAM_KAFKA__BOOTSTRAP_SERVERS="$bootstrap" \
  JURYSTREAM_HTTP__BIND="127.0.0.1:$http_port" "$jurystream" run
get() { curl -fsS --max-time 2 "http://127.0.0.1:$1$2" 2>/dev/null; }
for _ in $(seq 600); do get "$http_port" /readyz >/dev/null && break; sleep 0.1; done
get "$http_port" /readyz >/dev/null || started_or_fail jurystream jurystream

start producer env BOOTSTRAP_SERVERS="$bootstrap" DEMO_FILE=examples/demo.jsonl \
  PRODUCER_INTERVAL="${PRODUCER_INTERVAL:-0.5}" "$python" -u deploy/compose/producer.py

prometheus=false
if ! command -v prometheus >/dev/null; then
  why="not installed (scripts/install-prometheus.sh adds Debian's)"
elif listening "$prometheus_port"; then
  why="not started: port $prometheus_port is in use (PROMETHEUS_PORT)"
else
  cat >"$run/prometheus.yml" <<EOF
global:
  scrape_interval: 2s
  evaluation_interval: 5s
rule_files:
  - $PWD/deploy/jurystream.rules.yml
scrape_configs:
  - job_name: jurystream
    static_configs:
      - targets: ["127.0.0.1:$http_port"]
EOF
  start prometheus prometheus --config.file="$run/prometheus.yml" \
    --storage.tsdb.path="$run/prometheus" --web.listen-address="127.0.0.1:$prometheus_port"
  prometheus=true
fi

if $check; then
  # The demo's two projects, each with a score, through the query API; Prometheus's scrape.
  for _ in $(seq 120); do
    projects=$(get "$http_port" /v1/projects || true)
    score=$(get "$http_port" /v1/projects/proj-42 || true)
    scraped=true
    if $prometheus; then
      up=$(get "$prometheus_port" '/api/v1/query?query=jurystream_up' || true)
      [[ "$up" == *'"value":['*'"1"]'* ]] || scraped=false
    fi
    if [[ "$projects" == *proj-42* && "$projects" == *proj-7* && "$score" == *'"score"'* ]] &&
      $scraped; then
      echo "the stack works: jurystream answers for the demo's projects" \
        "$($prometheus && echo "and Prometheus scrapes it")"
      stop
      rm -rf "$run"
      exit 0
    fi
    sleep 1
  done
  echo "jurystream did not answer for the demo's projects within 120 s" >&2
  for part in tansu jurystream producer; do
    echo "--- the last lines of $part.log" >&2
    tail -n 15 "$run/$part.log" >&2
  done
  exit 1
fi

cat <<EOF
The stack is up (logs in $run); Ctrl-C stops it.
  broker      $bootstrap (a Kafka client reads the outputs: jury.scores, jury.consensus, ...)
  jurystream  curl -s localhost:$http_port/v1/projects       the projects it holds
              curl -s localhost:$http_port/v1/projects/proj-42   one project's score
              curl -s localhost:$http_port/metrics | grep ^jurystream_records_total
  producer    streams examples/demo.jsonl, a record every ${PRODUCER_INTERVAL:-0.5} s
EOF
if $prometheus; then
  echo "  prometheus  http://localhost:$prometheus_port (Status > Rules: the shipped rules)"
else
  echo "  prometheus  $why"
fi
echo "  grafana     import grafana/jurystream.json into any Grafana that reads that Prometheus"
wait "${pids[@]}"

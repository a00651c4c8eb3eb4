# Sourced by the benchmark scripts: starts the tansu broker at "$1" on a free local port with
# memory storage, sets $bootstrap to its address, and stops it when the sourcing script exits.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
tansu_dir=$(mktemp -d)
(cd "$tansu_dir" && exec "$1" broker --listener-url "tcp://127.0.0.1:$port" \
  --advertised-listener-url "tcp://127.0.0.1:$port" --storage-engine memory://tansu/ >tansu.log 2>&1) &
tansu_pid=$!
trap 'kill "$tansu_pid" 2>/dev/null; rm -rf "$tansu_dir"' EXIT
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
bootstrap="127.0.0.1:$port"

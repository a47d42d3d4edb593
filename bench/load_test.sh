#!/usr/bin/env bash
# Load test of `embedrt serve` with wrk on loopback, bounded in time: requests/s and p50/p99
# latency for single-token and batch requests, then the same while the model file is replaced
# (atomically) and reloaded every second. Writes bench/results/load_test.md.
#
#   bench/load_test.sh [build/release/tools/embedrt] [model.embt]   (DURATION=10s CONNECTIONS=16)
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/python-env.sh
embedrt=${1:-build/release/tools/embedrt}
model=${2:-build/quickstart/gpt2.embt}
duration=${DURATION:-10s}
connections=${CONNECTIONS:-16}
work=$(mktemp -d)
server_pid=""
trap 'kill $server_pid 2>/dev/null || true; pkill -P $$ 2>/dev/null || true; rm -rf "$work"' EXIT
cp "$model" "$work/model.embt"
port=$("$EMBEDRT_TORCH_PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$embedrt" serve "$work/model.embt" --name model --port "$port" --threads 16 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/v2/health/ready" >/dev/null && break; sleep 0.1; done

# wrk request bodies: one token, and a batch of 8 x 128 tokens.
"$EMBEDRT_TORCH_PYTHON" - "$work" <<'PY'
import json, random, sys
random.seed(0)
def body(batch, length):
    ids = [random.randrange(50257) for _ in range(batch * length)]
    return json.dumps({"inputs": [{"name": "input_ids", "shape": [batch, length], "datatype": "INT64", "data": ids}]})
for name, (b, l) in {"single": (1, 1), "batch": (8, 128)}.items():
    with open(f"{sys.argv[1]}/{name}.lua", "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n')
        f.write(f"wrk.body = {json.dumps(body(b, l))}\n")
# Binary mode: JSON header + raw int64 ids in, raw float32 embeddings out.
import struct
ids = [random.randrange(50257) for _ in range(8 * 128)]
header = json.dumps({"inputs": [{"name": "input_ids", "shape": [8, 128], "datatype": "INT64",
                                 "parameters": {"binary_data_size": 8 * len(ids)}}],
                     "outputs": [{"name": "embeddings", "parameters": {"binary_data": True}}]}).encode()
raw = header + struct.pack(f"<{len(ids)}q", *ids)
with open(f"{sys.argv[1]}/binary.lua", "w") as f:
    f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/octet-stream"\n')
    f.write(f'wrk.headers["Inference-Header-Content-Length"] = "{len(header)}"\n')
    f.write('wrk.body = "' + "".join(f"\\{b}" for b in raw) + '"\n')
PY

run() {  # run LABEL SCRIPT
  wrk -t2 -c"$connections" -d"$duration" --latency -s "$work/$2.lua" "http://127.0.0.1:$port/v2/models/model/infer" >"$work/$1.txt"
  local rps p50 p99 errors
  rps=$(awk '/Requests\/sec/ {print $2}' "$work/$1.txt")
  p50=$(awk '$1 == "50%" {print $2}' "$work/$1.txt")
  p99=$(awk '$1 == "99%" {print $2}' "$work/$1.txt")
  errors=$(awk '/Non-2xx/ {print $NF}' "$work/$1.txt")
  socket_errors=$(awk '/Socket errors/ {print $0}' "$work/$1.txt")
  echo "| $1 | $rps | $p50 | $p99 | ${errors:-0} ${socket_errors:+($socket_errors)} |"
}

{
  echo "# embedrt serve under wrk (loopback, $connections connections, $duration per row, 2 wrk threads)"
  echo
  echo "| load | requests/s | p50 | p99 | non-2xx responses |"
  echo "|---|---|---|---|---|"
  run "single token (1x1)" single
  run "batch (8x128 tokens)" batch
  run "batch (8x128), binary mode" binary
  # Replace the file atomically and reload every second while serving.
  (
    while true; do
      cp "$model" "$work/next.embt" && mv "$work/next.embt" "$work/model.embt" && kill -HUP "$server_pid"
      sleep 1
    done
  ) &
  reloader_pid=$!
  run "single token, reload every 1 s" single
  run "batch, reload every 1 s" batch
  run "batch binary, reload every 1 s" binary
  kill $reloader_pid
  echo
  echo "Reloads performed: $(grep -c 'generation' "$work/server.log") (including the first load); refused: $(grep -c 'refused' "$work/server.log")"
} | tee bench/results/load_test.md
kill -TERM "$server_pid"
status=0
wait "$server_pid" || status=$?
echo "server exit code after SIGTERM: $status"
server_pid=""
[ "$status" -eq 0 ]

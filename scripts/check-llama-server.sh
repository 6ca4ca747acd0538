#!/usr/bin/env bash
# Check the client against a real llama.cpp `llama-server` (issue 7,
# section 2): it closes kept-alive connections after each streamed answer,
# which cost isobench 16-19% of its requests as `connect` errors before the
# retry on a new connection. Not run in CI: it needs a llama.cpp build and
# a GGUF model. Prints each run's completed, failed and retried requests
# and exits 1 if any request failed.
#
#   LLAMA_SERVER=/path/to/llama-server MODEL_GGUF=/path/to/model.gguf \
#     scripts/check-llama-server.sh
#
# scripts/compare-llama-cpp.sh builds llama-server from llama-cpp-python's
# source distribution (cached: ~/.cache/isobench-llama-cpp/build-*/bin/
# llama-server) and writes GGUF files of a small random Llama
# (results/compare-llama-cpp/model-*.gguf); any small GGUF model does, the
# answers' content does not matter. Recorded result: docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${LLAMA_SERVER:?set LLAMA_SERVER to the llama-server binary}"
: "${MODEL_GGUF:?set MODEL_GGUF to a .gguf model file}"
PORT=${PORT:-18181}
REQUESTS=${REQUESTS:-100}
OUT=results/check-llama-server

cargo build --release -p isobench
bin=target/release/isobench
rm -rf "$OUT" && mkdir -p "$OUT"

"$LLAMA_SERVER" -m "$MODEL_GGUF" --host 127.0.0.1 --port "$PORT" -np 32 -cb \
  >"$OUT/llama-server.log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  sleep 1
done

lost=0
for concurrency in 1 8; do
  report="$OUT/short-c$concurrency.json"
  # Exit 3 (too many errors) is judged below from the report itself.
  "$bin" run workloads/short.toml --quiet --target "http://127.0.0.1:$PORT" \
    --concurrency "$concurrency" --max-requests "$REQUESTS" --warmup 0 \
    --max-error-rate 1 -o "$report" >/dev/null || true
  read -r completed failed retries < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["summary"]["requests"]
print(r["completed"], r["failed"], r["retries"])' "$report")
  echo "concurrency $concurrency: $completed completed, $failed failed, $retries retried on a new connection"
  lost=$((lost + failed))
done
[ "$lost" -eq 0 ] || { echo "FAIL: $lost requests lost"; exit 1; }
echo "ok: no request lost"

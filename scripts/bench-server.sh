#!/usr/bin/env bash
# Server benchmark: for each batching policy, output tokens/s and p50/p99
# TTFT and TPOT of the short and long workloads at concurrency 1, 8 and 32
# and of the batched workload (bursts of 8-32), against the same model
# generating one request at a time (static batching, batch size 1). Uses
# the real binary end to end: `isobench serve` per policy on 127.0.0.1 and
# `isobench run` as the client. Prints figures; asserts nothing.
#
#   scripts/bench-server.sh                    # every policy, every workload
#   POLICIES="continuous" WORKLOADS="short" scripts/bench-server.sh
#   MODEL=models/tiny-llama scripts/bench-server.sh
#
# Reports land in results/bench-server/ (POLICY-WORKLOAD-cN.json), then
# `isobench summary` prints them side by side.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${MODEL:-models/small-llama}
POLICIES=${POLICIES:-"one-at-a-time static dynamic continuous"}
WORKLOADS=${WORKLOADS:-"short long batched"}
CONCURRENCY=${CONCURRENCY:-"1 8 32"}
PORT=${PORT:-18080}
OUT=results/bench-server

cargo build --release -p isobench
bin=target/release/isobench
rm -rf "$OUT" && mkdir -p "$OUT"
echo "machine: $(nproc) CPU cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "model: $MODEL"

server_pid=
stop_server() { [ -n "$server_pid" ] && kill -INT "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null; server_pid=; }
trap stop_server EXIT

start_server() { # policy
  local flags
  case $1 in
    one-at-a-time) flags="--batching static --max-batch-size 1" ;;
    static) flags="--batching static --max-batch-size 32" ;;
    dynamic) flags="--batching dynamic --max-batch-size 32 --max-wait 50ms" ;;
    continuous) flags="--batching continuous --max-num-seqs 32 --max-num-batched-tokens 512" ;;
    *) echo "unknown policy $1" >&2; exit 2 ;;
  esac
  # shellcheck disable=SC2086
  "$bin" serve --model "$MODEL" --port "$PORT" --kv-memory 2GiB $flags 2>"$OUT/server-$1.log" &
  server_pid=$!
  for _ in $(seq 600); do
    (echo >"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "server for $1 did not start; see $OUT/server-$1.log" >&2; exit 1
}

run() { # policy workload concurrency requests (concurrency "bursts": the workload's own load)
  local name="$1-$2-c$3" load=(--arrival closed --concurrency "$3")
  [ "$3" = bursts ] && name="$1-$2-bursts" && load=()
  echo "== $name"
  "$bin" run "workloads/$2.toml" --target "http://127.0.0.1:$PORT" --quiet \
    "${load[@]}" --max-requests "$4" --warmup 1 -o "$OUT/$name.json" >/dev/null
}

for policy in $POLICIES; do
  start_server "$policy"
  levels=$CONCURRENCY
  [ "$policy" = one-at-a-time ] && levels=1   # the server takes one at a time whatever the client sends
  for workload in $WORKLOADS; do
    case $workload in
      batched) run "$policy" batched bursts 48 ;;   # bursts of 8-32 every 5 s
      long) for c in $levels; do run "$policy" long "$c" $((c < 4 ? 4 : c)); done ;;
      *) for c in $levels; do run "$policy" "$workload" "$c" $((c < 4 ? 16 : 4 * c)); done ;;
    esac
  done
  stop_server
done

for workload in $WORKLOADS; do
  echo
  echo "## $workload"
  reports=("$OUT"/*-"$workload"-*.json)
  base=$(basename "${reports[0]}" .json)
  for report in "${reports[@]}"; do
    case $(basename "$report") in one-at-a-time-*) base=$(basename "$report" .json); break ;; esac
  done
  "$bin" summary --baseline "$base" "${reports[@]}"
done

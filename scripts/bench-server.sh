#!/usr/bin/env bash
# Server benchmark: output tokens/s and p50/p99 TTFT and TPOT for each
# batching policy at concurrency 1, 8 and 32, against one-at-a-time
# generation, with models/small-llama on the CPU. Prints figures; asserts
# nothing. Extra arguments go to the benchmark (see
# crates/isobench-server/examples/bench_server.rs), e.g. --profile long.
#
#   scripts/bench-server.sh                      # short prompts, 64 output tokens
#   scripts/bench-server.sh --profile long       # 512-1024-token prompts, 128 output tokens
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p isobench-server --example bench_server
nproc_count=$(nproc)
echo "machine: ${nproc_count} CPU cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
exec target/release/examples/bench_server "$@"

#!/usr/bin/env bash
# One device call of serving runs: each argument is a spec
# NAME:PART:POLICIES:WORKLOADS:CONCURRENCY:TURNS:BUDGET[:TOKENS] (lists
# comma-separated; TOKENS is continuous batching's --max-num-batched-tokens,
# gpu-bench's 2,048 when left out); runs gpu-bench.sh's serving PART into
# $OUT/NAME on GRID_BIN (default .gpu/main) and prints the summaries.
set -u
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee "$OUT/gpu.csv"
for spec in "$@"; do
    IFS=: read -r name part policies workloads conc turns budget tokens <<<"$spec"
    mkdir -p "$OUT/$name"
    GPU_BENCH_BIN="${GRID_BIN:-.gpu/main}" scripts/gpu-bench.sh --part "$part" "$OUT/$name" \
        --policy "$policies" --workloads "$workloads" --concurrency "$conc" \
        --turns "$turns" --budget "$budget" --max-num-batched-tokens "${tokens:-2048}" \
        > "$OUT/$name/stdout.txt" 2>&1
    echo "== $name rc=$? $((SECONDS))s"
    cat "$OUT/$name/$part-summary.txt" 2>/dev/null || tail -20 "$OUT/$name/stdout.txt"
done

#!/usr/bin/env bash
# One device call of the full serving grid: each argument is a spec
# NAME:PART:POLICIES:WORKLOADS:CONCURRENCY:TURNS:BUDGET (lists comma-separated);
# runs gpu-bench.sh's serving PART into $OUT/NAME and prints the summaries.
set -u
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee "$OUT/gpu.csv"
for spec in "$@"; do
    IFS=: read -r name part policies workloads conc turns budget <<<"$spec"
    mkdir -p "$OUT/$name"
    GPU_BENCH_BIN="${GRID_BIN:-.gpu/merged}" scripts/gpu-bench.sh --part "$part" "$OUT/$name" \
        --policy "$policies" --workloads "$workloads" --concurrency "$conc" \
        --turns "$turns" --budget "$budget" > "$OUT/$name/stdout.txt" 2>&1
    echo "== $name rc=$?"
    cat "$OUT/$name/$part-summary.txt" 2>/dev/null || tail -20 "$OUT/$name/stdout.txt"
done

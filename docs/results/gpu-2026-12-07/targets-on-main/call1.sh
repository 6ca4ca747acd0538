#!/usr/bin/env bash
# Call 1: the GPU checks on main, then step times (1B and 8B, own kernels and plain).
set -u
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee "$OUT/gpu.csv"
mkdir -p "$OUT/checks" "$OUT/steps"
GPU_BENCH_BIN=.gpu/main scripts/gpu-bench.sh --part checks "$OUT/checks" > "$OUT/checks/stdout.txt" 2>&1
echo "== checks rc=$? ${SECONDS}s"
cat "$OUT/checks/checks-summary.txt" 2>/dev/null || tail -30 "$OUT/checks/stdout.txt"
GPU_BENCH_BIN=.gpu/main scripts/gpu-bench.sh --part steps "$OUT/steps" > "$OUT/steps/stdout.txt" 2>&1
echo "== steps rc=$? ${SECONDS}s"
cat "$OUT/steps/steps-summary.txt" 2>/dev/null || tail -30 "$OUT/steps/stdout.txt"
scripts/gpu-bench.sh --part targets "$OUT" 2>&1 | tee "$OUT/targets-call1.txt"
tar czf /tmp/call.tar.gz -C "$OUT" --exclude=call.log . && find "$OUT" -mindepth 1 -maxdepth 1 ! -name call.log -exec rm -rf {} + && mv /tmp/call.tar.gz "$OUT/"

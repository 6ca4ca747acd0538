#!/usr/bin/env bash
# Call 1: the GPU checks on this build, then what the CUDA batching
# defaults buy on the 1B shape (compare.sh).
set -u
R=$OUT/c1; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "== checks $(date +%T)"
scripts/gpu-bench.sh --part checks $R/checks > $R/checks.log 2>&1; echo "checks rc $?"
grep -cE "^PASS" $R/checks/checks-summary.txt; grep -E "^FAIL" $R/checks/checks-summary.txt | cut -c1-300
echo "== 1B $(date +%T)"
bash docs/results/gpu-2026-12-06/defaults/compare.sh $R models/llama-3.2-1b-shape 1024 \
  continuous:short continuous:batched continuous:chat dynamic:short dynamic:batched dynamic:chat
echo "== done $(date +%T)"

#!/usr/bin/env bash
# Call 1: decode attention reading K and V through a ring of cp.async
# stages (ring) against the kernel before it (base, the build of 21d8b13:
# same attention kernel as c3c1306). gpu_kernels on both (the attention
# cases, then its timing table), step_bench on the 8B shape (builds
# alternated) and on the 1B shape (ring), then the GPU checks on ring
# (c3c1306 plus this kernel).
set -u
R=$OUT/c1; mkdir -p $R
bt=docs/results/gpu-2026-12-06/block-tables
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for b in base ring; do (cd .gpu/$b && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done); done
for b in base ring; do
  echo "== gpu_kernels $b $(date +%T)"
  .gpu/$b/gpu_kernels > $R/gpu_kernels-$b.txt 2>&1; echo "rc $?"
  grep -cE '^PASS' $R/gpu_kernels-$b.txt; grep -E '^FAIL' $R/gpu_kernels-$b.txt | head -5
  grep -A12 '^decode attention' $R/gpu_kernels-$b.txt
done
echo "== step_bench 8B, context 512 $(date +%T)"
for b in ring base; do
  timeout 150 .gpu/$b/step_bench --device cuda:0 --dtype bf16 --model models/llama-3-8b-shape --graphs on \
    --batch 1,64,128 --context 512 --steps 32 > $R/steps-8b-$b.txt 2>&1 || echo "step_bench $b rc $?"
  echo "$b"; python3 $bt/steps.py $R/steps-8b-$b.txt
done
echo "== checks (ring) $(date +%T)"
GPU_BENCH_BIN=.gpu/ring timeout 200 scripts/gpu-bench.sh --part checks $R/checks > $R/checks.log 2>&1; echo "checks rc $?"
grep -cE "^PASS" $R/checks/checks-summary.txt; grep -E "^FAIL" $R/checks/checks-summary.txt | cut -c1-300
tail -3 $R/checks.log
echo "== step_bench 1B $(date +%T)"
.gpu/ring/step_bench --device cuda:0 --dtype bf16 --model models/llama-3.2-1b-shape --graphs both \
  --batch 1,128 --context 512 --steps 32 > $R/steps-1b-ring.txt 2>&1 || echo "step_bench rc $?"
python3 $bt/steps.py $R/steps-1b-ring.txt
tar -C $R -cJf $OUT/call1-reports.tar.xz . && rm -rf $R
echo "== done $(date +%T)"

#!/usr/bin/env bash
# Call 1: q/k/v and gate/up as one matrix product each, with RoPE and the
# K/V writes fused (new) against main at a06e07c (old): the GPU checks on
# new, step_bench on both builds (1B, then 8B), then serving A/B on the
# 1B shape (ab.sh: closed loop at 128, alternating order).
set -u
R=$OUT/c1; mkdir -p $R
bt=docs/results/gpu-2026-12-06/block-tables
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for b in old new; do (cd .gpu/$b && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done); done
echo "== checks (new) $(date +%T)"
GPU_BENCH_BIN=.gpu/new scripts/gpu-bench.sh --part checks $R/checks > $R/checks.log 2>&1; echo "checks rc $?"
grep -cE "^PASS" $R/checks/checks-summary.txt; grep -E "^FAIL" $R/checks/checks-summary.txt | cut -c1-300
tail -3 $R/checks.log
echo "== step_bench 1B $(date +%T)"
for b in old new new old; do
  .gpu/$b/step_bench --device cuda:0 --dtype bf16 --model models/llama-3.2-1b-shape --graphs both \
    --batch 1,2,8,32,128 --context 512 --steps 32 > $R/steps-1b-$b.txt 2>&1 || echo "step_bench $b rc $?"
  python3 $bt/steps.py $R/steps-1b-$b.txt; grep -A6 '^batch  eager' $R/steps-1b-$b.txt | awk '{print "  prefill", $1, $NF}' 
done
echo "== serving 1B $(date +%T)"
BINS="old new" MODELS="models/llama-3.2-1b-shape" \
  bash $bt/ab.sh $R 2048 2 continuous:batched dynamic:batched continuous:short
echo "== step_bench 8B $(date +%T)"
for b in new old; do
  timeout 150 .gpu/$b/step_bench --device cuda:0 --dtype bf16 --model models/llama-3-8b-shape --graphs both \
    --batch 1,8,64,128 --context 512 --steps 32 > $R/steps-8b-$b.txt 2>&1 || echo "step_bench $b rc $?"
  python3 $bt/steps.py $R/steps-8b-$b.txt; grep -A5 '^batch  eager' $R/steps-8b-$b.txt | awk '{print "  prefill", $1, $NF}' 
done
tar -C $R -cJf $OUT/call1-reports.tar.xz . && rm -rf $R
echo "== done $(date +%T)"

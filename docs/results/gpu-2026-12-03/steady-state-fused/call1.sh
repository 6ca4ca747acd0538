#!/usr/bin/env bash
# Call 1: 1B eager issue time; ncu of 8B eager decode at batch 32/128;
# 8B serving steady state, dynamic vs continuous at budgets 2048 and 512.
set -u
R=$OUT/c1; mkdir -p $R
B=.gpu/new
(cd $B && for f in isobench step_bench; do xz -dkf $f.xz && chmod +x $f; done)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/gpu.txt
echo "== step_bench 1B $(date +%T)"
$B/step_bench --device cuda:0 --dtype bf16 --model models/llama-3.2-1b-shape --graphs both \
  --batch 1,8,128 --context 512 --steps 32 > $R/step-1b.txt 2>&1; echo rc $?
grep -v '^JSON' $R/step-1b.txt | tail -6; grep -o '"batch":[0-9]*\|"issue_ms":\[[^]]*\]\|"host_ms":\[[^]]*\]' $R/step-1b.txt
echo "== ncu 8B decode b32,b128 $(date +%T)"
timeout 200 ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
  $B/step_bench --device cuda:0 --dtype bf16 --model models/llama-3-8b-shape --graphs off \
  --batch 32,128 --context 128 --steps 1 > $R/ncu-8b.csv 2> $R/ncu.err; echo rc $?
wc -l $R/ncu-8b.csv; tail -3 $R/ncu.err; xz -9 $R/ncu-8b.csv
echo "== serving $(date +%T)"
GPU_BENCH_BIN=$B scripts/gpu-bench.sh --part serving-8b $R/s2048 --policy dynamic,continuous \
  --workloads batched,short --concurrency 64,128 --turns 4 --budget 300 > $R/s2048.log 2>&1
tail -25 $R/s2048/*summary.txt
echo "== budget 512 $(date +%T)"
GPU_BENCH_BIN=$B scripts/gpu-bench.sh --part serving-8b $R/s512 --policy continuous \
  --workloads batched,short --concurrency 64,128 --turns 4 --budget 150 --max-num-batched-tokens 512 > $R/s512.log 2>&1
tail -12 $R/s512/*summary.txt
echo "== done $(date +%T)"

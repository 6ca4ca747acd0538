#!/usr/bin/env bash
# Call 1a: what steps with prompt tokens cost, per prompt token, beside
# 128 decode rows and alone (step_bench --prompt-tokens, this session's
# build `prompts`, whose kernels are ring's: 009ef2b's); ncu of the 1B
# mixed and prompt-only steps, kernel by kernel; the per-phase GPU time
# of continuous and dynamic batching on 1B `batched` at 128 (gpu-bench
# keeps each run's /metrics, ring's isobench).
set -u
# Raw output stays under $OUT/c1a (what ran before a timeout still comes back).
R=$OUT/c1a; rm -rf $R; mkdir -p $R
bt=docs/results/gpu-2026-12-06/block-tables
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for b in ring prompts; do (cd .gpu/$b && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done); done
prompt_lines() { grep -E 'prompt tokens|^ *[0-9]+ +[0-9.-]+ ' "$1"; }
echo "== prompt steps 1B $(date +%T)"
timeout 150 .gpu/prompts/step_bench --device cuda:0 --dtype bf16 --model models/llama-3.2-1b-shape --graphs both \
  --batch 128 --context 128 --steps 16 --prompt-tokens 256,512,1024,1920,2048,4096,8192,10240 \
  > $R/prompts-1b.txt 2>&1 || echo "rc $?"
prompt_lines $R/prompts-1b.txt
echo "== ncu 1B mixed and alone $(date +%T)"
timeout 200 ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
  .gpu/prompts/step_bench --device cuda:0 --dtype bf16 --model models/llama-3.2-1b-shape --graphs off \
  --batch 128 --context 128 --steps 1 --prompt-tokens 1920,10240 > $R/ncu-1b.csv 2> $R/ncu-1b.err; echo "ncu rc $?"
wc -l $R/ncu-1b.csv; tail -3 $R/ncu-1b.err
python3 docs/results/gpu-2026-12-07/prompt-steps/ncu_steps.py $R/ncu-1b.csv
echo "== phases, 1B batched at 128 $(date +%T)"
GPU_BENCH_BIN=.gpu/ring timeout 150 scripts/gpu-bench.sh --part serving-1b $R/phases --policy continuous,dynamic \
  --workloads batched --concurrency 128 --turns 16 > $R/phases.log 2>&1; echo "rc $?"
tail -12 $R/phases.log
for f in $(find $R/phases -name 'server-metrics*.txt'); do
  echo "-- $f"; grep -E '^isobench_step_(device_)?seconds_(sum|count)' $f
done
echo "== prompt steps 8B $(date +%T)"
timeout 200 .gpu/prompts/step_bench --device cuda:0 --dtype bf16 --model models/llama-3-8b-shape --graphs off \
  --batch 128 --context 128 --steps 8 --prompt-tokens 512,1920,2048,4096,10240 \
  > $R/prompts-8b.txt 2>&1 || echo "rc $?"
prompt_lines $R/prompts-8b.txt
echo "== done $(date +%T)"

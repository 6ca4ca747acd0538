#!/usr/bin/env bash
# Call 2 (same warm H100 as call 1): step_bench on the 8B shape once more,
# base then ring, the reverse of call 1's order.
set -u
bt=docs/results/gpu-2026-12-06/block-tables
for b in base ring; do (cd .gpu/$b && xz -dkf step_bench.xz && chmod +x step_bench); done
for b in base ring; do
  timeout 100 .gpu/$b/step_bench --device cuda:0 --dtype bf16 --model models/llama-3-8b-shape --graphs on \
    --batch 1,64,128 --context 512 --steps 32 > $OUT/steps-8b-$b-2.txt 2>&1
  echo $b; python3 $bt/steps.py $OUT/steps-8b-$b-2.txt
done

#!/usr/bin/env bash
# Call 1b (run right after call 1a, on the same H100): the decode
# attention ring (ring: 009ef2b's kernels, in this session's step_bench
# build `prompts` and 009ef2b's isobench) against the kernel before it
# (base: 21d8b13's build) on the 1B shape: decode steps, then serving
# A/B at 128 with ab.sh (builds alternated, 2,048 measured requests).
set -u; R=$OUT/c1b; mkdir -p $R/ab; bt=docs/results/gpu-2026-12-06/block-tables
for b in base ring prompts; do (cd .gpu/$b && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done); done
echo "== step_bench 1B $(date +%T)"
for b in base ring; do
  s=.gpu/$b/step_bench; [ $b = ring ] && s=.gpu/prompts/step_bench
  timeout 100 $s --device cuda:0 --dtype bf16 --model models/llama-3.2-1b-shape --graphs on --batch 1,64,128 \
    --context 512 --steps 32 > $R/steps-1b-$b.txt 2>&1
  echo $b; python3 $bt/steps.py $R/steps-1b-$b.txt
done
echo "== serving A/B $(date +%T)"
BINS="base ring" MODELS="models/llama-3.2-1b-shape" timeout 240 bash $bt/ab.sh $R/ab 2048 2 continuous:batched \
  dynamic:batched continuous:short 2>&1 | tee $OUT/call1b.log
echo "== done $(date +%T)"

#!/usr/bin/env bash
# Decode attention taking a row's KV heads in consecutive blocks (hf)
# against main: gpu_kernels (correctness and attention timing) of both,
# then step times alternated.
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for d in main hf; do for n in step_bench gpu_kernels; do
    xz -dc .gpu/$d/$n.xz > /tmp/$n-$d && chmod +x /tmp/$n-$d
done; done
for d in hf; do
    /tmp/gpu_kernels-$d > $OUT/gpu_kernels-$d.txt 2>&1
    echo "== gpu_kernels $d rc=$? $(grep -c '^PASS' $OUT/gpu_kernels-$d.txt) PASS, $(grep -c '^FAIL' $OUT/gpu_kernels-$d.txt) FAIL ${SECONDS}s"
    grep -E '^(FAIL|GPU KERNELS)' $OUT/gpu_kernels-$d.txt | head -5
    grep -E '^(decode attention|  batch)' $OUT/gpu_kernels-$d.txt
done
for spec in llama-3.2-1b-shape:128:2 llama-3-8b-shape:128:1; do
  IFS=: read -r model ctx rounds <<<"$spec"
  [ "$SECONDS" -gt 150 ] && { echo "stopping at ${SECONDS}s: $spec not run"; break; }
  for round in $(seq 1 $rounds); do for b in main hf; do
    echo "== $model context $ctx round $round $b"
    /tmp/step_bench-$b --device cuda:0 --dtype bf16 --model models/$model --graphs on --batch 1,8,64,128 --context $ctx --steps 32 \
        > /tmp/steps.txt 2>&1
    grep -E '^ +[0-9]+ ' /tmp/steps.txt
  done; done
  echo "${SECONDS}s"
done

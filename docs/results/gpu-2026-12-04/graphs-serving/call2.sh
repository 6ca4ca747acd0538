#!/usr/bin/env bash
# Call 2: the same grid again, graphs off first, then on: the 1B shape's serving grid
# (continuous and dynamic; short, batched, chat; concurrency 1,8,32,128;
# 4 rounds); then the 8B shape, continuous batching, short and chat at
# concurrency 1, 32 and 128, 2 rounds, graphs on, then off.
set -u
R=/tmp/c2; mkdir -p $R
(cd .gpu && xz -dkf isobench.xz && chmod +x isobench)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee $R/gpu.txt
for g in off on; do
  scripts/gpu-bench.sh --part serving-1b $R/graphs-$g --policy continuous,dynamic \
    --workloads short,batched,chat --concurrency 1,8,32,128 --turns 4 --budget 200 \
    --cuda-graphs $g > $R/graphs-$g.log 2>&1
  echo "== graphs $g rc=$? at ${SECONDS}s"; tail -40 $R/graphs-$g/serving-1b-summary.txt
done
for g in on off; do
  scripts/gpu-bench.sh --part serving-8b $R/8b-graphs-$g --policy continuous \
    --workloads short,chat --concurrency 1,32,128 --turns 2 --budget 110 \
    --cuda-graphs $g > $R/8b-graphs-$g.log 2>&1
  echo "== 8B graphs $g rc=$? at ${SECONDS}s"; head -8 $R/8b-graphs-$g/serving-8b-summary.txt; grep -A2 "step phases" $R/8b-graphs-$g/serving-8b-summary.txt
done
tar -czf $OUT/c2.tar.gz -C /tmp c2

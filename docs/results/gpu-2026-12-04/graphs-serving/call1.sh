#!/usr/bin/env bash
# Call 1: check-server on this build, then the 1B shape's serving grid
# (continuous and dynamic; short, batched, chat; concurrency 1,8,32,128;
# 4 rounds) with CUDA graphs on, then off.
set -u
R=/tmp/c1; mkdir -p $R
(cd .gpu && xz -dkf isobench.xz && chmod +x isobench)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee $R/gpu.txt
scripts/gpu-bench.sh --part check-server $R/checks > $R/check-server.log 2>&1; echo "check-server rc=$? at ${SECONDS}s"
grep -E "PASS|FAIL|preempt" $R/check-server.log | cut -c1-200 | tail -8
for g in on off; do
  scripts/gpu-bench.sh --part serving-1b $R/graphs-$g --policy continuous,dynamic \
    --workloads short,batched,chat --concurrency 1,8,32,128 --turns 4 --budget 200 \
    --cuda-graphs $g > $R/graphs-$g.log 2>&1
  echo "== graphs $g rc=$? at ${SECONDS}s"; tail -40 $R/graphs-$g/serving-1b-summary.txt
done
tar -czf $OUT/c1.tar.gz -C /tmp c1

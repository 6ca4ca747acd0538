#!/usr/bin/env bash
# Call 3: the build that reads a step's device time after its logits:
# check-server, then the 1B shape (continuous and dynamic; short and chat
# at 1, 32 and 128; 4 rounds) with graphs on and off, and the 8B shape
# (continuous, short at 32 and 128, 2 rounds) with graphs on: do the
# engine's phases now add up to the step's device time?
set -u
R=/tmp/c3; mkdir -p $R
(cd .gpu && xz -dkf isobench.xz && chmod +x isobench)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee $R/gpu.txt
scripts/gpu-bench.sh --part check-server $R/checks > $R/check-server.log 2>&1; echo "check-server rc=$? at ${SECONDS}s"
grep -E "PASS|FAIL" $R/check-server.log | cut -c1-200
for g in on off; do
  scripts/gpu-bench.sh --part serving-1b $R/1b-graphs-$g --policy continuous,dynamic \
    --workloads short,chat --concurrency 1,32,128 --turns 4 --budget 150 \
    --cuda-graphs $g > $R/1b-graphs-$g.log 2>&1
  echo "== 1B graphs $g rc=$? at ${SECONDS}s"; sed -n '/^workload/,$p' $R/1b-graphs-$g/serving-1b-summary.txt
done
scripts/gpu-bench.sh --part serving-8b $R/8b-graphs-on --policy continuous \
  --workloads short --concurrency 32,128 --turns 2 --budget 120 > $R/8b-graphs-on.log 2>&1
echo "== 8B graphs on rc=$? at ${SECONDS}s"; sed -n '/^workload/,$p' $R/8b-graphs-on/serving-8b-summary.txt
tar -czf $OUT/c3.tar.gz -C /tmp c3

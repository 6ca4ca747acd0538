#!/usr/bin/env bash
# Call 5: batched at 64/128, continuous vs dynamic, 12 measured rounds.
set -u
R=$OUT/c5; mkdir -p $R/1b $R/8b
(cd .gpu/new && for f in *.xz; do [ -x ${f%.xz} ] || { xz -dkf $f && chmod +x ${f%.xz}; }; done)
GPU_BENCH_BIN=.gpu/new scripts/gpu-bench.sh --part serving-1b $R/1b --policy continuous,dynamic \
  --workloads batched --concurrency 64,128 --turns 12 --budget 200 > $R/1b.log 2>&1
grep -E "^batched|c=" $R/1b/serving-1b-summary.txt
GPU_BENCH_BIN=.gpu/new scripts/gpu-bench.sh --part serving-8b $R/8b --policy continuous,dynamic \
  --workloads batched --concurrency 64,128 --turns 12 --budget 250 > $R/8b.log 2>&1
grep -E "^batched|c=" $R/8b/serving-8b-summary.txt

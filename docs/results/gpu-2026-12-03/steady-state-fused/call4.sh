#!/usr/bin/env bash
# Call 4: 1B serving grid on the fused build, three policies, steady state.
set -u
R=$OUT/c4; mkdir -p $R
(cd .gpu/new && for f in *.xz; do [ -x ${f%.xz} ] || { xz -dkf $f && chmod +x ${f%.xz}; }; done)
GPU_BENCH_BIN=.gpu/new scripts/gpu-bench.sh --part serving-1b $R --policy continuous,dynamic,static \
  --workloads short,long,batched,chat --concurrency 8,32,128 --turns 2 --budget 440 > $R/serving.log 2>&1
cat $R/serving-1b-summary.txt

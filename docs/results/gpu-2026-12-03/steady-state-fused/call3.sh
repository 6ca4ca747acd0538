#!/usr/bin/env bash
# Call 3: 8B serving on the fused build, three policies, steady state.
set -u
R=$OUT/c3; mkdir -p $R
(cd .gpu/new && for f in *.xz; do [ -x ${f%.xz} ] || { xz -dkf $f && chmod +x ${f%.xz}; }; done)
GPU_BENCH_BIN=.gpu/new scripts/gpu-bench.sh --part serving-8b $R --policy continuous,dynamic,static \
  --workloads batched,short,chat --concurrency 32,128 --turns 2 --budget 470 > $R/serving.log 2>&1
cat $R/serving-8b-summary.txt

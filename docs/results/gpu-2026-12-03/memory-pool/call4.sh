#!/usr/bin/env bash
# Session 4 call 4: check-model with the fused-fallback check, then the 1B grid on this build
# (build fcheck = ac4bd2a's memory pool + the fused-fallback count).
set -u
R=/tmp/r4; mkdir -p $R
(cd .gpu/fcheck && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done)
GPU_BENCH_BIN=.gpu/fcheck scripts/gpu-bench.sh --part check-model $R/checks > $R/check-model.log 2>&1; echo "check-model rc=$?"
grep -E "PASS|FAIL" $R/check-model.log | tr ';' '\n' | grep -E "fused|FAIL|GPU CHECKS"
GPU_BENCH_BIN=.gpu/fcheck scripts/gpu-bench.sh --part serving-1b $R/grid --policy continuous,dynamic,static \
  --workloads short,long,batched,chat --concurrency 1,8,32,64,128 --turns 2 --budget 190 > $R/grid.log 2>&1
cat $R/grid/serving-1b-summary.txt
tar -cf $OUT/r4.tar -C /tmp r4

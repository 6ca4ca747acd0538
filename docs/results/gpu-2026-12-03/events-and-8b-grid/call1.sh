#!/usr/bin/env bash
# Call 1: checks on the new build (parallel token sending, fused fallback-count check),
# A/B old (576ff21) vs new on the 1B shape, then the 8B grid's continuous runs.
set -u
R=/tmp/r1; mkdir -p $R
for d in old new; do (cd .gpu/$d && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done); done
for part in check-kernels check-model check-server; do
  GPU_BENCH_BIN=.gpu/new scripts/gpu-bench.sh --part $part $R/checks > $R/$part.log 2>&1; echo "$part rc=$? at ${SECONDS}s"
done
grep -E "fallback count|FAIL|GPU KERNELS|GPU CHECKS" $R/check-*.log | cut -c1-220
for round in 1 2; do for b in old new; do
  GPU_BENCH_BIN=.gpu/$b scripts/gpu-bench.sh --part serving-1b $R/ab-$b-$round --policy continuous \
    --workloads batched,short --concurrency 128 --turns 6 > $R/ab-$b-$round.log 2>&1
  echo "== 1B $b round $round at ${SECONDS}s"; grep -E "^(batched|short) |continuous  sched" $R/ab-$b-$round/serving-1b-summary.txt
done; done
GPU_BENCH_BIN=.gpu/new scripts/gpu-bench.sh --part serving-8b $R/grid-c --policy continuous \
  --workloads short,long,batched,chat --concurrency 1,8,32,64,128 --turns 2 --budget $((560 - SECONDS - 50)) > $R/grid-c.log 2>&1
echo "grid at ${SECONDS}s"; grep -E "gpu-bench [0-9]+s" $R/grid-c.log | tail -25
cat $R/grid-c/serving-8b-summary.txt
tar -cf $OUT/r1.tar -C /tmp r1

#!/usr/bin/env bash
# Session 4 call 1: continuous policy's token budget 2048 / 4096 / 8192 against dynamic.
set -u
R=$OUT/b; mkdir -p $R
(cd .gpu/new && for f in *.xz; do [ -x ${f%.xz} ] || { xz -dkf $f && chmod +x ${f%.xz}; }; done)
for b in 2048 8192 4096; do
  GPU_BENCH_BIN=.gpu/new scripts/gpu-bench.sh --part serving-1b $R/1b-$b --policy continuous \
    --workloads batched,short,long,chat --concurrency 32,128 --turns 6 --budget 200 --max-num-batched-tokens $b > $R/1b-$b.log 2>&1
  echo "== 1B budget $b"; grep -E "^(batched|short|long|chat) " $R/1b-$b/serving-1b-summary.txt
done
GPU_BENCH_BIN=.gpu/new scripts/gpu-bench.sh --part serving-1b $R/1b-dyn --policy dynamic \
  --workloads batched,short,long,chat --concurrency 32,128 --turns 6 --budget 200 > $R/1b-dyn.log 2>&1
echo "== 1B dynamic"; grep -E "^(batched|short|long|chat) " $R/1b-dyn/serving-1b-summary.txt
for b in 8192 2048; do
  GPU_BENCH_BIN=.gpu/new scripts/gpu-bench.sh --part serving-8b $R/8b-$b --policy continuous \
    --workloads batched --concurrency 64,128 --turns 12 --budget 200 --max-num-batched-tokens $b > $R/8b-$b.log 2>&1
  echo "== 8B budget $b"; grep -E "^(batched|short|long|chat) " $R/8b-$b/serving-8b-summary.txt
done
GPU_BENCH_BIN=.gpu/new scripts/gpu-bench.sh --part serving-8b $R/8b-dyn --policy dynamic \
  --workloads batched --concurrency 64,128 --turns 12 --budget 200 > $R/8b-dyn.log 2>&1
echo "== 8B dynamic"; grep -E "^(batched|short|long|chat) " $R/8b-dyn/serving-8b-summary.txt

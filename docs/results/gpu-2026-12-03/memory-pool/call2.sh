#!/usr/bin/env bash
# Session 4 call 2: the memory pool keeping freed memory (pool) against the build before it (new = 2c094dc's).
set -u
R=/tmp/r; mkdir -p $R
for d in new pool; do (cd .gpu/$d && for f in *.xz; do [ -x ${f%.xz} ] || { xz -dkf $f && chmod +x ${f%.xz}; }; done); done
# eager steps with 2048-token prefills, builds alternated
for round in 1 2; do for d in new pool; do
  .gpu/$d/step_bench --device cuda:0 --dtype bf16 --model models/llama-3.2-1b-shape --graphs off --batch 8,128 --context 2048 --steps 16 > $R/step-1b-$d-$round.txt 2>&1
  echo "== 1B $d $round"; grep -v '^{' $R/step-1b-$d-$round.txt | tail -6
done; done
for d in new pool; do
  .gpu/$d/step_bench --device cuda:0 --dtype bf16 --model models/llama-3-8b-shape --graphs off --batch 8,64 --context 2048 --steps 8 > $R/step-8b-$d.txt 2>&1
  echo "== 8B $d"; grep -v '^{' $R/step-8b-$d.txt | tail -6
done
for d in pool new; do
  GPU_BENCH_BIN=.gpu/$d scripts/gpu-bench.sh --part serving-8b $R/8b-$d --policy continuous,dynamic \
    --workloads batched --concurrency 64,128 --turns 12 --budget 200 > $R/8b-$d.log 2>&1
  echo "== 8B serving $d"; grep -E "^(batched|short|long|chat) |^  (continuous|dynamic) " $R/8b-$d/serving-8b-summary.txt
done
GPU_BENCH_BIN=.gpu/pool scripts/gpu-bench.sh --part serving-1b $R/1b-pool --policy continuous,dynamic \
  --workloads batched,short --concurrency 32,128 --turns 6 --budget 150 > $R/1b-pool.log 2>&1
echo "== 1B serving pool"; grep -E "^(batched|short|long|chat) |^  (continuous|dynamic) " $R/1b-pool/serving-1b-summary.txt
tar -cf $OUT/r.tar -C /tmp r

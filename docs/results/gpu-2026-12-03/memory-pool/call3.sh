#!/usr/bin/env bash
# Session 4 call 3: checks on the pool build; batched at 64/128 again, builds alternated.
set -u
R=/tmp/r3; mkdir -p $R
for d in new pool; do (cd .gpu/$d && for f in *.xz; do [ -x ${f%.xz} ] || { xz -dkf $f && chmod +x ${f%.xz}; }; done); done
GPU_BENCH_BIN=.gpu/pool scripts/gpu-bench.sh --part check-model $R/checks > $R/check-model.log 2>&1; echo "check-model rc=$?"; tail -4 $R/check-model.log
GPU_BENCH_BIN=.gpu/pool scripts/gpu-bench.sh --part check-server $R/checks > $R/check-server.log 2>&1; echo "check-server rc=$?"; tail -4 $R/check-server.log
for d in new pool; do
  GPU_BENCH_BIN=.gpu/$d scripts/gpu-bench.sh --part serving-1b $R/1b-$d --policy continuous,dynamic \
    --workloads batched --concurrency 64,128 --turns 12 --budget 100 > $R/1b-$d.log 2>&1
  echo "== 1B serving $d"; grep -E "^(batched) |^  (continuous|dynamic) " $R/1b-$d/serving-1b-summary.txt
done
for d in new pool; do
  GPU_BENCH_BIN=.gpu/$d scripts/gpu-bench.sh --part serving-8b $R/8b-$d --policy continuous,dynamic \
    --workloads batched --concurrency 128 --turns 12 --budget 150 > $R/8b-$d.log 2>&1
  echo "== 8B serving $d"; grep -E "^(batched) |^  (continuous|dynamic) " $R/8b-$d/serving-8b-summary.txt
done
tar -cf $OUT/r3.tar -C /tmp r3

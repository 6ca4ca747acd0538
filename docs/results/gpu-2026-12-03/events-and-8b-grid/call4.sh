#!/usr/bin/env bash
# Call 4: the outbox build (events sent after the next step's launch) against the old build (576ff21):
# check-server on it, then 1B batched and short at 128 (continuous, 6 turns), builds alternated twice,
# then the 8B shape's batched at 128 once each.
set -u
R=/tmp/r4; mkdir -p $R
for d in old outbox; do (cd .gpu/$d && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done); done
GPU_BENCH_BIN=.gpu/outbox scripts/gpu-bench.sh --part check-server $R/checks > $R/check-server.log 2>&1; echo "check-server rc=$? at ${SECONDS}s"
grep -E "PASS|FAIL|GPU CHECKS" $R/check-server.log | cut -c1-200
for round in 1 2; do for b in old outbox; do
  GPU_BENCH_BIN=.gpu/$b scripts/gpu-bench.sh --part serving-1b $R/ab-$b-$round --policy continuous \
    --workloads batched,short --concurrency 128 --turns 6 > $R/ab-$b-$round.log 2>&1
  echo "== 1B $b round $round at ${SECONDS}s"; grep -E "^(batched|short) |continuous  sched" $R/ab-$b-$round/serving-1b-summary.txt
done; done
for b in old outbox; do
  GPU_BENCH_BIN=.gpu/$b scripts/gpu-bench.sh --part serving-8b $R/ab8-$b --policy continuous \
    --workloads batched,short --concurrency 128 --turns 4 > $R/ab8-$b.log 2>&1
  echo "== 8B $b at ${SECONDS}s"; grep -E "^(batched|short) |continuous  sched" $R/ab8-$b/serving-8b-summary.txt
done
tar -cf $OUT/r4.tar -C /tmp r4

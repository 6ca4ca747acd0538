#!/usr/bin/env bash
# Call 6: outbox2 (events sent before steps with prompt tokens, after decode steps' launch)
# against the old build (576ff21): check-server, then call 4's 1B A/B, two rounds.
set -u
R=/tmp/r6; mkdir -p $R
for d in old outbox2; do (cd .gpu/$d && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done); done
GPU_BENCH_BIN=.gpu/outbox2 scripts/gpu-bench.sh --part check-server $R/checks > $R/check-server.log 2>&1; echo "check-server rc=$? at ${SECONDS}s"
grep -E "PASS|FAIL|GPU CHECKS" $R/check-server.log | cut -c1-200
for round in 1 2; do for b in outbox2 old; do
  GPU_BENCH_BIN=.gpu/$b scripts/gpu-bench.sh --part serving-1b $R/ab-$b-$round --policy continuous \
    --workloads batched,short --concurrency 128 --turns 6 > $R/ab-$b-$round.log 2>&1
  echo "== 1B $b round $round at ${SECONDS}s"; grep -E "^(batched|short) |continuous  sched" $R/ab-$b-$round/serving-1b-summary.txt
done; done
tar -cf $OUT/r6.tar -C /tmp r6

#!/usr/bin/env bash
# Call 5: rounds 3 and 4 of call 4's 1B A/B (old 576ff21 against outbox), alternated.
set -u
R=/tmp/r5; mkdir -p $R
for d in old outbox; do (cd .gpu/$d && for f in *.xz; do [ -x ${f%.xz} ] || { xz -dkf $f && chmod +x ${f%.xz}; }; done); done
for round in 3 4; do for b in outbox old; do
  GPU_BENCH_BIN=.gpu/$b scripts/gpu-bench.sh --part serving-1b $R/ab-$b-$round --policy continuous \
    --workloads batched,short --concurrency 128 --turns 6 > $R/ab-$b-$round.log 2>&1
  echo "== 1B $b round $round at ${SECONDS}s"; grep -E "^(batched|short) |continuous  sched" $R/ab-$b-$round/serving-1b-summary.txt
done; done
tar -cf $OUT/r5.tar -C /tmp r5

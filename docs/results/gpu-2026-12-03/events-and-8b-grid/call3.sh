#!/usr/bin/env bash
# Call 3: the 8B grid, continuous, on the old build (576ff21).
set -u
R=/tmp/r3; mkdir -p $R
(cd .gpu/old && for f in *.xz; do [ -x ${f%.xz} ] || { xz -dkf $f && chmod +x ${f%.xz}; }; done)
GPU_BENCH_BIN=.gpu/old scripts/gpu-bench.sh --part serving-8b $R/grid-static --policy ${POLICY:-static} \
  --workloads ${WORKLOADS:-short,long,batched,chat} --concurrency ${CONC:-1,8,32,64,128} --turns 2 --budget ${BUDGET:-520} > $R/grid-static.log 2>&1
echo "grid at ${SECONDS}s"; grep -E "gpu-bench [0-9]+s" $R/grid-static.log | tail -25
cat $R/grid-static/serving-8b-summary.txt
tar -cf $OUT/r3.tar -C /tmp r3

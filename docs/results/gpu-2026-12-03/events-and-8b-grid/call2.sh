#!/usr/bin/env bash
# Call 2: the 8B grid, dynamic and static, on the old build (576ff21; the parallel token sending was not kept).
set -u
R=/tmp/r2; mkdir -p $R
(cd .gpu/old && for f in *.xz; do [ -x ${f%.xz} ] || { xz -dkf $f && chmod +x ${f%.xz}; }; done)
GPU_BENCH_BIN=.gpu/old scripts/gpu-bench.sh --part serving-8b $R/grid-dynamic --policy ${POLICY:-dynamic} \
  --workloads ${WORKLOADS:-short,long,batched,chat} --concurrency ${CONC:-1,8,32,64,128} --turns 2 --budget ${BUDGET:-520} > $R/grid-dynamic.log 2>&1
echo "grid at ${SECONDS}s"; grep -E "gpu-bench [0-9]+s" $R/grid-dynamic.log | tail -25
cat $R/grid-dynamic/serving-8b-summary.txt
tar -cf $OUT/r2.tar -C /tmp r2

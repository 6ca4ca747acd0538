#!/usr/bin/env bash
# Call 7: check-server on the final build (events after a decode graph's launch, before any other step).
set -u
R=/tmp/r7; mkdir -p $R
(cd .gpu/final && xz -dkf isobench.xz && chmod +x isobench)
GPU_BENCH_BIN=.gpu/final scripts/gpu-bench.sh --part check-server $R/checks > $R/check-server.log 2>&1; echo "check-server rc=$?"
grep -E "PASS|FAIL|GPU CHECKS" $R/check-server.log | cut -c1-200
cp $R/check-server.log $OUT/

#!/usr/bin/env bash
# The load generator's benchmark against the built-in mock (issue 2,
# "Performance"): highest sustained open-loop Poisson rate, TTFT/ITL
# measurement error at 1,000 req/s, streamed tokens/s ingested.
# Prints figures; asserts nothing. Takes about a minute after the build.
#
# The figures are only meaningful on an otherwise idle machine: on a
# 2-core box any other busy process shows up as dispatch lag.
#
# Environment: ISOBENCH_BENCH_SECONDS (per step, default 2),
# ISOBENCH_BENCH_CLIENT_THREADS (default 1), ISOBENCH_BENCH_TRIALS (default 3),
# ISOBENCH_BENCH_RATES (comma-separated req/s), ISOBENCH_BENCH_PARTS
# (rate,accuracy,ingest).
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo bench -p isobench-loadgen --bench loadgen

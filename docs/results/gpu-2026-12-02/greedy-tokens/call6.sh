#!/usr/bin/env bash
set -u
R=$OUT/gpu; mkdir -p $R
GPU_BENCH_BIN=.gpu/b scripts/gpu-bench.sh --part serving-1b /tmp/c1 --policy continuous --workloads chat,short --concurrency 1 > /tmp/c1.log 2>&1
cp /tmp/c1/serving-1b-summary.txt $R/chat-1b-summary.txt; cp /tmp/c1/serving-1b.tar.gz $R/chat-1b.tar.gz; cat $R/chat-1b-summary.txt
GPU_BENCH_BIN=.gpu/b scripts/gpu-bench.sh --part serving-8b /tmp/c8 --policy continuous --workloads chat --concurrency 1 > /tmp/c8.log 2>&1
cp /tmp/c8/serving-8b-summary.txt $R/chat-8b-summary.txt; cp /tmp/c8/serving-8b.tar.gz $R/chat-8b.tar.gz; cat $R/chat-8b-summary.txt

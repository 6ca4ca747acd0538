#!/usr/bin/env bash
set -u
R=$OUT/gpu; mkdir -p $R
i=0
for b in b c b c; do
  i=$((i+1))
  GPU_BENCH_BIN=.gpu/$b scripts/gpu-bench.sh --part serving-1b /tmp/s-$i --policy continuous --workloads chat --concurrency 1,8 > /tmp/s-$i.log 2>&1
  cp /tmp/s-$i/serving-1b-summary.txt $R/chat-1b-$i-$b.txt
  echo "== 1B run $i, build $b"; sed -n '4,6p;9p' $R/chat-1b-$i-$b.txt
done
cp /tmp/s-4/serving-1b.tar.gz $R/chat-1b-4-c.tar.gz
GPU_BENCH_BIN=.gpu/c scripts/gpu-bench.sh --part serving-8b /tmp/s8 --policy continuous --workloads chat --concurrency 1 > /tmp/s8.log 2>&1
cp /tmp/s8/serving-8b-summary.txt $R/chat-8b-c.txt; cp /tmp/s8/serving-8b.tar.gz $R/chat-8b-c.tar.gz
echo "== 8B, build c"; sed -n '4,5p;8p' $R/chat-8b-c.txt

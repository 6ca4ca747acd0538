#!/usr/bin/env bash
set -u
R=$OUT/gpu; mkdir -p $R
for d in .gpu/a .gpu/b; do (cd $d && for f in *.xz; do xz -dkf "$f"; chmod +x "${f%.xz}"; done); done
i=0
for b in a b a b; do
  i=$((i+1))
  GPU_BENCH_BIN=.gpu/$b scripts/gpu-bench.sh --part serving-1b /tmp/s1-$i-$b --policy continuous --workloads short,long --concurrency 1,8,32 > /tmp/s1-$i-$b.log 2>&1
  cp /tmp/s1-$i-$b/serving-1b-summary.txt $R/serving-1b-$i-$b.txt; cp /tmp/s1-$i-$b/serving-1b.tar.gz $R/serving-1b-$i-$b.tar.gz
  echo "== 1B run $i, build $b"; sed -n '4,10p' $R/serving-1b-$i-$b.txt
done
for b in a b; do
  GPU_BENCH_BIN=.gpu/$b scripts/gpu-bench.sh --part serving-8b /tmp/s8-$b --policy continuous --workloads short --concurrency 1,8 > /tmp/s8-$b.log 2>&1
  cp /tmp/s8-$b/serving-8b-summary.txt $R/serving-8b-$b.txt; cp /tmp/s8-$b/serving-8b.tar.gz $R/serving-8b-$b.tar.gz
  echo "== 8B, build $b"; sed -n '4,10p' $R/serving-8b-$b.txt
done

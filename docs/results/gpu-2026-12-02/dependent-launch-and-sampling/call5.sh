#!/usr/bin/env bash
set -u
R=$OUT/gpu; mkdir -p $R
for d in .gpu/a .gpu/n; do (cd $d && for f in *.xz; do xz -dkf "$f"; chmod +x "${f%.xz}"; done); done
GPU_BENCH_BIN=.gpu/n scripts/gpu-bench.sh --part checks /tmp/ck > /tmp/ck.log 2>&1; echo "checks rc $?"
cp /tmp/ck/checks-summary.txt $R/ 2>/dev/null; grep -E "PASS|FAIL|OK" /tmp/ck/checks-summary.txt | cut -c1-300 | tail -30
cp "$(find /tmp/gpu-bench.* -name gpu_kernels.txt | head -1)" $R/gpu_kernels.txt
grep -A4 '^sampled tokens of' $R/gpu_kernels.txt
for b in a n; do
GPU_BENCH_BIN=.gpu/$b timeout 150 scripts/gpu-bench.sh --part serving-1b /tmp/s-$b --policy continuous --workloads chat,short --concurrency 1,8 > /tmp/s-$b.log 2>&1; echo "serving $b rc $?"
cp /tmp/s-$b/serving-1b-summary.txt $R/serving-1b-$b-summary.txt 2>/dev/null; grep -E "^(chat|short) |continuous  schedule" $R/serving-1b-$b-summary.txt 2>/dev/null || tail -5 /tmp/s-$b.log
done
GPU_BENCH_BIN=.gpu/n timeout 150 scripts/gpu-bench.sh --part serving-8b /tmp/s8 --policy continuous --workloads chat --concurrency 1,8 > /tmp/s8.log 2>&1; echo "serving 8b rc $?"
cp /tmp/s8/serving-8b-summary.txt $R/serving-8b-n-summary.txt 2>/dev/null; grep -E "^(chat|short) |continuous  schedule" $R/serving-8b-n-summary.txt 2>/dev/null || tail -5 /tmp/s8.log

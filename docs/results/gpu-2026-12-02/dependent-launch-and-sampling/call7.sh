#!/usr/bin/env bash
set -u
R=$OUT/gpu; mkdir -p $R
for d in .gpu/v1 .gpu/v2; do (cd $d && for f in *.xz; do xz -dkf "$f"; chmod +x "${f%.xz}"; done); done
for r in 1 2; do for b in v1 v2; do
  .gpu/$b/gpu_kernels > $R/gpu_kernels-$b-$r.txt 2>&1; echo "== $b rc $?: $(grep -c '^PASS' $R/gpu_kernels-$b-$r.txt) PASS, $(grep -c '^FAIL' $R/gpu_kernels-$b-$r.txt) FAIL"
  grep -E '^FAIL' $R/gpu_kernels-$b-$r.txt | head -3 | cut -c1-300; grep -A3 '^sampled tokens of' $R/gpu_kernels-$b-$r.txt | tail -3
done; done
for b in v1 v2; do
GPU_BENCH_BIN=.gpu/$b timeout 130 scripts/gpu-bench.sh --part serving-1b /tmp/s-$b --policy continuous --workloads chat --concurrency 1,8 > /tmp/s-$b.log 2>&1; echo "serving $b rc $?"
cp /tmp/s-$b/serving-1b-summary.txt $R/serving-1b-$b-summary.txt 2>/dev/null; grep -E "^(chat|short) |continuous  schedule" $R/serving-1b-$b-summary.txt 2>/dev/null || tail -5 /tmp/s-$b.log
done
GPU_BENCH_BIN=.gpu/v2 timeout 100 scripts/gpu-bench.sh --part check-server /tmp/cs > /tmp/cs.log 2>&1; echo "check-server rc $?"; grep -E "PASS|FAIL" /tmp/cs.log | tail -5 | tee $R/check-server-v2.txt

#!/usr/bin/env bash
set -u
R=$OUT/gpu; mkdir -p $R
for d in .gpu/v2 .gpu/v3a .gpu/v3c; do (cd $d && xz -dkf gpu_kernels.xz && chmod +x gpu_kernels); done
for r in 1 2; do for b in v2 v3a v3c; do
  .gpu/$b/gpu_kernels > $R/gpu_kernels-$b-$r.txt 2>&1; echo "== $b rc $?: $(grep -c '^PASS' $R/gpu_kernels-$b-$r.txt) PASS, $(grep -c '^FAIL' $R/gpu_kernels-$b-$r.txt) FAIL"
  grep -A3 '^sampled tokens of' $R/gpu_kernels-$b-$r.txt | tail -3
done; done

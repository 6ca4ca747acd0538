#!/usr/bin/env bash
set -u
R=$OUT/gpu; mkdir -p $R
for d in .gpu/v2 .gpu/v3; do (cd $d && for f in *.xz; do xz -dkf "$f"; chmod +x "${f%.xz}"; done); done
M1=models/llama-3.2-1b-shape
for b in v2 v3; do
  echo "== $b, CUDA_CACHE_DISABLE=1 (every PTX module compiled at load)"
  s=$(date +%s.%N)
  CUDA_CACHE_DISABLE=1 .gpu/$b/step_bench --device cuda:0 --dtype bf16 --model $M1 --graphs on --batch 1 --context 512 --steps 16 2>&1 | grep -E '^ *1 |loaded'
  echo "process wall s: $(echo "$(date +%s.%N) - $s" | bc)"
done 2>&1 | tee $R/cold.txt
.gpu/v3/gpu_kernels > $R/v3-gpu_kernels.txt 2>&1; echo "gpu_kernels rc $?: $(grep -c '^PASS' $R/v3-gpu_kernels.txt) PASS, $(grep -c '^FAIL' $R/v3-gpu_kernels.txt) FAIL"
.gpu/v3/step_bench --check --device cuda:0 --model $M1 > $R/v3-check-1b.txt 2>&1; echo "check rc $?"; grep -E "^(PASS|FAIL)" $R/v3-check-1b.txt | cut -c1-120

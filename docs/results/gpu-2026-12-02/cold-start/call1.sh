#!/usr/bin/env bash
set -u
R=$OUT/gpu; mkdir -p $R
for d in .gpu/v2 .gpu/v3; do (cd $d && for f in *.xz; do xz -dkf "$f"; chmod +x "${f%.xz}"; done); done
M1=models/llama-3.2-1b-shape
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $R/smi.txt
which nsys ncu | tee -a $R/smi.txt
for b in v2 v3; do
  echo "== $b, CUDA_CACHE_DISABLE=1 (every PTX module compiled at load)"
  s=$(date +%s.%N)
  CUDA_CACHE_DISABLE=1 .gpu/$b/step_bench --device cuda:0 --dtype bf16 --model $M1 --graphs on --batch 1 --context 512 --steps 16 2>&1 | grep -E '^ *1 |load|prefill'
  echo "process wall s: $(echo "$(date +%s.%N) - $s" | bc)"
done 2>&1 | tee $R/cold.txt
.gpu/v3/gpu_kernels > $R/v3-gpu_kernels.txt 2>&1; echo "gpu_kernels rc $?: $(grep -c '^PASS' $R/v3-gpu_kernels.txt) PASS, $(grep -c '^FAIL' $R/v3-gpu_kernels.txt) FAIL"
.gpu/v3/step_bench --check --device cuda:0 --model $M1 > $R/v3-check-1b.txt 2>&1; echo "check rc $?"; grep -E "^(PASS|FAIL)" $R/v3-check-1b.txt | cut -c1-120
for b in v2 v3 v2 v3; do echo "== $b"; .gpu/$b/step_bench --device cuda:0 --dtype bf16 --model $M1 --graphs both --batch 1 --context 512 --steps 64 2>&1 | grep -E '^ *1 '; done | tee $R/ab1.txt
if which nsys >/dev/null; then
  nsys profile --cuda-graph-trace=node -o $R/nsys1b .gpu/v3/step_bench --device cuda:0 --dtype bf16 --model $M1 --graphs on --batch 1 --context 512 --steps 8 > $R/nsys-run.txt 2>&1
  nsys stats --report cuda_gpu_trace --format csv -o $R/trace1b $R/nsys1b.nsys-rep > /dev/null 2>&1
  ls -la $R; rm -f $R/nsys1b.sqlite
fi

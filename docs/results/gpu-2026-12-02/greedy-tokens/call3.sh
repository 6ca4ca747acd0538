#!/usr/bin/env bash
set -u
R=$OUT/gpu; mkdir -p $R
for d in .gpu/a .gpu/b; do (cd $d && for f in *.xz; do xz -dkf "$f"; chmod +x "${f%.xz}"; done); done
M1=models/llama-3.2-1b-shape; M8=models/llama-3-8b-shape
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/smi.txt
.gpu/b/gpu_kernels > $R/gpu_kernels.txt 2>&1; echo "gpu_kernels rc $?: $(grep -c '^PASS' $R/gpu_kernels.txt) PASS, $(grep -c '^FAIL' $R/gpu_kernels.txt) FAIL"
grep -E 'greedy|rows:' $R/gpu_kernels.txt
.gpu/b/step_bench --check --device cuda:0 --model $M1 > $R/check-1b.txt 2>&1; echo "check rc $?"; grep -cE "^PASS" $R/check-1b.txt; grep -E "^FAIL" $R/check-1b.txt
for b in a b a b; do echo "== $b"; .gpu/$b/step_bench --device cuda:0 --dtype bf16 --model $M1 --graphs both --batch 1,8,64 --context 512 --steps 64 2>&1 | grep -E '^ *[0-9]+ |^JSON' | sed -E 's/"bench".*"host_ms"/ host_ms/; s/,"kv_bytes".*//'; done | tee $R/ab1.txt
for b in a b; do
  GPU_BENCH_BIN=.gpu/$b scripts/gpu-bench.sh --part serving-1b $R/serve-$b --policy continuous --workloads short --concurrency 1,32 > $R/serve-$b.log 2>&1
  echo "== serving $b"; tail -n 12 $R/serve-$b/summary.txt 2>/dev/null || tail -n 5 $R/serve-$b.log
done

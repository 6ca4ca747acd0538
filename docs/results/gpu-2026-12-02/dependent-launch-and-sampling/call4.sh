#!/usr/bin/env bash
set -u
R=$OUT/gpu; mkdir -p $R
for d in .gpu/a .gpu/n; do (cd $d && for f in *.xz; do xz -dkf "$f"; chmod +x "${f%.xz}"; done); done
M1=models/llama-3.2-1b-shape; M8=models/llama-3-8b-shape
.gpu/n/gpu_kernels > $R/gpu_kernels.txt 2>&1; echo "gpu_kernels rc $?: $(grep -c '^PASS' $R/gpu_kernels.txt) PASS, $(grep -c '^FAIL' $R/gpu_kernels.txt) FAIL"; grep -E '^FAIL' $R/gpu_kernels.txt | head -5 | cut -c1-400; grep -A4 '^sampled tokens of' $R/gpu_kernels.txt
run() { .gpu/$1/step_bench --device cuda:0 --dtype bf16 --model $2 --graphs both --batch $3 --context 512 --steps 64 2>&1 | grep -E '^ *[0-9]+ |rror' ; }
for r in 1 2; do for b in a n; do echo "== 1B $b: $(run $b $M1 1)" ; done; done | tee $R/ab1.txt
for b in a n; do echo "== 8B $b: $(run $b $M8 1)"; done | tee $R/ab8.txt
for b in a n; do
GPU_BENCH_BIN=.gpu/$b timeout 200 scripts/gpu-bench.sh --part serving-1b /tmp/s-$b --policy continuous --workloads chat,short --concurrency 1,8 > /tmp/s-$b.log 2>&1; echo "serving $b rc $?"
cp /tmp/s-$b/serving-1b-summary.txt $R/serving-1b-$b-summary.txt 2>/dev/null; cp /tmp/s-$b/serving-1b.tar.gz $R/serving-1b-$b.tar.gz 2>/dev/null; grep -E "^(chat|short) |continuous  schedule" $R/serving-1b-$b-summary.txt 2>/dev/null || tail -5 /tmp/s-$b.log
done

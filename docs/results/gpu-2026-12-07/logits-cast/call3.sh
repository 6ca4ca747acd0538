#!/usr/bin/env bash
# Call 3 (prepared, not run): the logits' cast to f32 on a kernel of our
# own (logits-cast: branch next/logits-cast) against candle's cast (main:
# .gpu/ring's isobench and .gpu/main's step_bench, the same code but for
# the cast). gpu_kernels and the model and server checks on logits-cast,
# then decode steps of both builds alternated, then serving A/B at 128.
set -u
R=/tmp/c3; rm -rf $R; mkdir -p $R/ab
bt=docs/results/gpu-2026-12-06/block-tables
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for b in main ring logits-cast; do (cd .gpu/$b && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done); done
echo "== gpu_kernels (logits-cast) $(date +%T)"
.gpu/logits-cast/gpu_kernels > $R/gpu_kernels.txt 2>&1; echo "rc $?"
grep -cE '^PASS' $R/gpu_kernels.txt; grep -E '^FAIL' $R/gpu_kernels.txt | head -5; grep -E 'to_f32' $R/gpu_kernels.txt
echo "== check-model, check-server (logits-cast) $(date +%T)"
for part in check-model check-server; do
  GPU_BENCH_BIN=.gpu/logits-cast timeout 200 scripts/gpu-bench.sh --part $part $R/$part > $R/$part.log 2>&1
  echo "$part rc $?"; tail -6 $R/$part.log
done
echo "== decode steps $(date +%T)"
for round in 1 2; do for b in main logits-cast; do
  for m in llama-3.2-1b-shape llama-3-8b-shape; do
    timeout 150 .gpu/$b/step_bench --device cuda:0 --dtype bf16 --model models/$m --graphs on \
      --batch 1,32,128 --context 512 --steps 32 > $R/steps-$m-$b-$round.txt 2>&1 || echo "rc $?"
    echo "$b $m $round"; python3 $bt/steps.py $R/steps-$m-$b-$round.txt
  done
done; done
echo "== serving A/B $(date +%T)"
BINS="ring logits-cast" MODELS="models/llama-3.2-1b-shape" timeout 200 bash $bt/ab.sh $R/ab 2048 2 continuous:batched \
  dynamic:batched continuous:short
tar -C $R -cJf $OUT/call3-reports.tar.xz .
echo "== done $(date +%T)"

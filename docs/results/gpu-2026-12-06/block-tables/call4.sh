#!/usr/bin/env bash
# Call 4: fix3 (as fix2, but candle's copy kernel, `slice_set`, moves the
# tables from the packed buffer into the static ones instead of a 2D
# memcpy; what was committed): the model and server checks on it, then
# step_bench's graph-replayed step on main, fix2 and fix3 (8,192-token
# folder) and fix3 on the 131,072-token copy, and one serving run of fix3
# on each 1B folder (ab.sh).
set -u
R=$OUT/c4; mkdir -p $R
here=docs/results/gpu-2026-12-06/block-tables
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for b in main fix2 fix3; do (cd .gpu/$b && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done); done
cp -r models/llama-3.2-1b-shape /tmp/llama-3.2-1b-shape-131k
sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 131072/' /tmp/llama-3.2-1b-shape-131k/config.json
for part in check-model check-server; do
  echo "== $part (fix3) $(date +%T)"
  GPU_BENCH_BIN=.gpu/fix3 scripts/gpu-bench.sh --part $part $R/checks > $R/$part.log 2>&1; echo "$part rc $?"
  tail -8 $R/$part.log | cut -c1-250
done
echo "== step_bench $(date +%T)"
for bm in main:models/llama-3.2-1b-shape fix2:models/llama-3.2-1b-shape fix3:models/llama-3.2-1b-shape \
          fix3:/tmp/llama-3.2-1b-shape-131k main:models/llama-3.2-1b-shape fix3:models/llama-3.2-1b-shape; do
  b=${bm%%:*} m=${bm#*:} i=$((${i:-0} + 1))
  f=$R/steps-$i-$b-$(basename $m).txt
  .gpu/$b/step_bench --device cuda:0 --dtype bf16 --model $m --graphs on --batch 1,64,128 \
    --context 512 --steps 64 > $f 2>&1
  python3 $here/steps.py $f
done
echo "== serving 1B $(date +%T)"
BINS="fix3" MODELS="models/llama-3.2-1b-shape /tmp/llama-3.2-1b-shape-131k" \
  bash $here/ab.sh $R 2048 1 continuous:short
echo "== done $(date +%T)"

#!/usr/bin/env bash
# Call 5: the final code (fix3 with the padded prompt row's blocks
# counted in the tables' width, so that it reads block 0 only): the model
# and server checks, and one serving run on the 131,072-token 1B copy.
set -u
R=$OUT/c5; mkdir -p $R
here=docs/results/gpu-2026-12-06/block-tables
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
(cd .gpu/final && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done)
cp -r models/llama-3.2-1b-shape /tmp/llama-3.2-1b-shape-131k
sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 131072/' /tmp/llama-3.2-1b-shape-131k/config.json
for part in check-model check-server; do
  echo "== $part (final) $(date +%T)"
  GPU_BENCH_BIN=.gpu/final scripts/gpu-bench.sh --part $part $R/checks > $R/$part.log 2>&1; echo "$part rc $?"
  grep -E "^(PASS|FAIL)|CHECKS" $R/$part.log | cut -c1-200
done
echo "== serving 1B $(date +%T)"
BINS="final" MODELS="/tmp/llama-3.2-1b-shape-131k" bash $here/ab.sh $R 2048 1 continuous:batched
echo "== done $(date +%T)"

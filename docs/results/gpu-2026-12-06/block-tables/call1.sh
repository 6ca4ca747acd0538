#!/usr/bin/env bash
# Call 1: does a model folder's context length (max_position_embeddings,
# hence the width every step's block table is padded to) cost serving
# throughput? The 1B shape as committed (8,192 tokens: 512 blocks a row)
# against a copy that says 131,072 (the real Llama-3.2-1B's: 8,192
# blocks a row), main's build (50af9bb's code).
set -u
R=$OUT/c1; mkdir -p $R
here=docs/results/gpu-2026-12-06/block-tables
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
(cd .gpu/main && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done)
for m in llama-3.2-1b-shape llama-3-8b-shape; do
  cp -r models/$m /tmp/$m-131k
  sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 131072/' /tmp/$m-131k/config.json
  grep -c 131072 /tmp/$m-131k/config.json
done
echo "== step_bench $(date +%T)"
for m in models/llama-3.2-1b-shape /tmp/llama-3.2-1b-shape-131k; do
  .gpu/main/step_bench --device cuda:0 --dtype bf16 --model $m --graphs on --batch 1,64,128 \
    --context 512 --steps 32 2>&1 | tee $R/steps-$(basename $m).txt | tail -5
done
echo "== serving 1B $(date +%T)"
BINS=main MODELS="models/llama-3.2-1b-shape /tmp/llama-3.2-1b-shape-131k" \
  bash $here/ab.sh $R 2048 2 continuous:short continuous:batched dynamic:batched
echo "== serving 8B $(date +%T)"
BINS=main MODELS="models/llama-3-8b-shape /tmp/llama-3-8b-shape-131k" \
  bash $here/ab.sh $R 512 1 continuous:short
echo "== done $(date +%T)"

#!/usr/bin/env bash
# Call 2: serving A/B of the same two builds as call 1 on the 8B shape
# (closed loop at 128, 512 measured requests, one run each in alternating
# order), then the 1B shape's `chat` and two more rounds of `batched`.
set -u
R=$OUT/c2; mkdir -p $R
bt=docs/results/gpu-2026-12-06/block-tables
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for b in old new; do (cd .gpu/$b && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done); done
echo "== serving 8B $(date +%T)"
BINS="old new" MODELS="models/llama-3-8b-shape" \
  bash $bt/ab.sh $R 512 1 continuous:short continuous:batched dynamic:batched
echo "== serving 1B $(date +%T)"
BINS="old new" MODELS="models/llama-3.2-1b-shape" \
  bash $bt/ab.sh $R 2048 2 continuous:chat
BINS="new old" MODELS="models/llama-3.2-1b-shape" \
  bash $bt/ab.sh $R 2048 2 continuous:batched dynamic:batched
tar -C $R -cJf $OUT/call2-reports.tar.xz . && rm -rf $R
echo "== done $(date +%T)"

#!/usr/bin/env bash
# Call 2: token buckets up to 2,048 (buckets: graphs for steps with
# prompt chunks up to the server's token budget) against 512 (ring,
# 009ef2b's build). The server's checks on buckets (every policy and the
# forced small pool give each request its tokens alone), then serving
# A/B at 128 on the 1B shape with ab.sh (builds alternated). Between
# them, main's step_bench times eager steps with prompt tokens of one
# shape and of a new shape every step (--vary-prompts): whether a new
# row count alone makes an eager step slower.
set -u
R=/tmp/c2; rm -rf $R; mkdir -p $R/ab
bt=docs/results/gpu-2026-12-06/block-tables
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for b in ring buckets; do (cd .gpu/$b && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done); done
echo "== check-server (buckets) $(date +%T)"
GPU_BENCH_BIN=.gpu/buckets timeout 200 scripts/gpu-bench.sh --part check-server $R/checks > $R/checks.log 2>&1; echo "rc $?"
tail -8 $R/checks.log
echo "== eager steps with prompt tokens: one shape, then a new shape every step (main's step_bench) $(date +%T)"
(cd .gpu/main && xz -dkf step_bench.xz && chmod +x step_bench)
for vary in "" --vary-prompts; do
  timeout 100 .gpu/main/step_bench --device cuda:0 --dtype bf16 --model models/llama-3.2-1b-shape --graphs off \
    --batch 128 --context 128 --steps 16 --prompt-tokens 1024,1920 $vary > $R/prompts-1b$vary.txt 2>&1 || echo "rc $?"
  grep 'prompt tokens' $R/prompts-1b$vary.txt
done
echo "== serving A/B $(date +%T)"
BINS="ring buckets" MODELS="models/llama-3.2-1b-shape" timeout 200 bash $bt/ab.sh $R/ab 2048 2 continuous:batched \
  dynamic:batched
BINS="ring buckets" MODELS="models/llama-3.2-1b-shape" timeout 100 bash $bt/ab.sh $R/ab 512 1 continuous:chat
grep -h 'graphs captured' $R/ab/*.txt | sort | uniq -c | head
tar -C $R -cJf $OUT/call2-reports.tar.xz .
echo "== done $(date +%T)"

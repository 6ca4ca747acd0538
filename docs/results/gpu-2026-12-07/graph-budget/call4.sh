#!/usr/bin/env bash
# Call 4: a step that fills the token budget ends its last prompt chunk
# where its shape has a graph of the budget's bucket (trim: the
# scheduler's fit_to_graph) against main with graphs up to 2,048 tokens
# and the logits' cast (merged). The server's checks on trim, serving A/B
# at 128 on the 1B shape (ab.sh, builds alternated), then one run that
# prints the server's start line (graphs captured, and how long).
set -u
R=/tmp/c4; rm -rf $R; mkdir -p $R/ab
bt=docs/results/gpu-2026-12-06/block-tables
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for b in merged trim; do (cd .gpu/$b && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done); done
echo "== check-server (trim) $(date +%T)"
GPU_BENCH_BIN=.gpu/trim timeout 120 scripts/gpu-bench.sh --part check-server $R/checks > $R/checks.log 2>&1; echo "rc $?"
tail -6 $R/checks.log
echo "== serving A/B $(date +%T)"
export BINS="merged trim" MODELS="models/llama-3.2-1b-shape"
timeout 150 bash $bt/ab.sh $R/ab 2048 3 continuous:batched
timeout 100 bash $bt/ab.sh $R/ab 2048 2 dynamic:batched
timeout 60 bash $bt/ab.sh $R/ab 512 1 continuous:chat
for f in $R/ab/*.txt; do echo "$(basename $f .txt): $(grep -o 'steps [0-9]* graph, [0-9]* eager' $f)"; done
echo "== the start line (fit) $(date +%T)"
.gpu/trim/isobench serve --model models/llama-3.2-1b-shape --device cuda:0 --dtype bf16 --port 18999 > $R/serve.txt 2>&1 &
for i in $(seq 60); do grep -q "captured" $R/serve.txt && break; sleep 1; done
kill %1; wait
grep "captured" $R/serve.txt
tar -C $R -cJf $OUT/call4-reports.tar.xz .
echo "== done $(date +%T)"

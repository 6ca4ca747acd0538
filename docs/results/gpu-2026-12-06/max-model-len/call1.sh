#!/usr/bin/env bash
# Call 1: the gpu_kernels check with stale blocks past each row's context,
# then `isobench run` (embedded server, closed loop at 128) on three
# variants of each shape, the variants' order reversed every other round:
#   8k         the folder as committed (max_position_embeddings 8,192)
#   131k       a copy that says 131,072
#   131k-limit that copy served with --max-model-len 8192
set -u
R=$OUT/c1; mkdir -p $R
bt=docs/results/gpu-2026-12-06/block-tables
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
(cd .gpu/final && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done)
for m in llama-3.2-1b-shape llama-3-8b-shape; do
  cp -r models/$m /tmp/$m-131k
  sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 131072/' /tmp/$m-131k/config.json
done
echo "== gpu_kernels $(date +%T)"
.gpu/final/gpu_kernels > $R/gpu_kernels.log 2>&1; echo "gpu_kernels rc $?"
echo "PASS lines: $(grep -c PASS $R/gpu_kernels.log)"; grep FAIL $R/gpu_kernels.log | head; tail -1 $R/gpu_kernels.log

serve() { # shape workload requests round variant
  local m=$1 w=$2 n=$3 round=$4 v=$5 folder=models/$1 extra=()
  case $v in 131k) folder=/tmp/$m-131k ;; 131k-limit) folder=/tmp/$m-131k; extra=(--max-model-len 8192) ;; esac
  local tag=$m-$w-$v-$round
  timeout 200 .gpu/final/isobench run workloads/$w.toml --server-model $folder "${extra[@]}" --device cuda:0 \
    --dtype bf16 --batching continuous --arrival closed --concurrency 128 --max-requests $n --warmup 128 \
    --timeout 120s -q -o $R/$tag.json > $R/$tag.txt 2>&1 || echo "$tag rc $?"
  python3 $bt/summarize.py $R/$tag.json
}
rounds() { # shape workload requests rounds
  for round in $(seq 1 $4); do
    order="8k 131k 131k-limit"; [ $((round % 2)) -eq 0 ] && order="131k-limit 131k 8k"
    for v in $order; do serve $1 $2 $3 $round $v; done
  done
}
echo "== serving 1B $(date +%T)"
rounds llama-3.2-1b-shape short 2048 3
rounds llama-3.2-1b-shape batched 2048 3
echo "== serving 8B $(date +%T)"
rounds llama-3-8b-shape short 512 1
rm -f $R/*.requests.jsonl
echo "== done $(date +%T)"

#!/usr/bin/env bash
# ab.sh OUTDIR REQUESTS ROUNDS POLICY:WORKLOAD... (env BINS="a b", MODELS="m1 m2")
# `isobench run` with its embedded server, closed loop at concurrency 128
# (REQUESTS measured after 128 warm-up), for every build in BINS
# (.gpu/NAME/isobench) and model folder in MODELS, ROUNDS rounds, the
# order of the (build, model) pairs reversed every other round. One
# summary line per run (summarize.py).
set -u
R=$1 N=$2 ROUNDS=$3; shift 3
here=docs/results/gpu-2026-12-06/block-tables
pairs=()
for b in $BINS; do for m in $MODELS; do pairs+=("$b:$m"); done; done
for pw in "$@"; do
  p=${pw%%:*} w=${pw##*:}
  for round in $(seq 1 "$ROUNDS"); do
    order=("${pairs[@]}")
    if [ $((round % 2)) -eq 0 ]; then
      order=(); for ((i=${#pairs[@]}-1; i>=0; i--)); do order+=("${pairs[$i]}"); done
    fi
    for bm in "${order[@]}"; do
      b=${bm%%:*} m=${bm#*:}
      tag=$b-$(basename $m)-$p-$w-$round
      timeout 150 .gpu/$b/isobench run workloads/$w.toml --server-model $m --device cuda:0 --dtype bf16 \
        --batching $p --arrival closed --concurrency 128 --max-requests $N --warmup 128 \
        --timeout 120s -q -o $R/$tag.json > $R/$tag.txt 2>&1 || echo "$tag rc $?"
      python3 $here/summarize.py $R/$tag.json
    done
  done
done
rm -f $R/*.requests.jsonl

#!/usr/bin/env bash
# compare.sh OUTDIR MODEL REQUESTS POLICY:WORKLOAD...
# `isobench run` with its embedded server on MODEL, closed loop at
# concurrency 128 (REQUESTS measured after 128 warm-up), once per
# POLICY:WORKLOAD with the CUDA batching defaults (no flag: new) and with
# the CPU defaults given by hand (old), alternated new, old, old, new.
# Prints one summary line per run (summarize.py).
set -u
R=$1 M=$2 N=$3; shift 3
here=docs/results/gpu-2026-12-06/defaults
for pw in "$@"; do
  p=${pw%%:*} w=${pw##*:}
  case $p in
    continuous) old="--max-num-seqs 64 --max-num-batched-tokens 512" ;;
    *) old="--max-batch-size 32" ;;
  esac
  i=0
  for d in new old old new; do
    i=$((i+1)) tag=$(basename $M)-$p-$w-$i-$d
    flags=""; [ $d = old ] && flags=$old
    timeout 150 .gpu/isobench run workloads/$w.toml --server-model $M --device cuda:0 --dtype bf16 \
      --batching $p $flags --arrival closed --concurrency 128 --max-requests $N --warmup 128 \
      --timeout 120s -q -o $R/$tag.json > $R/$tag.txt 2>&1 || echo "$tag rc $?"
    python3 $here/summarize.py $R/$tag.json
  done
done
rm -f $R/*.requests.jsonl

#!/usr/bin/env bash
# Call 2: the fix (block tables uploaded only as wide as the step's
# longest table) against main: the GPU checks on the fix, step_bench on
# both builds with the 131,072-token copy of the 1B shape, then serving
# A/B on both folders (ab.sh).
set -u
R=$OUT/c2; mkdir -p $R
here=docs/results/gpu-2026-12-06/block-tables
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for b in main fix; do (cd .gpu/$b && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done); done
for m in llama-3.2-1b-shape llama-3-8b-shape; do
  cp -r models/$m /tmp/$m-131k
  sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 131072/' /tmp/$m-131k/config.json
done
echo "== checks (fix) $(date +%T)"
GPU_BENCH_BIN=.gpu/fix scripts/gpu-bench.sh --part checks $R/checks > $R/checks.log 2>&1; echo "checks rc $?"
grep -cE "^PASS" $R/checks/checks-summary.txt; grep -E "^FAIL" $R/checks/checks-summary.txt | cut -c1-300
echo "== step_bench $(date +%T)"
for bm in main:/tmp/llama-3.2-1b-shape-131k fix:/tmp/llama-3.2-1b-shape-131k fix:models/llama-3.2-1b-shape main:models/llama-3.2-1b-shape; do
  b=${bm%%:*} m=${bm#*:}
  echo "-- $b $(basename $m)"
  .gpu/$b/step_bench --device cuda:0 --dtype bf16 --model $m --graphs both --batch 1,64,128 \
    --context 512 --steps 32 > $R/steps-$b-$(basename $m).txt 2>&1
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("JSON "):
        r = json.loads(line[5:])
        print(f"batch {r[\"batch\"]:4} eager {r[\"eager_ms\"] or 0:6.3f} graph {r[\"graph_ms\"] or 0:6.3f} ms  issue {r[\"issue_ms\"]}")
' $R/steps-$b-$(basename $m).txt
done
echo "== serving 1B $(date +%T)"
BINS="main fix" MODELS="models/llama-3.2-1b-shape /tmp/llama-3.2-1b-shape-131k" \
  bash $here/ab.sh $R 2048 2 continuous:short continuous:batched
echo "== done $(date +%T)"

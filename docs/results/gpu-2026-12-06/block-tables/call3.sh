#!/usr/bin/env bash
# Call 3: the committed version (fix2: the step's tables packed after its
# other inputs in one host-to-device copy, then a 2D copy on the device
# into the static tables) against main: the GPU checks on fix2,
# step_bench on both builds and both 1B folders, then serving A/B
# (ab.sh) on the 1B shape, the 8B shape and dynamic batching.
set -u
R=$OUT/c3; mkdir -p $R
here=docs/results/gpu-2026-12-06/block-tables
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for b in main fix2; do (cd .gpu/$b && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done); done
for m in llama-3.2-1b-shape llama-3-8b-shape; do
  cp -r models/$m /tmp/$m-131k
  sed -i 's/"max_position_embeddings": 8192/"max_position_embeddings": 131072/' /tmp/$m-131k/config.json
done
echo "== checks (fix2) $(date +%T)"
GPU_BENCH_BIN=.gpu/fix2 scripts/gpu-bench.sh --part checks $R/checks > $R/checks.log 2>&1; echo "checks rc $?"
grep -cE "^PASS" $R/checks/checks-summary.txt; grep -E "^FAIL" $R/checks/checks-summary.txt | cut -c1-300
echo "== step_bench $(date +%T)"
for bm in main:/tmp/llama-3.2-1b-shape-131k fix2:/tmp/llama-3.2-1b-shape-131k fix2:models/llama-3.2-1b-shape main:models/llama-3.2-1b-shape; do
  b=${bm%%:*} m=${bm#*:}
  .gpu/$b/step_bench --device cuda:0 --dtype bf16 --model $m --graphs both --batch 1,64,128 \
    --context 512 --steps 32 > $R/steps-$b-$(basename $m).txt 2>&1
  python3 $here/steps.py $R/steps-$b-$(basename $m).txt
done
echo "== serving 1B $(date +%T)"
BINS="main fix2" MODELS="models/llama-3.2-1b-shape /tmp/llama-3.2-1b-shape-131k" \
  bash $here/ab.sh $R 2048 2 continuous:short continuous:batched
echo "== serving 8B $(date +%T)"
BINS="main fix2" MODELS="models/llama-3-8b-shape /tmp/llama-3-8b-shape-131k" \
  bash $here/ab.sh $R 512 1 continuous:short
echo "== serving 1B dynamic $(date +%T)"
BINS="main fix2" MODELS="models/llama-3.2-1b-shape /tmp/llama-3.2-1b-shape-131k" \
  bash $here/ab.sh $R 2048 1 dynamic:batched
echo "== done $(date +%T)"

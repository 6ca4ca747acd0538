#!/usr/bin/env bash
# Decode attention with five resident blocks an SM (MIN_BLOCKS 5, 96
# registers) against main's four (128 registers): correctness, ncu of
# main's kernel at short context, and step times alternated.
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for d in main mb5; do xz -dc .gpu/$d/step_bench.xz > /tmp/sb-$d && chmod +x /tmp/sb-$d; done
/tmp/sb-mb5 --check --device cuda:0 --model models/llama-3.2-1b-shape > $OUT/check-mb5-1b.txt 2>&1
echo "check mb5 rc=$? $(grep -cE '^PASS' $OUT/check-mb5-1b.txt) PASS, $(grep -cE '^FAIL' $OUT/check-mb5-1b.txt) FAIL ${SECONDS}s"
timeout 150 ncu --profile-from-start off -k regex:paged_attention --launch-count 2 --clock-control none \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
    /tmp/sb-main --device cuda:0 --dtype bf16 --model models/llama-3.2-1b-shape --graphs off --batch 128 --context 128 --steps 1 \
    > $OUT/ncu-1b-attn-main.txt 2>&1
echo "ncu rc=$? ${SECONDS}s"
grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Waves Per SM" $OUT/ncu-1b-attn-main.txt | head -24
for spec in llama-3.2-1b-shape:128:2 llama-3.2-1b-shape:1024:2 llama-3-8b-shape:128:2 llama-3-8b-shape:1024:1; do
  IFS=: read -r model ctx rounds <<<"$spec"
  [ "$SECONDS" -gt 480 ] && { echo "stopping at ${SECONDS}s: $spec not run"; break; }
  {
    for round in $(seq 1 $rounds); do for b in main mb5; do
      echo "== $model context $ctx round $round $b"
      /tmp/sb-$b --device cuda:0 --dtype bf16 --model models/$model --graphs on --batch 1,8,64,128 --context $ctx --steps 32 \
          > $OUT/steps-$model-$ctx-$round-$b.txt 2>&1
      grep -E '^ +[0-9]+ ' $OUT/steps-$model-$ctx-$round-$b.txt
    done; done
    echo "${SECONDS}s"
  }
done

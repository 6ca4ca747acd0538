#!/usr/bin/env bash
# The worked example of docs/capacity-planning.md: the three batching
# policies of the embedded server on the chat workload, side by side with
# the server's batch and queue over time, then a capacity plan. About six
# minutes on a 2-core CPU with models/tiny-llama.
#
#   cargo build --release -p isobench && scripts/capacity-example.sh
#
# Writes the reports, tables and plots the document shows into
# docs/capacity-planning/ (the per-request logs and the plan's trials go to
# $WORK, default a temporary folder).
set -euo pipefail
cd "$(dirname "$0")/.."
ISOBENCH=${ISOBENCH:-target/release/isobench}
OUT=docs/capacity-planning
WORK=${WORK:-$(mktemp -d)}
MODEL=models/tiny-llama

for batching in static dynamic continuous; do
    "$ISOBENCH" run workloads/chat.toml --server-model "$MODEL" --batching "$batching" \
        --rate 10 --duration 30s --quiet \
        -o "$OUT/chat-$batching.json" --log "$WORK/chat-$batching.requests.jsonl"
done
"$ISOBENCH" compare "$OUT/chat-continuous.json" "$OUT/chat-dynamic.json" "$OUT/chat-static.json" \
    > "$OUT/compare.txt"
"$ISOBENCH" report "$OUT/chat-static.json" "$OUT/chat-dynamic.json" "$OUT/chat-continuous.json" \
    --markdown --html "$OUT/batching.html" --svg-dir "$OUT/batching" > "$OUT/batching.md"

"$ISOBENCH" plan workloads/chat.toml --server-model "$MODEL" --batching continuous \
    --slo ttft_p99=200ms,tpot_p99=15ms --target-rps 100 \
    --start-rate 8 --step-duration 20s --trials 2 --quiet \
    --output-dir "$WORK/plan" > "$OUT/plan.txt"
cp "$WORK/plan/plan.json" "$OUT/plan.json"
"$ISOBENCH" report "$WORK"/plan/continuous/trial-*.json --svg-dir "$WORK/plan-svg" > /dev/null
cp "$WORK/plan-svg/plan.svg" "$OUT/plan-trials.svg"
echo "done: $OUT (logs and trials in $WORK)"

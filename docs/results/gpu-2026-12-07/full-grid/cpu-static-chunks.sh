# CPU: static batching of `long` at 32 on models/small-llama, prompts in one
# step (budget 1000000) against chunks of 8,192 (the new default), alternated.
set -u
cd "$(git rev-parse --show-toplevel)"
bin=target/release/isobench
OUT=${OUT:-/tmp/cpu-ab}; rm -rf $OUT; mkdir -p $OUT
PORT=18600
for round in 1 2; do
  for budget in 8192 1000000; do
    $bin serve --model models/small-llama --port $PORT --kv-memory 2GiB --batching static --max-batch-size 32 \
        --max-num-batched-tokens $budget 2>"$OUT/server-$budget-$round.log" &
    pid=$!
    for _ in $(seq 600); do (echo >"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
    $bin run workloads/long.toml --target "http://127.0.0.1:$PORT" --quiet --arrival closed --concurrency 32 \
        --max-requests 32 --warmup 1 -o "$OUT/static-long-c32-b$budget-r$round.json" >/dev/null
    kill $pid; wait $pid 2>/dev/null
  done
done
$bin summary "$OUT"/*.json

#!/usr/bin/env bash
# Does a server recover from a step that ran out of device memory? Each
# argument is NAME or NAME:FLAGS, a build (.gpu/NAME/isobench.xz) and extra
# `serve` flags: serve the 8B shape with static batching (FLAGS must make a
# step take a whole batch's prompts on a build that bounds it, e.g.
# --max-num-batched-tokens 131072), then run RUNS (default: `long` at 128,
# 128 prompts of 512-1,024 tokens in one step, out of memory on an H100;
# then `chat` at 8 and `long` at 8) on the same server, each spec
# WORKLOAD:CONCURRENCY:REQUESTS:WARMUP; print each run's outcome.
set -u
M=models/llama-3-8b-shape
port=18490
for spec in "$@"; do
    name="${spec%%:*}"; extra="${spec#*:}"; [ "$extra" = "$spec" ] && extra=""
    bin=".gpu/$name"
    [ -x "$bin/isobench" ] || { xz -dc "$bin/isobench.xz" > "$bin/isobench" && chmod +x "$bin/isobench"; }
    out="$OUT/recover-$name"; mkdir -p "$out"
    "$bin/isobench" serve --device cuda:0 --port $port --model $M --dtype bf16 --batching static \
        --max-batch-size 128 --gpu-memory-fraction 0.8 $extra > "$out/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 240); do python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1)" 2>/dev/null && break; sleep 0.5; done
    echo "== $name ($extra): $(head -c 300 "$out/server.log")"
    for run in ${RUNS:-long:128:128:0 chat:8:16:8 long:8:16:8}; do
        IFS=: read -r w c n warm <<<"$run"
        "$bin/isobench" run "workloads/$w.toml" --target "http://127.0.0.1:$port" --tokenizer $M/tokenizer.json \
            --usage-per-event --arrival closed --concurrency $c --max-requests $n --warmup $warm --quiet \
            --output "$out/$w-c$c.json" --log "$out/$w-c$c.requests.jsonl" > "$out/$w-c$c.txt" 2>&1
        echo "-- $w c$c exit $?: $(grep -E '^requests|^errors|^output|INVALID' "$out/$w-c$c.txt" | tr '\n' ' ')"
    done
    python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$port/metrics', timeout=10).read().decode())" > "$out/metrics.txt"
    kill $pid; wait $pid 2>/dev/null
    echo "errors logged: $(grep -c 'model step failed' "$out/server.log"), kinds: $(grep -o 'error=\"[A-Za-z ]*:' "$out/server.log" | sort | uniq -c | tr '\n' ' ')"
    port=$((port + 1))
done

#!/usr/bin/env bash
# The GPU benchmark of issue 6, run on the GPU machine from the repository
# root: checks the GPU, runs the GPU correctness checks, then the
# benchmarks, and prints the summary table last. docs/gpu.md says how to
# build the binaries (into .gpu/) and carry them there.
#
#   scripts/gpu-bench.sh [--part PART] OUTDIR [--policy P] [--workloads LIST]
#                        [--concurrency LIST] [--model DIR] [--budget SECONDS]
#                        [--turns N] [--max-num-batched-tokens N]
#                        [--cuda-graphs on|off]
#   scripts/gpu-bench.sh --part targets PATH...
#
# PART:
#   all         (the default) checks, steps, hf, serving-1b and serving-8b
#               in turn, into OUTDIR, going on past a part that fails, the
#               serving parts without a time budget unless --budget is
#               given; then `targets` over OUTDIR, printed last and kept in
#               OUTDIR/targets-summary.txt.
#               It takes longer than the device tool's 10 minutes a
#               command: there, run the parts one per call, then `targets`.
#   targets     issue 6's targets judged from what parts left under the
#               PATHs (PART.tar.gz and PART-summary.txt, found in folders
#               and inside the .tar.gz or .tar.xz a call script packs), from
#               any number of calls (scripts/gpu_bench_report.py; runs
#               anywhere)
# and each of these fits in the device tool's 10 minutes:
#   checks      nvidia-smi, then the three below (needs all three binaries)
#   check-kernels  .gpu/gpu_kernels: the paged-attention kernels, the
#                  greedy argmax and the sampler
#   check-model    .gpu/step_bench --check (f32 small model, the 1B shape,
#                  the Qwen2 fixture): GPU against CPU, graphs against
#                  eager, bf16, own kernels against candle's plain ops
#   check-server   equivalence of every batching policy (greedy and
#                  seeded sampled requests), and of preemption under a
#                  forced small pool, through
#                  `.gpu/isobench serve --device cuda:0`
#   steps       .gpu/step_bench on the 1B and 8B shapes (STEP_MODELS),
#               batch 1,2,4,8,16,32,64,128 (STEP_BATCHES), graphs off and
#               on, this crate's kernels and then candle's plain ops
#               (STEP_KERNELS="own plain"): CUDA-event step times against
#               the memory-bandwidth floor
#   hf          scripts/hf_decode_bench.py: Hugging Face transformers on the
#               same shapes, eager and compiled static cache
#   serving-1b  isobench run of workloads short, long, batched and chat at
#   serving-8b  concurrency 1,8,32,64,128 (closed loop) against
#               `.gpu/isobench serve --device cuda:0 --dtype bf16`, once per
#               batching policy (static, dynamic, continuous)
#
# OUTDIR gets at most two files per part: PART.tar.gz (every raw JSON and
# log) and PART-summary.txt (the table printed last). --policy,
# --workloads and --concurrency narrow a serving part (to split it over
# several calls); --model DIR serves another folder in a serving part;
# --budget (default 510 s; 0 for none, the default of `all`) stops
# starting new serving runs once that much time has passed, and the
# summary lists what was skipped; --turns N
# (default 2) sends N measured requests per concurrency slot in a serving
# run (at least 16, 8 on the 8B shape), after one warm-up request per
# slot; `batched` runs at least 4 rounds (its equal answers keep
# continuous batching's start-up waves apart all run: docs/gpu.md);
# --max-num-batched-tokens N (default
# 2048) is the continuous policy's token budget per step; --cuda-graphs
# off (default on) serves with eager steps only, to measure what the
# graphs buy under the same load (give it its own OUTDIR).
# GPU_BENCH_BIN (default .gpu) is where the binaries are (NAME or NAME.xz,
# unpacked when newer than NAME); GPU_BENCH_DEVICE
# (default cuda:0; `cpu` for a dry run of the script, f32) the device.
set -euo pipefail

usage() {
    # The header comment, whatever its length.
    sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"
    exit 2
}

ARGS=("$@")
PART=""
PATHS=()
POLICIES="static dynamic continuous"
WORKLOADS="short long batched chat"
CONCURRENCY="1 8 32 64 128"
BUDGET=""
TURNS=2
MAX_TOKENS=2048
CUDA_GRAPHS=on
MODEL=""
BIN="${GPU_BENCH_BIN:-.gpu}"
DEVICE="${GPU_BENCH_DEVICE:-cuda:0}"
DTYPE=bf16
[ "$DEVICE" != cpu ] || DTYPE=f32
while [ $# -gt 0 ]; do
    case "$1" in
        --part) PART="${2:?--part needs a value}"; shift 2 ;;
        --policy) POLICIES="${2//,/ }"; shift 2 ;;
        --workloads) WORKLOADS="${2//,/ }"; shift 2 ;;
        --concurrency) CONCURRENCY="${2//,/ }"; shift 2 ;;
        --budget) BUDGET="${2:?--budget needs seconds}"; shift 2 ;;
        --model) MODEL="${2:?--model needs a model folder}"; shift 2 ;;
        --turns) TURNS="${2:?--turns needs a number}"; shift 2 ;;
        --max-num-batched-tokens) MAX_TOKENS="${2:?--max-num-batched-tokens needs a number}"; shift 2 ;;
        --cuda-graphs) CUDA_GRAPHS="${2:?--cuda-graphs needs on or off}"; shift 2 ;;
        -h|--help) usage ;;
        -*) echo "gpu-bench: unknown flag $1; accepted: --part, --policy, --workloads, --concurrency, --model, --budget, --turns, --max-num-batched-tokens, --cuda-graphs" >&2; exit 2 ;;
        *) PATHS+=("$1"); shift ;;
    esac
done
PART="${PART:-all}"
case "$PART" in
    all|targets|checks|check-kernels|check-model|check-server|steps|hf|serving-1b|serving-8b) ;;
    *) echo "gpu-bench: --part must be one of all, targets, checks, check-kernels, check-model, check-server, steps, hf, serving-1b, serving-8b (got '${PART}')" >&2; exit 2 ;;
esac
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ "$PART" = targets ]; then
    [ "${#PATHS[@]}" -gt 0 ] || { echo "gpu-bench: --part targets needs the folders or tarballs the parts wrote, e.g. \$OUT/gpu" >&2; exit 2; }
    exec python3 "$ROOT/scripts/gpu_bench_report.py" targets "${PATHS[@]}"
fi
[ "${#PATHS[@]}" -gt 0 ] || { echo "gpu-bench: give the output folder, e.g. \$OUT/gpu" >&2; exit 2; }
[ "${#PATHS[@]}" -eq 1 ] || { echo "gpu-bench: one OUTDIR only (got ${PATHS[*]})" >&2; exit 2; }
OUTDIR="${PATHS[0]}"
case "$BUDGET" in
    '') [ "$PART" = all ] && BUDGET=0 || BUDGET=510 ;;
    *[!0-9]*) echo "gpu-bench: --budget must be a whole number of seconds, 0 for none (got '$BUDGET')" >&2; exit 2 ;;
esac
case "$TURNS" in ''|*[!0-9]*|0) echo "gpu-bench: --turns must be a whole number of at least 1 (got '$TURNS')" >&2; exit 2 ;; esac
case "$CUDA_GRAPHS" in on|off) ;; *) echo "gpu-bench: --cuda-graphs must be on or off (got '$CUDA_GRAPHS')" >&2; exit 2 ;; esac
for p in $POLICIES; do
    case "$p" in static|dynamic|continuous) ;; *) echo "gpu-bench: --policy $p: accepted: static, dynamic, continuous" >&2; exit 2 ;; esac
done

cd "$ROOT"
mkdir -p "$OUTDIR"

# Every part in turn, each a run of this script with the same flags, then
# the targets over what they left.
if [ "$PART" = all ]; then
    failed=""
    for part in checks steps hf serving-1b serving-8b; do
        echo "[gpu-bench] part $part" >&2
        "$ROOT/scripts/gpu-bench.sh" "${ARGS[@]}" --budget "$BUDGET" --part "$part" || failed="$failed $part"
    done
    python3 scripts/gpu_bench_report.py targets "$OUTDIR" | tee "$OUTDIR/targets-summary.txt"
    [ -z "$failed" ] || { echo "gpu-bench: parts that failed or did not finish:$failed" | tee -a "$OUTDIR/targets-summary.txt"; exit 1; }
    exit 0
fi
WORK="$(mktemp -d /tmp/gpu-bench.XXXXXX)"
RAW="$WORK/$PART"
mkdir -p "$RAW"
SUMMARY="$OUTDIR/$PART-summary.txt"
START=$SECONDS
SERVER_PID=""
FAILED=0

log() { echo "[gpu-bench $((SECONDS - START))s] $*" >&2; }
# A summary line: printed and kept in PART-summary.txt.
say() { echo "$*" | tee -a "$SUMMARY"; }

stop_server() {
    if [ -n "$SERVER_PID" ]; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    fi
}

finish() {
    stop_server
    tar -czf "$OUTDIR/$PART.tar.gz" -C "$WORK" "$PART"
    rm -rf "$WORK"
}
trap finish EXIT

need() {
    [ -x "$1" ] || { echo "gpu-bench: $1 is missing: build it as docs/gpu.md says and copy it (or NAME.xz) to .gpu/" >&2; exit 2; }
}

# The binaries travel xz-compressed (each is over 50 MB, the device tool
# carries 64 MiB per call): unpack BIN/NAME.xz into BIN/NAME when newer.
unpack() {
    local packed bin
    for packed in "$BIN"/*.xz; do
        [ -e "$packed" ] || continue
        bin="${packed%.xz}"
        if [ ! -x "$bin" ] || [ "$packed" -nt "$bin" ]; then
            log "unpacking $packed"
            python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
                "$packed" "$bin.tmp"
            chmod +x "$bin.tmp"
            mv "$bin.tmp" "$bin"
        fi
    done
}

# Starts `"$BIN/isobench" serve` on PORT with the remaining flags; waits for
# /health (the model loads first).
start_server() {
    local port="$1" name="$2"
    shift 2
    "$BIN/isobench" serve --device "$DEVICE" --port "$port" "$@" >"$RAW/$name.server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 600); do
        if python3 - "$port" <<'EOF' 2>/dev/null; then return 0; fi
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=1).read()
EOF
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            log "server $name exited: $(tail -3 "$RAW/$name.server.log")"
            SERVER_PID=""
            return 1
        fi
        sleep 0.5
    done
    log "server $name not healthy after 300 s"
    return 1
}

gpu_info() {
    # A dry run on the CPU names the processor instead.
    if [ "$DEVICE" = cpu ]; then
        echo "cpu (dry run): $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
        return
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader >"$RAW/nvidia-smi.csv" 2>&1 \
        || { echo "gpu-bench: nvidia-smi failed: $(cat "$RAW/nvidia-smi.csv")" >&2; exit 2; }
    cat "$RAW/nvidia-smi.csv"
}

check_kernels() {
    need "$BIN/gpu_kernels"
    local status
    log "paged-attention kernels"
    if "$BIN/gpu_kernels" >"$RAW/gpu_kernels.txt" 2>&1; then status=PASS; else status=FAIL; FAILED=1; fi
    say "$status gpu_kernels ($(grep -c '^PASS' "$RAW/gpu_kernels.txt" || true) cases passed, $(grep -c '^FAIL' "$RAW/gpu_kernels.txt" || true) failed)"
    say "$(grep -E '^(decode attention|  batch|sampled tokens|  +[0-9]+ rows: logits)' "$RAW/gpu_kernels.txt")"
}

check_model() {
    need "$BIN/step_bench"
    local status folder model
    # The Qwen2 fixture has q/k/v biases and tied embeddings, which the
    # Llama-shaped folders lack.
    for folder in models/small-llama models/llama-3.2-1b-shape crates/isobench-model/tests/fixtures/qwen2; do
        model="$(basename "$folder")"
        log "step_bench --check $model"
        if "$BIN/step_bench" --check --device "$DEVICE" --model "$folder" >"$RAW/step_check-$model.txt" 2>&1; then
            status=PASS
        else
            status=FAIL; FAILED=1
        fi
        say "$status step_bench --check $model: $(grep -E '^(PASS|FAIL)' "$RAW/step_check-$model.txt" | tr '\n' ';')"
    done
}

check_server() {
    need "$BIN/isobench"
    log "batching-policy equivalence through the server"
    local port=18431 name flags
    for name in static dynamic continuous small-pool; do
        case "$name" in
            static) flags=(--batching static --max-batch-size 16) ;;
            dynamic) flags=(--batching dynamic --max-batch-size 16 --max-wait 20ms) ;;
            continuous) flags=(--batching continuous --max-num-seqs 16 --max-num-batched-tokens 96) ;;
            small-pool) flags=(--batching continuous --max-num-seqs 16 --kv-blocks 24) ;;
        esac
        if start_server "$port" "equivalence-$name" --model models/small-llama --dtype f32 "${flags[@]}" \
            && python3 - "$port" "$name" >"$RAW/equivalence-$name.txt" 2>&1 <<'EOF'; then
import json, sys, threading, urllib.request
port, name = sys.argv[1], sys.argv[2]
base = f"http://127.0.0.1:{port}"
model = json.load(urllib.request.urlopen(f"{base}/v1/models"))["data"][0]["id"]

def complete(i):
    # Prompts of 7..51 token ids and 24..63 new tokens: mixed lengths, so
    # sequences join and leave batches at different steps. Every third
    # request samples at random with a seed (drawn on the device).
    body = {"model": model, "prompt": [(i * 37 + k * 11) % 500 + 3 for k in range(7 + 4 * i)],
        "max_tokens": 24 + (i * 13) % 40, "temperature": 0, "ignore_eos": True}
    if i % 3 == 2:
        body.update({"temperature": 0.8, "top_p": 0.9, "seed": 1000 + i})
    request = urllib.request.Request(f"{base}/v1/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    answer = json.load(urllib.request.urlopen(request, timeout=120))
    return answer["choices"][0]["text"], answer["usage"]["completion_tokens"]

def metric(text, key):
    return next((float(l.split()[-1]) for l in text.splitlines() if l.startswith(key + " ")), 0.0)

n = 12
alone = [complete(i) for i in range(n)]
together = [None] * n
def worker(i):
    together[i] = complete(i)
threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
for t in threads: t.start()
for t in threads: t.join()
metrics = urllib.request.urlopen(f"{base}/metrics").read().decode()
mismatches = [i for i in range(n) if alone[i] != together[i]]
graphs = metric(metrics, "isobench_cuda_graph_replays_total")
preempted = metric(metrics, "isobench_preemptions_total")
print(json.dumps({"policy": name, "requests": n, "mismatches": mismatches,
              "graph_replays": graphs, "preemptions": preempted}))
ok = not mismatches and graphs > 0 and (name != "small-pool" or preempted > 0)
print(f"{'PASS' if ok else 'FAIL'} {name}: {n - len(mismatches)}/{n} requests equal alone and batched, "
      f"{graphs:.0f} graph replays, {preempted:.0f} preemptions")
sys.exit(0 if ok else 1)
EOF
            say "$(tail -1 "$RAW/equivalence-$name.txt")"
        else
            FAILED=1
            say "FAIL $name: $(tail -2 "$RAW/equivalence-$name.txt" 2>/dev/null | tr '\n' ' ')"
        fi
        stop_server
        port=$((port + 1))
    done
}

part_checks() {
    say "GPU: $(gpu_info)"
    case "$PART" in
        checks) check_kernels; check_model; check_server ;;
        check-kernels) check_kernels ;;
        check-model) check_model ;;
        check-server) check_server ;;
    esac
    if [ "$FAILED" = 0 ]; then say "GPU CHECKS OK ($PART)"; else say "GPU CHECKS FAILED ($PART)"; fi
}

part_steps() {
    need "$BIN/step_bench"
    # Eager and graph-replayed steps; a CPU dry run has no graphs.
    local STEP_GRAPHS=both
    [ "$DEVICE" != cpu ] || STEP_GRAPHS=off
    say "GPU: $(gpu_info)"
    local model kernels
    for model in ${STEP_MODELS:-llama-3.2-1b-shape llama-3-8b-shape}; do
        # This crate's kernels (single-token steps), then candle's
        # plain ops on cuBLAS for every step, side by side.
        for kernels in ${STEP_KERNELS:-own plain}; do
            log "step_bench $model ($kernels)"
            local flags=()
            [ "$kernels" = own ] || flags=(--plain)
            "$BIN/step_bench" --device "$DEVICE" --dtype "$DTYPE" --model "models/$model" --graphs "$STEP_GRAPHS" \
                --batch "${STEP_BATCHES:-1,2,4,8,16,32,64,128}" --context 512 --steps 32 "${flags[@]}" \
                >"$RAW/step_bench-$model-$kernels.txt" 2>&1 \
                || { FAILED=1; say "FAIL step_bench $model ($kernels): $(tail -2 "$RAW/step_bench-$model-$kernels.txt")"; }
            say "$(grep -v '^JSON' "$RAW/step_bench-$model-$kernels.txt")"
        done
    done
}

part_hf() {
    say "GPU: $(gpu_info)"
    log "transformers decode benchmark"
    python3 scripts/hf_decode_bench.py --batch 1,8,32,64,128 --context 512 --steps 32 \
        >"$RAW/hf_decode_bench.txt" 2>&1 || { FAILED=1; say "FAIL hf_decode_bench: $(tail -3 "$RAW/hf_decode_bench.txt")"; }
    say "$(grep -v '^{' "$RAW/hf_decode_bench.txt" | tail -40)"
}

# Measured rounds per run: --turns, and at least 4 for `batched`. Its
# answers are all 64 tokens, so the waves in which continuous batching
# admits the closed loop's first burst stay apart all run; the measured
# window carries their spread once, which two rounds do not amortize
# (docs/gpu.md).
turns_for() {
    local workload="$1"
    if [ "$workload" = batched ] && [ "$TURNS" -lt 4 ]; then echo 4; else echo "$TURNS"; fi
}

# Requests per run: every concurrency slot turns over `turns` times.
requests_for() {
    local c="$1" min="$2" turns="$3"
    echo $((c * turns > min ? c * turns : min))
}

# Warm-up requests per run: the closed loop's first round (one request per
# slot, at least 2). Those C requests all start together at an idle server,
# a burst that no later round repeats unless the policy itself lines the
# requests up again (static and dynamic batching do; continuous batching
# spreads them out), so counting it would put the start-up burst into
# every policy's p99 TTFT.
warmup_for() {
    local c="$1"
    echo $((c > 2 ? c : 2))
}

# True once a serving part has run for --budget seconds (never with 0).
past_budget() {
    [ "$BUDGET" -gt 0 ] && [ $((SECONDS - START)) -ge "$BUDGET" ]
}

part_serving() {
    local model="${MODEL:-models/$1}" min_requests="$2"
    model="${model%/}"
    need "$BIN/isobench"
    echo "GPU: $(gpu_info)" >>"$SUMMARY"
    if [ "$DEVICE" = cpu ]; then echo "CUDA graphs: none (cpu)" >>"$SUMMARY"; else echo "CUDA graphs: $CUDA_GRAPHS" >>"$SUMMARY"; fi
    echo "measured requests a run: concurrency x $TURNS rounds (batched: x $(turns_for batched)), at least $min_requests, after one warm-up round" >>"$SUMMARY"
    local port=18471 policy flags workload c out skipped=""
    for policy in $POLICIES; do
        case "$policy" in
            static) flags=(--batching static --max-batch-size 128) ;;
            dynamic) flags=(--batching dynamic --max-batch-size 128 --max-wait 50ms) ;;
            continuous) flags=(--batching continuous --max-num-seqs 128 --max-num-batched-tokens "$MAX_TOKENS") ;;
        esac
        if past_budget; then skipped="$skipped $policy(all)"; continue; fi
        log "server $model $policy"
        # 0.8 of free memory is far more pool than these workloads fill
        # (128 x 1,536 tokens, 24 GiB on the 8B shape) and leaves room for
        # the activations of a step (at most 8,192 tokens with static and
        # dynamic batching, docs/server.md).
        [ "$DEVICE" = cpu ] || flags+=(--gpu-memory-fraction 0.8 --cuda-graphs "$CUDA_GRAPHS")
        if ! start_server "$port" "serve-$policy" --model "$model" --dtype "$DTYPE" "${flags[@]}"; then
            FAILED=1; skipped="$skipped $policy(server failed)"; continue
        fi
        for workload in $WORKLOADS; do
            for c in $CONCURRENCY; do
                if past_budget; then skipped="$skipped $policy/$workload/c$c"; continue; fi
                out="$RAW/$policy/$workload-c$c.json"
                mkdir -p "$RAW/$policy"
                log "$policy $workload concurrency $c"
                "$BIN/isobench" run "workloads/$workload.toml" --target "http://127.0.0.1:$port" \
                    --tokenizer "$model/tokenizer.json" --usage-per-event --arrival closed --concurrency "$c" \
                    --max-requests "$(requests_for "$c" "$min_requests" "$(turns_for "$workload")")" \
                    --warmup "$(warmup_for "$c")" \
                    --quiet --output "$out" --log "${out%.json}.requests.jsonl" \
                    >"${out%.json}.txt" 2>&1 \
                    || { log "run failed (exit $?): $(tail -2 "${out%.json}.txt" | tr '\n' ' ')"; }
            done
        done
        # The server's own view of its steps over every run of this policy.
        mkdir -p "$RAW/$policy"
        python3 - "$port" >"$RAW/$policy/server-metrics.txt" 2>&1 <<'EOF' || true
import sys, urllib.request
print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode())
EOF
        stop_server
        port=$((port + 1))
    done
    [ -z "$skipped" ] || echo "not run (past the ${BUDGET}s budget, or the server failed):$skipped" >>"$SUMMARY"
    python3 scripts/gpu_bench_report.py serving "$RAW" "$model" "$DTYPE" >>"$SUMMARY"
    cat "$SUMMARY"
}

: >"$SUMMARY"
log "part $PART into $OUTDIR"
unpack
gpu_info >/dev/null
case "$PART" in
    checks|check-*) part_checks ;;
    steps) part_steps ;;
    hf) part_hf ;;
    serving-1b) part_serving llama-3.2-1b-shape 16 ;;
    serving-8b) part_serving llama-3-8b-shape 8 ;;
esac
log "done"
exit "$FAILED"

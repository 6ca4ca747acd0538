#!/usr/bin/env bash
# isobench serve against llama.cpp's llama-server on the same weights and
# the same cores (issue 9). Builds llama-server from the source that the
# PyPI source distribution of llama-cpp-python carries (vendor/llama.cpp),
# with cmake from PyPI, cached under ~/.cache/isobench-llama-cpp, so reruns
# start at once. Makes the issue's model (a 29.9 M-parameter random Llama:
# hidden 512, 8 layers, 8 heads, no GQA, FFN 1408, vocab 4096) as a seeded
# folder and exports it as f32, f16 and Q8_0 GGUF files with
# `examples/to_gguf` (both servers then read the very same file). Then, for
# each format, runs the servers alternately (A B A B ...) on the same cores
# (taskset), each under the same client: `isobench run` (32-token prompts,
# 64 output tokens, greedy, streamed, closed loop at each concurrency) and
# an independent plain-socket Python client (scripts/sse_client.py), and
# prints the issue's table with the CPU model and its SIMD flags.
#
#   scripts/compare-llama-cpp.sh [OUT_DIR]      (default results/compare-llama-cpp)
#   env: CORES=0,1  ROUNDS=3  CONCURRENCY="1 8 32"  FORMATS="f32 f16 q8_0"
#        REQUESTS (per run; default max(2C, 16))  PREFILL=1 (prefill sweep)
#
# Not run in CI (it downloads and builds llama.cpp, ~10 minutes on 2 cores
# the first time).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
OUT=${1:-results/compare-llama-cpp}
CORES=${CORES:-0,1}
ROUNDS=${ROUNDS:-3}
CONCURRENCY=${CONCURRENCY:-"1 8 32"}
FORMATS=${FORMATS:-"f32 f16 q8_0"}
LLAMA_CPP_VERSION=${LLAMA_CPP_VERSION:-0.3.36}
CACHE=${CACHE:-$HOME/.cache/isobench-llama-cpp}
threads=$(( $(echo "$CORES" | tr ',' '\n' | wc -l) ))
mkdir -p "$OUT" "$CACHE"

# --- llama-server, built once --------------------------------------------
# For this CPU's SIMD, named flag by flag rather than with GGML_NATIVE:
# -march=native also turns on AMX where the CPU reports it, and where the
# kernel does not enable AMX's tile state (seen on a Xeon VM here) the
# native build dies with SIGILL on its first Q8_0 matmul. Other CPUs (no
# x86 `flags` line: aarch64's NEON has no AMX to avoid) build native.
if [ "$(uname -m)" = x86_64 ]; then
  isa_flags=(-DGGML_NATIVE=OFF)
  for pair in avx:AVX avx2:AVX2 bmi2:BMI2 fma:FMA f16c:F16C avx_vnni:AVX_VNNI avx512f:AVX512 \
              avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
    if grep -m1 '^flags' /proc/cpuinfo | grep -qw "${pair%%:*}"; then
      isa_flags+=("-DGGML_${pair#*:}=ON")
    else
      isa_flags+=("-DGGML_${pair#*:}=OFF")
    fi
  done
else
  isa_flags=(-DGGML_NATIVE=ON)
fi
build_dir="$CACHE/build-$LLAMA_CPP_VERSION-$(echo "${isa_flags[*]}" | md5sum | cut -c1-8)"
server_bin="$build_dir/bin/llama-server"
if [ ! -x "$server_bin" ]; then
  [ -d "$CACHE/venv" ] || python3 -m venv "$CACHE/venv"
  "$CACHE/venv/bin/pip" install -q cmake ninja
  sdist="$CACHE/llama_cpp_python-$LLAMA_CPP_VERSION.tar.gz"
  [ -f "$sdist" ] || "$CACHE/venv/bin/pip" download -q --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$LLAMA_CPP_VERSION" -d "$CACHE"
  src="$CACHE/llama_cpp_python-$LLAMA_CPP_VERSION/vendor/llama.cpp"
  [ -f "$src/CMakeLists.txt" ] || tar xzf "$sdist" -C "$CACHE"
  "$CACHE/venv/bin/cmake" -S "$src" -B "$build_dir" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release "${isa_flags[@]}" -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DCMAKE_MAKE_PROGRAM="$CACHE/venv/bin/ninja" >"$CACHE/cmake.log" 2>&1
  "$CACHE/venv/bin/cmake" --build "$build_dir" --target llama-server \
    -j "$threads" >"$CACHE/build.log" 2>&1
fi
[ "${BUILD_ONLY:-0}" = 1 ] && { echo "built $server_bin"; exit 0; }

# --- isobench, the model and its GGUF files -------------------------------
{ cargo build --release -p isobench && cargo build --release -p isobench-model --example to_gguf; } \
  >"$OUT/cargo.log" 2>&1 || { echo "cargo build failed; see $OUT/cargo.log" >&2; exit 1; }
bin=$root/target/release/isobench
model=$OUT/model
python3 scripts/make-bench-model.py "$model" >/dev/null
for format in $FORMATS; do
  [ -f "$OUT/model-$format.gguf" ] ||
    target/release/examples/to_gguf "$model" "$OUT/model-$format.gguf" "$format" >/dev/null
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
simd=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
  grep -xE 'avx2|fma|f16c|avx512f|avx512bw|avx512vl|avx512_vnni|avx512_bf16' | tr '\n' ' ')
echo "CPU: $cpu ($(nproc) cores), SIMD: $simd; servers and clients on cores $CORES, $threads threads"

cat >"$OUT/compare.toml" <<TOML
name = "compare"
description = "issue 9: 32-token prompts, 64 output tokens, greedy, streamed, closed loop"
api = "completions"
stream = true
seed = 9
timeout = "120s"
tokenizer = "model/tokenizer.json"

[request]
input_tokens = { dist = "fixed", value = 32 }
output_tokens = { dist = "fixed", value = 64 }
ignore_eos = true
temperature = 0.0

[load]
arrival = "closed"
concurrency = 1
max_requests = 16
warmup = 2
TOML

PORT=${PORT:-18190}
server_pid=
stop_server() {
  if [ -n "$server_pid" ]; then
    kill -INT "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=
}
trap stop_server EXIT

start_server() { # engine format slots log
  local file=$OUT/model-$2.gguf
  case $1 in
    llama) taskset -c "$CORES" "$server_bin" -m "$file" --host 127.0.0.1 --port "$PORT" \
             -t "$threads" -tb "$threads" -np "$3" -cb -c 4096 \
             --no-webui >"$4" 2>&1 & ;;
    isobench) taskset -c "$CORES" "$bin" serve --model "$file" --port "$PORT" \
             --batching continuous --max-num-seqs "$3" --kv-memory 1GiB >"$4" 2>&1 & ;;
  esac
  server_pid=$!
  for _ in $(seq 1200); do
    curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "the $1 server for $2 did not start; see $4" >&2
  exit 1
}

model_name() { curl -fs "http://127.0.0.1:$PORT/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])'; }

for round in $(seq 1 "$ROUNDS"); do
  for format in $FORMATS; do
    for engine in llama isobench; do   # A B, every round
      start_server "$engine" "$format" 32 "$OUT/server-$engine-$format-r$round.log"
      name=$(model_name)
      for c in $CONCURRENCY; do
        requests=${REQUESTS:-$((2 * c > 16 ? 2 * c : 16))}
        tag=$engine-$format-c$c-r$round
        taskset -c "$CORES" "$bin" run "$OUT/compare.toml" --quiet --target "http://127.0.0.1:$PORT" \
          --model "$name" --concurrency "$c" --max-requests "$requests" --warmup "$c" \
          -o "$OUT/$tag.json" >/dev/null || true
        taskset -c "$CORES" python3 scripts/sse_client.py --url "http://127.0.0.1:$PORT" --model "$name" \
          --concurrency "$c" --requests "$requests" --max-tokens 64 >"$OUT/$tag.sse.json" || true
        python3 - "$OUT/$tag.json" "$OUT/$tag.sse.json" "round $round $engine $format c$c" <<'PY' || echo "round $round $engine $format c$c: a client failed"
import json, sys
r, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(f"{sys.argv[3]}: isobench run {r['output_throughput']:.0f} tok/s, TPOT p50 {r['median_tpot_ms']:.1f} ms; "
      f"sse_client {s['output_tokens_per_s']:.0f} tok/s, TPOT p50 {s['tpot_p50_ms']:.1f} ms")
PY
      done
      stop_server
    done
  done
done

if [ "${PREFILL:-1}" = 1 ]; then
  # Prefill: one request at a time, P-token prompts, 1 output token; TTFT.
  for format in $FORMATS; do
    for engine in llama isobench; do
      start_server "$engine" "$format" 1 "$OUT/server-$engine-$format-prefill.log"
      name=$(model_name)
      for p in 128 512 1024 2048; do
        sed -e "s/value = 32 }/value = $p }/" -e "s/value = 64 }/value = 1 }/" "$OUT/compare.toml" >"$OUT/prefill-$p.toml"
        taskset -c "$CORES" "$bin" run "$OUT/prefill-$p.toml" --quiet --target "http://127.0.0.1:$PORT" \
          --model "$name" --concurrency 1 --max-requests 5 --warmup 1 \
          -o "$OUT/prefill-$engine-$format-p$p.json" >/dev/null || true
      done
      stop_server
    done
  done
fi

python3 - "$OUT" "$cpu" "$simd" "$CONCURRENCY" "$FORMATS" <<'PY'
import glob, json, os, statistics, sys
out, cpu, simd, levels, formats = sys.argv[1:]
def med(xs): return statistics.median(xs) if xs else float("nan")
def cell(engine, fmt, c, client):
    tok, tpot = [], []
    for path in glob.glob(f"{out}/{engine}-{fmt}-c{c}-r*.json"):
        if path.endswith(".sse.json"):
            continue
        try:
            if client == "isobench":
                r = json.load(open(path)); tok.append(r["output_throughput"]); tpot.append(r["median_tpot_ms"])
            else:
                s = json.load(open(path[:-5] + ".sse.json")); tok.append(s["output_tokens_per_s"]); tpot.append(s["tpot_p50_ms"])
        except (OSError, KeyError, ValueError):
            pass
    return f"{med(tok):.0f}, {med(tpot):.1f} ms ({len(tok)})"
print(f"\nCPU: {cpu}; SIMD: {simd}")
print("out tok/s, TPOT p50 (medians over rounds; runs counted in brackets)\n")
for client in ["isobench", "sse_client"]:
    print(f"client: {client}\n")
    print("| format | concurrency | llama-server | isobench serve |")
    print("|---|---|---|---|")
    for fmt in formats.split():
        for c in levels.split():
            print(f"| {fmt} | {c} | {cell('llama', fmt, c, client)} | {cell('isobench', fmt, c, client)} |")
    print()
rows = []
for fmt in formats.split():
    for p in [128, 512, 1024, 2048]:
        row = [fmt, str(p)]
        for engine in ["llama", "isobench"]:
            try:
                r = json.load(open(f"{out}/prefill-{engine}-{fmt}-p{p}.json"))
                row.append(f"{p / r['median_ttft_ms'] * 1e3:.0f}")
            except (OSError, KeyError, ValueError, ZeroDivisionError):
                row.append("-")
        rows.append(row)
if any(r[2] != "-" or r[3] != "-" for r in rows):
    print("prefill tokens/s (prompt tokens / TTFT p50, one request at a time)\n")
    print("| format | prompt tokens | llama-server | isobench serve |\n|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
PY

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
server_bin="$CACHE/build-$LLAMA_CPP_VERSION/bin/llama-server"
if [ ! -x "$server_bin" ]; then
  [ -d "$CACHE/venv" ] || python3 -m venv "$CACHE/venv"
  "$CACHE/venv/bin/pip" install -q cmake ninja
  sdist="$CACHE/llama_cpp_python-$LLAMA_CPP_VERSION.tar.gz"
  [ -f "$sdist" ] || "$CACHE/venv/bin/pip" download -q --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$LLAMA_CPP_VERSION" -d "$CACHE"
  src="$CACHE/llama_cpp_python-$LLAMA_CPP_VERSION/vendor/llama.cpp"
  [ -f "$src/CMakeLists.txt" ] || tar xzf "$sdist" -C "$CACHE"
  "$CACHE/venv/bin/cmake" -S "$src" -B "$CACHE/build-$LLAMA_CPP_VERSION" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DCMAKE_MAKE_PROGRAM="$CACHE/venv/bin/ninja" >"$CACHE/cmake.log" 2>&1
  "$CACHE/venv/bin/cmake" --build "$CACHE/build-$LLAMA_CPP_VERSION" --target llama-server \
    -j "$threads" >"$CACHE/build.log" 2>&1
fi
[ "${BUILD_ONLY:-0}" = 1 ] && { echo "built $server_bin"; exit 0; }

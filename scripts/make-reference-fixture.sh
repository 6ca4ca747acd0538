#!/usr/bin/env bash
# Regenerates the reference fixtures of isobench-model (see
# scripts/make-reference-fixture.py and docs/models.md).
#
#   scripts/make-reference-fixture.sh [OUT_DIR]
#
# OUT_DIR defaults to crates/isobench-model/tests/fixtures. Uses python3 when
# it already has torch, transformers, safetensors and tokenizers; otherwise
# creates .venv (git-ignored) and pip-installs them there (torch from PyPI is
# large: several GB with its CUDA libraries). The script runs on the CPU.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/crates/isobench-model/tests/fixtures}"

python=python3
if ! "$python" -c 'import torch, transformers, safetensors, tokenizers' 2>/dev/null; then
    [ -x "$root/.venv/bin/python" ] || python3 -m venv "$root/.venv"
    python="$root/.venv/bin/python"
    if ! "$python" -c 'import torch, transformers, safetensors, tokenizers' 2>/dev/null; then
        "$python" -m pip install --quiet torch transformers safetensors tokenizers
    fi
fi
CUDA_VISIBLE_DEVICES="" PYTHONUNBUFFERED=1 "$python" "$root/scripts/make-reference-fixture.py" "$out"

#!/usr/bin/env bash
# Rebuilds the tokenizer shared by models/tiny-llama and models/small-llama.
# Installs the `tokenizers` Python package into .venv (git-ignored) when the
# current python3 lacks it, then runs scripts/make-tokenizer.py.
set -euo pipefail
cd "$(dirname "$0")/.."

python=python3
if ! "$python" -c 'import tokenizers' 2>/dev/null; then
    [ -x .venv/bin/python ] || python3 -m venv .venv
    python=.venv/bin/python
    "$python" -c 'import tokenizers' 2>/dev/null || "$python" -m pip install --quiet 'tokenizers>=0.20'
fi
"$python" scripts/make-tokenizer.py models/tiny-llama models/small-llama

#!/usr/bin/env python3
"""Writes the model folder of issue 9's llama.cpp comparison: a seeded
random Llama of 29.9 M parameters (hidden 512, 8 layers, 8 heads without
GQA, FFN 1408, vocab 4096, f32) with the shipped byte-level BPE tokenizer
cut to its first 4096 ids (the specials, the 256 bytes and the earliest
merges, which is a valid BPE of its own: a merge is kept only when both its
parts and its result are kept). Standard library only.

    python3 scripts/make-bench-model.py OUT_DIR
"""
import json
import pathlib
import shutil
import sys

VOCAB = 4096
root = pathlib.Path(__file__).resolve().parent.parent
source = root / "models" / "small-llama"
out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)

config = json.loads((source / "config.json").read_text())
config.update(
    vocab_size=VOCAB,
    hidden_size=512,
    intermediate_size=1408,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=8,
    head_dim=64,
    max_position_embeddings=4096,
    isobench_seed=9,
)
(out / "config.json").write_text(json.dumps(config, indent=2) + "\n")

tokenizer = json.loads((source / "tokenizer.json").read_text())
vocab = tokenizer["model"]["vocab"]
kept = {token: i for token, i in vocab.items() if i < VOCAB}
merges = []
for merge in tokenizer["model"]["merges"]:
    a, b = merge if isinstance(merge, list) else merge.split(" ", 1)
    if a in kept and b in kept and (a + b) in kept:
        merges.append([a, b])
tokenizer["model"]["vocab"] = kept
tokenizer["model"]["merges"] = merges
tokenizer["added_tokens"] = [t for t in tokenizer["added_tokens"] if t["id"] < VOCAB]
(out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
for name in ["tokenizer_config.json", "generation_config.json"]:
    shutil.copy(source / name, out / name)
print(f"{out}: {len(kept)} tokens, {len(merges)} merges")

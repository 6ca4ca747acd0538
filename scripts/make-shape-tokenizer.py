#!/usr/bin/env python3
"""Write the tokenizer of the Llama-shaped benchmark folders
(models/llama-3.2-1b-shape, models/llama-3-8b-shape): the small-llama
byte-level BPE tokenizer (8192 trained tokens, Llama 3 special tokens at
ids 0-4) with its vocabulary filled up to the models' 128256 ids.

The model has random weights, so it samples ids all over its vocabulary;
the server turns every sampled id into text. Ids 8192 and above get filler
tokens: a space and two or three pronounceable syllables spelled from the
id (" bako", " turesi", ...), unique and never produced when encoding (no
merge builds them), so encoding text gives exactly small-llama's tokens and
every id decodes to some text. Needs only the Python standard library.

Usage: python3 scripts/make-shape-tokenizer.py VOCAB_SIZE OUT_DIR [OUT_DIR ...]
"""

import json
import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE = ROOT / "models" / "small-llama"
CONSONANTS = "bdfghklmnprstvz"
VOWELS = "aeiou"
SYLLABLES = [c + v for c in CONSONANTS for v in VOWELS]  # 75


def filler(index):
    """Byte-level spelling (Ġ is the space) of filler token `index`."""
    parts = []
    while True:
        index, digit = divmod(index, len(SYLLABLES))
        parts.append(SYLLABLES[digit])
        if index == 0:
            break
    while len(parts) < 2:
        parts.append(SYLLABLES[0])
    return "Ġ" + "".join(reversed(parts))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    vocab_size = int(sys.argv[1])
    tokenizer = json.loads((SOURCE / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    first = len(vocab)
    if vocab_size < first:
        sys.exit(f"VOCAB_SIZE {vocab_size} is below the base vocabulary ({first})")
    taken = set(vocab)
    index = 0
    for token_id in range(first, vocab_size):
        while filler(index) in taken:
            index += 1
        vocab[filler(index)] = token_id
        taken.add(filler(index))
        index += 1
    text = json.dumps(tokenizer, ensure_ascii=False, separators=(",", ":"))
    for out in sys.argv[2:]:
        out = pathlib.Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "tokenizer.json").write_text(text + "\n")
        for name in ("tokenizer_config.json", "generation_config.json"):
            shutil.copyfile(SOURCE / name, out / name)
        print(f"{out}/tokenizer.json: {vocab_size} ids ({vocab_size - first} filler)")


if __name__ == "__main__":
    main()

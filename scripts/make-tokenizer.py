#!/usr/bin/env python3
"""Train the byte-level BPE tokenizer shipped with models/tiny-llama and
models/small-llama, and write its tokenizer_config.json (chat template,
bos/eos tokens).

The corpus is English text that every CPython install carries: the
docstrings of the standard library's modules (sorted by path, tests and
vendored packages excluded) and the interpreter's LICENSE.txt. Nothing is
downloaded. The tokenizer is Llama-3-like: GPT-2 byte-level pre-tokenizer
and decoder (every byte is in the alphabet, so any UTF-8 text round-trips),
a `<|begin_of_text|>` prepended by the post-processor when special tokens
are requested, and the Llama 3 chat header tokens.

Usage (scripts/make-tokenizer.sh installs the `tokenizers` package into
.venv and runs this):

    python scripts/make-tokenizer.py OUT_DIR [OUT_DIR ...]

The committed files were made with CPython 3.11.7 and tokenizers 0.23.3;
another Python version has other docstrings and so gives another (equally
valid) vocabulary.
"""

import ast
import json
import pathlib
import sys
import sysconfig

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

VOCAB_SIZE = 8192
BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
EOT = "<|eot_id|>"
SPECIAL_TOKENS = [BOS, EOS, START_HEADER, END_HEADER, EOT]

# Llama 3's chat template: a header per message, content trimmed, each turn
# closed by <|eot_id|>, bos_token before the first message.
CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}"
    "{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

EXCLUDED_DIRS = {"test", "tests", "idlelib", "lib2to3", "site-packages", "ensurepip", "turtledemo"}


def stdlib_texts():
    """Yields the standard library's docstrings, then its LICENSE.txt."""
    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.rglob("*.py")):
        if EXCLUDED_DIRS.intersection(path.relative_to(stdlib).parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    yield doc
    license_file = stdlib / "LICENSE.txt"
    if license_file.exists():
        yield license_file.read_text(encoding="utf-8")


def train():
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(stdlib_texts(), trainer=trainer)
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS}:0 $A:0",
                pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1",
                special_tokens=[(BOS, bos_id)],
            ),
        ]
    )
    return tokenizer


def tokenizer_config():
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOT,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 2048,
        "chat_template": CHAT_TEMPLATE,
    }


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: make-tokenizer.py OUT_DIR [OUT_DIR ...]")
    tokenizer = train()
    print(f"vocab size {tokenizer.get_vocab_size()}; special token ids:",
          {t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS})
    for out in sys.argv[1:]:
        out = pathlib.Path(out)
        out.mkdir(parents=True, exist_ok=True)
        tokenizer.save(str(out / "tokenizer.json"))
        with open(out / "tokenizer_config.json", "w", encoding="utf-8") as f:
            json.dump(tokenizer_config(), f, indent=2)
            f.write("\n")
        print(f"wrote {out}/tokenizer.json and {out}/tokenizer_config.json")


if __name__ == "__main__":
    main()

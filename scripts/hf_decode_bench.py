#!/usr/bin/env python3
"""Batched greedy decode speed of Hugging Face transformers on the shapes of
isobench's model folders: the PyTorch side of `step_bench`'s table.

Runs on the GPU machine (torch and transformers installed, no network). For
each model folder it builds `LlamaForCausalLM` from the folder's config.json
with random bf16 weights (nothing is downloaded; isobench's own keys are
dropped), then for each batch size and mode runs `generate` on random
prompts of `--context` tokens with greedy decoding and a fixed output
length (EOS ignored):

- `eager`: the default dynamic cache, eager PyTorch;
- `compiled`: `cache_implementation="static"`, with which transformers
  compiles the decode forward pass (torch.compile, fullgraph,
  mode="reduce-overhead", i.e. with CUDA graphs). One untimed generate per
  case first, so compilation and warm-up are not timed.

A logits processor records a synchronised timestamp at every generation
step, from the first (right after the prefill); a decode step's time is
the median gap between consecutive timestamps, and decode
tokens/s is batch / step time. Prints one JSON line per case (the same
keys as step_bench's rows where they mean the same) and a table at the end.

Usage:
  python3 scripts/hf_decode_bench.py [--model DIR ...] [--batch 1,8,32,64,128]
      [--context 512] [--steps 32] [--modes eager,compiled]
      [--compiled-batch LIST] [--case-timeout SECONDS]

Defaults: both Llama-shaped folders, batches 1,8,32,64,128, context 512,
32 decode steps, both modes, the compiled mode at every batch. A case whose
warm-up run alone takes longer than --case-timeout (default 90 s) skips the
later batch sizes of that mode, so the whole run stays bounded.
"""

import argparse
import json
import pathlib
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_MODELS = [ROOT / "models" / "llama-3.2-1b-shape", ROOT / "models" / "llama-3-8b-shape"]


class StepClock(LogitsProcessor):
    """Records a synchronised timestamp at every generation step."""

    def __init__(self):
        self.stamps = []

    def __call__(self, input_ids, scores):
        torch.cuda.synchronize()
        self.stamps.append(time.perf_counter())
        return scores


def positive_list(text):
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"`{text}`: expected positive integers, e.g. 1,8,32")
    return values


def build(folder):
    raw = json.loads((folder / "config.json").read_text())
    fields = {k: v for k, v in raw.items() if not k.startswith("isobench_")}
    fields.pop("torch_dtype", None)
    fields["initializer_range"] = raw.get("isobench_init_std", 0.02)
    fields["bos_token_id"] = None
    fields["eos_token_id"] = None
    fields["pad_token_id"] = 0
    config = LlamaConfig(**fields)
    torch.set_default_dtype(torch.bfloat16)
    start = time.perf_counter()
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)
    model.eval()
    torch.cuda.synchronize()
    params = sum(p.numel() for p in model.parameters())
    print(f"{folder.name}: {params / 1e6:.1f} M parameters, bf16, built in "
          f"{time.perf_counter() - start:.1f} s", flush=True)
    return model, config


def run_case(model, config, batch, context, steps, mode):
    generator = torch.Generator(device="cuda").manual_seed(batch)
    prompts = torch.randint(5, config.vocab_size, (batch, context), device="cuda",
                            generator=generator)
    extra = {"cache_implementation": "static"} if mode == "compiled" else {}

    def generate(clock):
        return model.generate(
            input_ids=prompts,
            attention_mask=torch.ones_like(prompts),
            do_sample=False,
            max_new_tokens=steps + 1,
            min_new_tokens=steps + 1,
            logits_processor=LogitsProcessorList([clock]),
            **extra,
        )

    start = time.perf_counter()
    with torch.inference_mode():
        generate(StepClock())  # compile / warm up, untimed
        warm_up_s = time.perf_counter() - start
        clock = StepClock()
        generate(clock)
    gaps = [b - a for a, b in zip(clock.stamps, clock.stamps[1:])]
    step_ms = statistics.median(gaps) * 1e3
    return step_ms, warm_up_s


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=pathlib.Path, action="append",
                        help="model folder (repeatable; default: both Llama-shaped folders)")
    parser.add_argument("--batch", type=positive_list, default=[1, 8, 32, 64, 128])
    parser.add_argument("--compiled-batch", type=positive_list, default=None,
                        help="batch sizes for the compiled mode (default: --batch)")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--modes", default="eager,compiled")
    parser.add_argument("--case-timeout", type=float, default=90.0)
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for mode in modes:
        if mode not in ("eager", "compiled"):
            parser.error(f"--modes: `{mode}` is not a mode; accepted: eager, compiled")
    if not torch.cuda.is_available():
        parser.error("no CUDA device: this script times decoding on a GPU")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    rows = []
    for folder in args.model or DEFAULT_MODELS:
        model, config = build(folder)
        for mode in modes:
            batches = args.compiled_batch if mode == "compiled" and args.compiled_batch else args.batch
            for batch in batches:
                try:
                    step_ms, warm_up_s = run_case(model, config, batch, args.context,
                                                  args.steps, mode)
                except torch.cuda.OutOfMemoryError:
                    print(f"{folder.name} {mode} batch {batch}: out of memory", flush=True)
                    torch.cuda.empty_cache()
                    break
                row = {
                    "bench": "hf_decode_bench",
                    "model": folder.name,
                    "mode": mode,
                    "dtype": "bf16",
                    "batch": batch,
                    "context": args.context,
                    "step_ms": step_ms,
                    "decode_tokens_per_s": batch * 1e3 / step_ms,
                    "warm_up_s": warm_up_s,
                    "torch": torch.__version__,
                }
                rows.append(row)
                print("JSON " + json.dumps(row), flush=True)
                if warm_up_s > args.case_timeout:
                    print(f"{folder.name} {mode}: warm-up took {warm_up_s:.0f} s, "
                          f"over --case-timeout; skipping larger batches", flush=True)
                    break
        del model
        torch.cuda.empty_cache()
    print("model                 mode      batch   ms/step  decode tok/s")
    for r in rows:
        print(f"{r['model']:<21} {r['mode']:<9} {r['batch']:>5}  {r['step_ms']:>8.2f}  "
              f"{r['decode_tokens_per_s']:>12.0f}")


if __name__ == "__main__":
    main()

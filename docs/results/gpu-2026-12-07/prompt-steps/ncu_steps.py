"""Splits an ncu CSV of step_bench (gpu__time_duration.sum, base units)
into model steps (each ends with the greedy argmax kernel that step_bench
waits on) and prints each step's kernel time by kind, in ms.
Usage: python3 ncu_steps.py ncu.csv [labels...]"""
import csv
import sys
from collections import OrderedDict

KINDS = [
    ("gemm", ("gemm", "sm90", "cutlass", "xmma", "cublas", "splitk", "reduce_kernel")),
    ("attention", ("paged_attention", "prefill_attention")),
    ("kv/rope", ("rope", "write_kv")),
    ("norm/add", ("rms", "add_")),
    ("swiglu", ("swiglu", "silu")),
    ("argmax", ("argmax",)),
]


def kind(name):
    low = name.lower()
    for label, keys in KINDS:
        if any(k in low for k in keys):
            return label
    return "other"


rows = []
with open(sys.argv[1]) as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) / 1e6, r.get("Grid Size", "")))

steps, current = [], []
for name, ms, grid in rows:
    current.append((name, ms, grid))
    if "argmax" in name.lower():
        steps.append(current)
        current = []
if current:
    steps.append(current)
labels = sys.argv[2:]
print(f"{len(rows)} kernels, {len(steps)} steps")
for i, step in enumerate(steps):
    by = OrderedDict((k, 0.0) for k, _ in KINDS)
    by["other"] = 0.0
    for name, ms, _ in step:
        by[kind(name)] += ms
    total = sum(by.values())
    label = labels[i] if i < len(labels) else ""
    parts = "  ".join(f"{k} {v:.3f}" for k, v in by.items() if v)
    print(f"step {i:2} {label:12} {len(step):4} kernels {total:7.3f} ms: {parts}")
# The kernels of the first step of each distinct kernel count, by name.
seen = set()
for i, step in enumerate(steps):
    if len(step) in seen:
        continue
    seen.add(len(step))
    agg = OrderedDict()
    for name, ms, grid in step:
        key = name[:90]
        n, t = agg.get(key, (0, 0.0))
        agg[key] = (n + 1, t + ms)
    print(f"-- step {i}: {len(step)} kernels")
    for key, (n, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:14]:
        print(f"   {t:7.3f} ms  {n:4}x  {key}")

#!/usr/bin/env python3
"""The tables scripts/gpu-bench.sh prints (docs/gpu.md, "scripts/gpu-bench.sh").

  gpu_bench_report.py serving RAW MODEL DTYPE
      A serving part's summary from its raw folder (RAW/POLICY/WORKLOAD-cC.json
      and RAW/POLICY/server-metrics.txt): every run's figures, each policy's
      engine phases, and continuous batching against the better of static
      and dynamic at concurrency 8 and above.

  gpu_bench_report.py targets PATH...
      Issue 6's targets judged from the results of any parts, wherever they
      ran: every PART.tar.gz and PART-summary.txt found under the PATHs (and
      inside other .tar.gz or .tar.xz tarballs, as call scripts pack them). The
      GPU checks; the 8B shape's batch-1 step against the memory-bandwidth
      floor; graphs against eager at batch 1 on the 1B shape; decode tokens/s
      side by side with Hugging Face transformers; continuous batching
      against static and dynamic in every serving cell of concurrency 8 and
      more, and, given runs with --cuda-graphs off too, what the graphs buy
      under that load. A target whose part did not run says which part to
      run. Raw files already unpacked count too, where their path from PATH
      names their part (PATH/.../serving-1b/continuous/short-c8.json).

Only the standard library: it runs on the GPU machine's python3 and here.
"""

import io
import json
import pathlib
import re
import sys
import tarfile

PARTS = ("checks", "check-kernels", "check-model", "check-server", "steps", "hf", "serving-1b", "serving-8b")
POLICIES = ["static", "dynamic", "continuous"]
TARBALLS = (".tar.gz", ".tgz", ".tar.xz")

# Issue 6's thresholds.
FLOOR_SHARE = 80.0  # 8B batch-1 decode with graphs, % of the floor
GRAPH_GAIN = 1.5  # graphs against eager at batch 1 on the 1B shape
HF_GAIN = 2.0  # 8B decode tokens/s at batch 64 against transformers
HF_BATCH = 64


def serving_row(report):
    """One run's figures from its JSON report."""
    s, gpu = report["summary"], report.get("gpu") or {}
    lat = s["latency"]

    def ms(metric, p):
        stats = lat.get(metric)
        return stats[p] if stats else None

    return {
        "tok_s": s["throughput"]["output_tokens_per_s"],
        "ttft50": ms("ttft", "p50_ms"), "ttft99": ms("ttft", "p99_ms"),
        "tpot50": ms("tpot", "p50_ms"), "tpot99": ms("tpot", "p99_ms"),
        "j_tok": gpu.get("energy_per_output_token_j"),
        "busy": 100 * gpu["device_busy_share"] if gpu.get("device_busy_share") is not None else None,
        "idle": 100 * gpu["engine_idle_share"] if gpu.get("engine_idle_share") is not None else None,
        "peak_gib": gpu["peak_memory_bytes"] / 2**30 if gpu else None,
        "ok": s["requests"]["completed"], "failed": s["requests"]["failed"],
        "valid": report["validity"]["valid"],
    }


def continuous_verdicts(rows):
    """(workload, concurrency, tok/s ratio, p99 TTFT ratio, won) of continuous
    batching against the better of static and dynamic, concurrency >= 8;
    `rows` maps (workload, concurrency, policy) to `serving_row`s."""
    verdicts = []
    for (workload, c, policy) in sorted(rows):
        if policy != "continuous" or c < 8:
            continue
        others = [rows[k] for k in [(workload, c, "static"), (workload, c, "dynamic")] if k in rows]
        if not others:
            continue
        best_tok = max(o["tok_s"] for o in others)
        best_ttft = min((o["ttft99"] for o in others if o["ttft99"] is not None), default=None)
        r = rows[(workload, c, policy)]
        tok = r["tok_s"] / best_tok if best_tok else None
        ttft = r["ttft99"] / best_ttft if best_ttft and r["ttft99"] is not None else None
        won = bool(tok and tok > 1 and ttft is not None and ttft < 1)
        verdicts.append((workload, c, tok, ttft, won))
    return verdicts


def f(v, fmt):
    width = int(fmt.split(".")[0] or 0)
    return "-".rjust(width) if v is None else format(v, fmt)


def serving(raw, model, dtype):
    raw = pathlib.Path(raw)
    rows = {}
    for path in sorted(raw.glob("*/*.json")):
        workload, c = path.stem.rsplit("-c", 1)
        rows[(workload, int(c), path.parent.name)] = serving_row(json.loads(path.read_text()))
    print(f"\nserving {model} ({dtype}, closed loop; TTFT/TPOT in ms; J/token and peak memory from NVML; "
          "busy % = the measured window's share spent in model forwards, CUDA events; idle % = its share "
          "the engine had nothing to run; the rest went to choosing tokens and the host's work between steps)")
    print(f"{'workload':9} {'conc':>4} {'policy':11} {'out tok/s':>9} {'TTFT p50':>9} {'TTFT p99':>9} "
          f"{'TPOT p50':>8} {'TPOT p99':>8} {'J/token':>8} {'peak GiB':>8} {'busy %':>6} {'idle %':>6} {'ok/fail':>8}")
    for workload, c, policy in sorted(rows, key=lambda k: (k[0], k[1], POLICIES.index(k[2]))):
        r = rows[(workload, c, policy)]
        print(f"{workload:9} {c:>4} {policy:11} {f(r['tok_s'], '9.1f')} {f(r['ttft50'], '9.1f')} {f(r['ttft99'], '9.1f')} "
              f"{f(r['tpot50'], '8.2f')} {f(r['tpot99'], '8.2f')} {f(r['j_tok'], '8.4f')} {f(r['peak_gib'], '8.1f')} "
              f"{f(r['busy'], '6.0f')} {f(r['idle'], '6.0f')} {r['ok']:>4}/{r['failed']:<3}{'' if r['valid'] else ' INVALID'}")
    print("\nengine step phases per policy over all its runs (mean ms per step, host clock; "
          "logits includes the wait for the GPU; device = CUDA-event time of forwards; "
          "GPU share = device time over the host phases' sum; the rest is the tokens' choice on the GPU and the host's own work between steps):")
    for metrics_path in sorted(raw.glob("*/server-metrics.txt")):
        sums, counts = {}, {}
        for line in metrics_path.read_text().splitlines():
            for name, into in (("isobench_step_seconds_sum", sums), ("isobench_step_seconds_count", counts),
                               ("isobench_step_device_seconds_sum", sums), ("isobench_step_device_seconds_count", counts)):
                if line.startswith(name + "{"):
                    phase = line.split('phase="')[1].split('"')[0]
                    key = ("device " if "device" in name else "") + phase
                    into[key] = float(line.split()[-1])
        parts = [f"{k} {1000 * sums[k] / counts[k]:.2f}" for k in sums if counts.get(k)]
        host = sum(v for k, v in sums.items() if not k.startswith("device "))
        device = sum(v for k, v in sums.items() if k.startswith("device "))
        if host and device:
            share = 100 * device / host
            # Above 100% the host phases miss a wait for the GPU.
            parts.append(f"GPU share {share:.0f}%" + (" (over 100%: a wait outside the phases)" if share > 105 else ""))
        print(f"  {metrics_path.parent.name:11} " + ", ".join(parts))
    print("\ncontinuous against the better of static and dynamic, concurrency >= 8 (output tok/s ratio, p99 TTFT ratio):")
    for workload, c, tok, ttft, won in continuous_verdicts(rows):
        print(f"  {workload:9} c={c:<4} tok/s x{f(tok, '.2f')}  p99 TTFT x{f(ttft, '.2f')}  {'WIN' if won else 'no win'}")


class Results:
    """What the parts left, gathered from files and tarballs."""

    def __init__(self):
        self.steps = {}  # (model, kernels, batch) -> step_bench's JSON row
        self.hf = {}  # (model, mode, batch) -> hf_decode_bench's JSON row
        # (model, graphs) -> {(workload, c, policy): serving_row}; graphs is
        # "on" (the run replayed CUDA graphs), "off" (a GPU run that did
        # not: --cuda-graphs off) or "cpu" (no gpu section).
        self.serving = {}
        self.checks = []  # each checks summary's lines, once
        self.failures = []  # FAIL lines of the other parts' summaries
        self.gpus = {}  # checks, steps, hf or serving -> set of GPU names
        self.repeated = 0  # serving cells found more than once (the last kept)
        self.empty = {}  # (model, workload, c, policy) of runs that completed no request

    def gpu(self, part, name):
        name = name.strip()
        if name:
            group = "checks" if part.startswith("check") else "serving" if part.startswith("serving") else part
            self.gpus.setdefault(group, set()).add(name)

    def add(self, name, data, source):
        """One file: its path (inside a tarball or not) and its bytes."""
        name = name.removeprefix("./")
        if name.endswith(TARBALLS):
            self.add_tarball(io.BytesIO(data), f"{source}:{name}")
            return
        parts = name.split("/")
        base = parts[-1]
        if base.endswith("-summary.txt") and base.removesuffix("-summary.txt") in PARTS:
            self.add_summary(base.removesuffix("-summary.txt"), data.decode(errors="replace"))
            return
        where = [i for i, p in enumerate(parts) if p in PARTS]
        if not where:
            return
        part, rest = parts[where[-1]], parts[where[-1] + 1:]
        try:
            self.add_raw(part, rest, base, data.decode(errors="replace"))
        except (ValueError, KeyError, TypeError) as err:
            print(f"gpu_bench_report: skipping {source}:{name}: {err!r}", file=sys.stderr)

    def add_raw(self, part, rest, base, text):
        """One raw file of a part's folder: `rest` is its path inside it."""
        if base == "nvidia-smi.csv":
            self.gpu(part, text.split(",")[0])
        elif part == "steps" and base.startswith("step_bench-") and base.endswith(".txt"):
            kernels = base.removesuffix(".txt").rsplit("-", 1)[1]
            for row in json_rows(text, "step_bench"):
                self.steps[(row["model"], kernels, row["batch"])] = row
        elif part == "hf" and base == "hf_decode_bench.txt":
            for line in text.splitlines():
                if line.startswith("torch "):
                    self.gpu("hf", line.split(", ", 1)[-1])
            for row in json_rows(text, "hf_decode_bench"):
                self.hf[(row["model"], row["mode"], row["batch"])] = row
        elif part.startswith("serving-") and len(rest) == 2 and re.fullmatch(r".+-c\d+\.json", base):
            report = json.loads(text)
            workload, c = base.removesuffix(".json").rsplit("-c", 1)
            model = (report.get("run") or {}).get("model") or part
            row = serving_row(report)
            key = (workload, int(c), rest[0])
            if not row["ok"]:
                # It measured nothing (a server that failed): no cell; a
                # later run of the cell takes it off this list.
                self.empty[(model, *key)] = row
                return
            self.empty.pop((model, *key), None)
            gpu = report.get("gpu")
            graphs = "cpu" if not gpu else "on" if gpu.get("cuda_graph_replays") else "off"
            cells = self.serving.setdefault((model, graphs), {})
            self.repeated += key in cells
            cells[key] = row
            self.gpu("serving", (gpu or {}).get("name", ""))

    def add_summary(self, part, text):
        lines = text.splitlines()
        for line in lines:
            if line.startswith("GPU: "):
                self.gpu(part, line[5:].split(",")[0])
        if part.startswith("check"):
            if lines not in self.checks:
                self.checks.append(lines)
            return
        for line in lines:
            failure = f"{part}: {line}"
            if line.startswith("FAIL") and failure not in self.failures:
                self.failures.append(failure)

    def add_tarball(self, fileobj, source):
        try:
            with tarfile.open(fileobj=fileobj, mode="r:*") as tar:
                for member in tar:
                    if member.isfile():
                        self.add(member.name, tar.extractfile(member).read(), source)
        except (tarfile.TarError, OSError, EOFError) as err:
            print(f"gpu_bench_report: skipping {source}: not a readable tarball ({err})", file=sys.stderr)

    def add_path(self, path):
        path = pathlib.Path(path)
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if file.name.endswith(TARBALLS):
                with open(file, "rb") as fileobj:
                    self.add_tarball(fileobj, str(file))
            elif file.name.endswith("-summary.txt"):
                self.add(file.name, file.read_bytes(), str(file))
            elif file.suffix in (".json", ".txt", ".csv"):
                # A part's raw files unpacked from its tarball: their path
                # from PATH, which names the part (PATH/.../serving-1b/...).
                inside = file.relative_to(path) if path.is_dir() else pathlib.Path(file.name)
                self.add(str(pathlib.Path(path.name) / inside), file.read_bytes(), str(file))


def json_rows(text, bench):
    rows = []
    for line in text.splitlines():
        if line.startswith("JSON "):
            row = json.loads(line[5:])
            if row.get("bench") == bench:
                rows.append(row)
        elif line.startswith("{"):
            row = json.loads(line)
            if row.get("bench") == bench:
                rows.append(row)
    return rows


def eager_launch_ms(row):
    """The host's time to launch an eager step of a step_bench row:
    `launch_ms`, or in rows written before it, the first of `issue_ms`
    (the modes run eager first)."""
    if row.get("launch_ms") is not None:
        return row["launch_ms"]
    issue = row.get("issue_ms") or []
    return issue[0] if issue and row.get("eager_ms") is not None else None


def shape(rows, size):
    """The model folder of that size ("8b", "1b") among `rows`' keys, which
    start with the model folder's name."""
    return next((m for m in sorted({key[0] for key in rows}) if size in m.lower()), None)


def verdict(met):
    return "MET" if met else "NOT MET"


def targets(paths):
    results = Results()
    for path in paths:
        if not pathlib.Path(path).exists():
            print(f"gpu_bench_report: {path}: no such file or folder", file=sys.stderr)
            return 2
        results.add_path(path)
    print("\nissue 6 targets, from " + ", ".join(paths))
    for part in ("checks", "steps", "hf", "serving"):
        if part in results.gpus:
            print(f"  {part} ran on: {'; '.join(sorted(results.gpus[part]))}")
    names = set().union(*results.gpus.values()) if results.gpus else set()
    if len(names) > 1:
        print("  NOTE: these results come from more than one GPU model: compare figures only within one")

    print("\ncorrectness (--part checks):")
    if not results.checks:
        print("  not measured: run --part checks")
    for lines in results.checks:
        for line in lines:
            if line.startswith(("PASS", "FAIL", "GPU CHECKS")):
                print(f"  {line if len(line) <= 120 else line[:117] + '...'}")
        if not any(line.startswith("GPU CHECKS") for line in lines):
            print("  a checks part did not finish (its summary has no verdict: a binary missing, or it was stopped)")

    eight = shape(results.steps, "8b")
    one = shape(results.steps, "1b")
    step = results.steps.get
    print("\ndecode steps (--part steps: own kernels, context 512, CUDA events):")
    row = step((eight, "own", 1)) if eight else None
    if row and row.get("graph_ms") and row.get("floor_ms"):
        share = 100 * row["floor_ms"] / row["graph_ms"]
        print(f"  8B batch-1 step with graphs at >= {FLOOR_SHARE:.0f}% of the memory-bandwidth floor: "
              f"{row['graph_ms']:.3f} ms against {row['floor_ms']:.3f} ms, {share:.1f}%  {verdict(share >= FLOOR_SHARE)}")
    else:
        print("  8B batch-1 step against the floor: not measured: run --part steps (graphs on)")
    row = step((one, "own", 1)) if one else None
    if row and row.get("graph_ms") and row.get("eager_ms"):
        gain = row["eager_ms"] / row["graph_ms"]
        plain = step((one, "plain", 1))
        aside = ""
        if plain and plain.get("graph_ms") and plain.get("eager_ms"):
            aside = f" (candle's plain ops: {plain['eager_ms']:.3f} / {plain['graph_ms']:.3f} ms, x{plain['eager_ms'] / plain['graph_ms']:.2f})"
        print(f"  1B graphs at >= {GRAPH_GAIN}x eager at batch 1: eager {row['eager_ms']:.3f} ms, graph "
              f"{row['graph_ms']:.3f} ms, x{gain:.2f}  {verdict(gain >= GRAPH_GAIN)}{aside}")
        launch, floor = eager_launch_ms(row), row.get("floor_ms")
        if gain < GRAPH_GAIN and launch and floor and launch < GRAPH_GAIN * floor:
            # An eager step takes the longer of its launches and its GPU
            # work; a replayed one at least the GPU work, itself at least
            # the floor. So the ratio reaches GRAPH_GAIN only if the
            # launches take GRAPH_GAIN x the replayed step.
            print(f"    out of reach of faster kernels: an eager step takes the longer of its launches "
                  f"({launch:.3f} ms of host time) and its GPU work, a replayed one its GPU work, at least the "
                  f"floor ({floor:.3f} ms); {GRAPH_GAIN}x needs launches of at least {GRAPH_GAIN * floor:.3f} ms")
    else:
        print("  1B graphs against eager at batch 1: not measured: run --part steps (graphs both)")

    print("\ndecode tokens/s against Hugging Face transformers (--part steps and --part hf):")
    if not results.hf:
        print("  transformers: not measured: run --part hf")
    models = sorted({k[0] for k in results.steps if k[1] == "own"})
    if models:
        width = max(len(m) for m in models)
        print(f"  {'model':{width}} {'batch':>5} {'isobench':>9} {'HF eager':>9} {'HF compiled':>11} {'x best HF':>9}")
    for model in models:
        for batch in sorted(k[2] for k in results.steps if k[0] == model and k[1] == "own"):
            ours = step((model, "own", batch))["decode_tokens_per_s"]
            eager = results.hf.get((model, "eager", batch), {}).get("decode_tokens_per_s")
            compiled = results.hf.get((model, "compiled", batch), {}).get("decode_tokens_per_s")
            best = max((v for v in (eager, compiled) if v), default=None)
            ratio = "-" if not best else f"x{ours / best:.2f}"
            print(f"  {model:{width}} {batch:>5} {f(ours, '9.0f')} {f(eager, '9.0f')} {f(compiled, '11.0f')} {ratio:>9}")
    row = step((eight, "own", HF_BATCH)) if eight else None
    hf = [results.hf.get((eight, mode, HF_BATCH), {}).get("decode_tokens_per_s") for mode in ("eager", "compiled")]
    best = max((v for v in hf if v), default=None)
    if row and best:
        gain = row["decode_tokens_per_s"] / best
        print(f"  8B batch {HF_BATCH} at >= {HF_GAIN:.0f}x transformers' decode tokens/s (the better of eager and "
              f"compiled): {row['decode_tokens_per_s']:,.0f} against {best:,.0f}, x{gain:.2f}  {verdict(gain >= HF_GAIN)}")
    else:
        print(f"  8B batch {HF_BATCH} against transformers: not measured: run --part steps and --part hf")

    print("\nserving (--part serving-1b, serving-8b): continuous batching against the better of static and "
          "dynamic at concurrency >= 8, output tok/s higher and p99 TTFT lower:")
    if not results.serving:
        print("  not measured: run --part serving-1b and --part serving-8b")
    models = sorted({model for model, _ in results.serving})
    for model in models:
        # The runs as served (graphs on, on a GPU), else what there is.
        graphs = next(g for g in ("on", "cpu", "off") if (model, g) in results.serving)
        verdicts = continuous_verdicts(results.serving[(model, graphs)])
        lost = [v for v in verdicts if not v[4]]
        label = "" if graphs == "on" else f" (runs with graphs {graphs})" if graphs == "off" else " (CPU runs)"
        if not verdicts:
            print(f"  {model}{label}: not measured: no cell of concurrency 8 or more ran continuous batching "
                  "and static or dynamic batching (run --policy static,dynamic,continuous)")
            continue
        print(f"  {model}{label}: {len(verdicts) - len(lost)} of {len(verdicts)} cells won  {verdict(not lost)}")
        for workload, c, tok, ttft, _ in lost:
            print(f"    not won: {workload} c={c}: tok/s x{f(tok, '.2f')}, p99 TTFT x{f(ttft, '.2f')}")
    gains = [model for model in models if (model, "on") in results.serving and (model, "off") in results.serving]
    if gains:
        print("\nwhat CUDA graphs buy under serving load: output tok/s of runs that replayed graphs over the same "
              "cells' runs with --cuda-graphs off (lowest to highest over the cells):")
    for model in gains:
        on, off = results.serving[(model, "on")], results.serving[(model, "off")]
        for policy in POLICIES:
            ratios = {c: [] for c in ("1", "8+")}
            for key, row in on.items():
                if key[2] == policy and key in off and off[key]["tok_s"]:
                    ratios["1" if key[1] < 8 else "8+"].append(row["tok_s"] / off[key]["tok_s"])
            spans = [f"x{min(r):.2f} to x{max(r):.2f} over {len(r)} cells at concurrency {c}" for c, r in ratios.items() if r]
            if spans:
                print(f"  {model} {policy}: " + "; ".join(spans))
    if results.repeated:
        print(f"  ({results.repeated} serving runs were found more than once; the last in path order was kept)")
    for (model, graphs), rows in sorted(results.serving.items()):
        for (workload, c, policy), row in sorted(rows.items()):
            if row["failed"]:
                print(f"  runs with failed requests: {model} {policy} {workload} c={c}"
                      f"{'' if graphs == 'on' else f' (graphs {graphs})'}: {row['ok']} completed, {row['failed']} failed")
    for (model, workload, c, policy), row in sorted(results.empty.items()):
        print(f"  left out, no request completed ({row['failed']} failed): {model} {policy} {workload} c={c}")
    if results.failures:
        print("\nfailures the parts reported:")
        for failure in results.failures:
            print(f"  {failure if len(failure) <= 120 else failure[:117] + '...'}")
    return 0


def main(argv):
    if len(argv) == 4 and argv[0] == "serving":
        serving(*argv[1:])
        return 0
    if len(argv) >= 2 and argv[0] == "targets":
        return targets(argv[1:])
    print(__doc__.strip().split("\n\n", 1)[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

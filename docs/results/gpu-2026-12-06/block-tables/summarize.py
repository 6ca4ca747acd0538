"""Prints one line per `isobench run` report given: tag, output tok/s,
TTFT p50/p99 and TPOT p50 (ms), the GPU's busy share of the window, and
completed/failed. Used by callN.sh on the GPU machine."""
import json
import os
import sys

for path in sys.argv[1:]:
    tag = os.path.basename(path)[: -len(".json")]
    try:
        report = json.load(open(path))
    except (OSError, ValueError) as err:
        print(f"{tag:40} no report ({err})")
        continue
    s = report["summary"]
    lat = s["latency"]
    req = s["requests"]
    busy = (report.get("gpu") or {}).get("device_busy_share") or 0.0
    print(
        f"{tag:40} {s['throughput']['output_tokens_per_s']:9.1f} tok/s"
        f"  TTFT {lat['ttft']['p50_ms']:7.1f} {lat['ttft']['p99_ms']:7.1f}"
        f"  TPOT {lat['tpot']['p50_ms']:5.2f}  busy {100 * busy:4.1f}%"
        f"  {req['completed']}/{req['failed']}"
    )

"""Prints one line per `isobench run` report given: tag, output tok/s,
TTFT p50/p99, TPOT p50/p99 (ms), ok/fail, and the embedded server's
description. Used by callN.sh on the GPU machine."""
import json
import os
import sys

for path in sys.argv[1:]:
    tag = os.path.basename(path)[: -len(".json")]
    try:
        report = json.load(open(path))
    except (OSError, ValueError) as err:
        print(f"{tag:32} no report ({err})")
        continue
    s = report["summary"]
    lat = s["latency"]
    req = s["requests"]
    print(
        f"{tag:32} {s['throughput']['output_tokens_per_s']:9.1f} tok/s"
        f"  TTFT {lat['ttft']['p50_ms']:8.1f} {lat['ttft']['p99_ms']:8.1f}"
        f"  TPOT {lat['tpot']['p50_ms']:6.2f} {lat['tpot']['p99_ms']:6.2f}"
        f"  {req['completed']}/{req['failed']}"
    )

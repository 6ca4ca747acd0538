"""Prints step_bench's JSON rows given: eager and graph-replayed step
times (CUDA events) and the host's time to issue each (eager, graph)."""
import json
import sys

for path in sys.argv[1:]:
    print("--", path.split("/")[-1])
    for line in open(path):
        if line.startswith("JSON "):
            r = json.loads(line[5:])
            issue = " ".join(f"{ms:.3f}" for ms in r["issue_ms"])
            print(
                f"batch {r['batch']:4} eager {r['eager_ms'] or 0:6.3f} graph {r['graph_ms'] or 0:6.3f} ms"
                f"  issue {issue} ms"
            )

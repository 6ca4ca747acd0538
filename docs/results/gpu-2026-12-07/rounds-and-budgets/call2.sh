#!/usr/bin/env bash
# Call 2: the GPU checks on main, then every policy on the 8B shape's
# batched workload at 8, 32, 64 and 128, four measured rounds a run.
set -u
mkdir -p "$OUT/checks"
GPU_BENCH_BIN=.gpu/main scripts/gpu-bench.sh --part checks "$OUT/checks" > "$OUT/checks/stdout.txt" 2>&1
echo "== checks rc=$? ${SECONDS}s"
cat "$OUT/checks/checks-summary.txt" 2>/dev/null || tail -30 "$OUT/checks/stdout.txt"
bash .gpu/call.sh batched4:serving-8b:static,dynamic,continuous:batched:8,32,64,128:4:250
# Everything but the log as one tarball (the device tool returns few files).
tar czf /tmp/call2.tar.gz -C "$OUT" --exclude=call2.log . && find "$OUT" -mindepth 1 -maxdepth 1 ! -name call2.log -exec rm -rf {} + && mv /tmp/call2.tar.gz "$OUT/"

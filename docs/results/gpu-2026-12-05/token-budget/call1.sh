# Call 1: `batched`, the one workload where continuous batching trails
# dynamic, at token budgets of 2,048 (gpu-bench's default) and 4,096 a
# step, against dynamic batching, on main's build (prompt row buckets
# b + 1). 1B shape at 128 with 32 measured rounds, in a rotating order;
# 8B shape at 64 and 128 with 8 rounds. Everything but this log comes
# back in one tarball.
set -u
cd .gpu && mkdir -p bin && xz -dc isobench-rows.xz > bin/isobench && chmod +x bin/isobench && cd ..
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
mkdir -p $OUT/raw
serve() { # NAME PART CONCURRENCY TURNS POLICY [TOKENS]
  GPU_BENCH_BIN=.gpu/bin scripts/gpu-bench.sh --part $2 $OUT/raw/$1 --policy $5 --workloads batched \
      --concurrency $3 --turns $4 --budget 150 ${6:+--max-num-batched-tokens $6} > $OUT/raw/$1.log 2>&1
  echo "$1 exit $? at ${SECONDS}s"; grep -E "^batched " $OUT/raw/$1.log
}
serve 1b-r1-4096 serving-1b 128 32 continuous 4096; serve 1b-r1-2048 serving-1b 128 32 continuous 2048
serve 1b-r1-dyn serving-1b 128 32 dynamic
serve 1b-r2-dyn serving-1b 128 32 dynamic; serve 1b-r2-2048 serving-1b 128 32 continuous 2048
serve 1b-r2-4096 serving-1b 128 32 continuous 4096
serve 8b-4096 serving-8b 64,128 8 continuous 4096; serve 8b-2048 serving-8b 64,128 8 continuous 2048
serve 8b-dyn serving-8b 64,128 8 dynamic
tar czf $OUT/call1.tar.gz -C $OUT raw && rm -rf $OUT/raw

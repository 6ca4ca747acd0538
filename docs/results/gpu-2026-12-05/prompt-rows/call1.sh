# Call 1: check-server on the build with prompt row buckets b + 1 (rows),
# then the 1B shape's continuous batching on short, batched and chat at
# 32, 64 and 128, builds alternated (rows, base, base, rows), then dynamic
# batching on batched at 64 and 128 on the rows build. Everything but this
# log comes back in one tarball.
set -u
cd .gpu
for b in new rows; do mkdir -p bin-$b; xz -dc isobench-$b.xz > bin-$b/isobench; chmod +x bin-$b/isobench; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cd ..
mkdir -p $OUT/raw
GPU_BENCH_BIN=.gpu/bin-rows scripts/gpu-bench.sh --part check-server $OUT/raw/check > $OUT/raw/check-server.log 2>&1
echo "check-server exit $? at ${SECONDS}s"; tail -6 $OUT/raw/check-server.log
i=0
for b in rows new new rows; do
  i=$((i+1))
  GPU_BENCH_BIN=.gpu/bin-$b scripts/gpu-bench.sh --part serving-1b $OUT/raw/s1b-$i-$b --policy continuous \
      --workloads short,batched,chat --concurrency 32,64,128 --turns 4 --budget 120 > $OUT/raw/serve-1b-$i-$b.log 2>&1
  echo "1b $i $b exit $? at ${SECONDS}s"; grep -E "^(short|batched|chat) |continuous +sched" $OUT/raw/serve-1b-$i-$b.log
  tar xzf $OUT/raw/s1b-$i-$b/serving-1b.tar.gz -O --wildcards '*continuous/server-metrics.txt' | grep -E "graph_replays_total |eager_steps_total "
done
GPU_BENCH_BIN=.gpu/bin-rows scripts/gpu-bench.sh --part serving-1b $OUT/raw/s1b-dynamic-rows --policy dynamic \
    --workloads batched --concurrency 64,128 --turns 4 --budget 60 > $OUT/raw/serve-1b-dynamic-rows.log 2>&1
echo "1b dynamic rows exit $? at ${SECONDS}s"; grep -E "^batched |dynamic +sched" $OUT/raw/serve-1b-dynamic-rows.log
tar czf $OUT/call1.tar.gz -C $OUT raw && rm -rf $OUT/raw

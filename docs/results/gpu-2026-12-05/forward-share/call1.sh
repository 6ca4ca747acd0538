# Call 1: the report's new `device_busy_share` (the measured window's
# share spent in model forwards) on a real GPU server: the 1B shape,
# each batching policy, `short` and `batched` at concurrency 8 and 128,
# 16 measured rounds. Everything but this log comes back in one tarball.
set -u
cd .gpu && mkdir -p bin && xz -dc isobench-busy.xz > bin/isobench && chmod +x bin/isobench && cd ..
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
mkdir -p $OUT/raw
GPU_BENCH_BIN=.gpu/bin scripts/gpu-bench.sh --part serving-1b $OUT/raw/s1b --policy static,dynamic,continuous \
    --workloads short,batched --concurrency 8,128 --turns 16 --budget 200 > $OUT/raw/serve-1b.log 2>&1
echo "serving-1b exit $? at ${SECONDS}s"; sed -n '/^serving /,$p' $OUT/raw/serve-1b.log
tar xzf $OUT/raw/s1b/serving-1b.tar.gz -O --wildcards '*continuous/short-c128.txt' | grep "^gpu"
tar czf $OUT/call1.tar.gz -C $OUT raw && rm -rf $OUT/raw

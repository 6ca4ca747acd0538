# Call 2: the new build only, the 1B shape's continuous against dynamic
# batching on short, batched and chat at 8, 32, 64 and 128 (4 rounds),
# twice: the two policies' order as gpu-bench runs them, then reversed.
set -u
cd .gpu
mkdir -p bin-new; xz -dc isobench-new.xz > bin-new/isobench; chmod +x bin-new/isobench
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cd ..
mkdir -p $OUT/raw
i=0
for p in continuous,dynamic dynamic,continuous; do
  i=$((i+1))
  GPU_BENCH_BIN=.gpu/bin-new scripts/gpu-bench.sh --part serving-1b $OUT/raw/s1b-$i --policy $p \
      --workloads short,batched,chat --concurrency 8,32,64,128 --turns 4 --budget 200 > $OUT/raw/serve-1b-$i.log 2>&1
  echo "1b $i $p exit $? at ${SECONDS}s"; grep -E "^(short|batched|chat) |(continuous|dynamic) +sched" $OUT/raw/serve-1b-$i.log
done
tar czf $OUT/call2.tar.gz -C $OUT raw && rm -rf $OUT/raw

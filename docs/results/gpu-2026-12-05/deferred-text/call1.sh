# Call 1: check-server on the new build, then the 1B shape's continuous
# batching on short, batched and chat at 1, 32 and 128, builds alternated
# (new, base, base, new). Everything but this log comes back in one tarball.
set -u
cd .gpu
for b in base new; do mkdir -p bin-$b; xz -dc isobench-$b.xz > bin-$b/isobench; chmod +x bin-$b/isobench; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cd ..
mkdir -p $OUT/raw
GPU_BENCH_BIN=.gpu/bin-new scripts/gpu-bench.sh --part check-server $OUT/raw/check > $OUT/raw/check-server.log 2>&1
echo "check-server exit $?"; tail -4 $OUT/raw/check-server.log
i=0
for b in new base base new; do
  i=$((i+1))
  GPU_BENCH_BIN=.gpu/bin-$b scripts/gpu-bench.sh --part serving-1b $OUT/raw/s1b-$i-$b --policy continuous \
      --workloads short,batched,chat --concurrency 1,32,128 --turns 4 --budget 120 > $OUT/raw/serve-1b-$i-$b.log 2>&1
  echo "1b $i $b exit $?"; grep -E "^(short|batched|chat) |continuous +sched" $OUT/raw/serve-1b-$i-$b.log
done
tar czf $OUT/call1.tar.gz -C $OUT raw && rm -rf $OUT/raw

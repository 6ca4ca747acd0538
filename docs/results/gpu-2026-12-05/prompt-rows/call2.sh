# Call 2: longer runs of the two cells call 1 left in doubt. `batched` at
# 128 with 32 measured rounds (4,096 requests a run): continuous batching
# on the build with prompt row buckets b + 1 (rows) and on 7142809's
# (new), and dynamic batching on rows, three times in a rotating order;
# then `chat` at 128 with 8 rounds, continuous, rows and new twice each.
# Everything but this log comes back in one tarball.
set -u
cd .gpu
for b in new rows; do mkdir -p bin-$b; xz -dc isobench-$b.xz > bin-$b/isobench; chmod +x bin-$b/isobench; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cd ..
mkdir -p $OUT/raw
serve() { # NAME BUILD POLICY WORKLOAD TURNS
  GPU_BENCH_BIN=.gpu/bin-$2 scripts/gpu-bench.sh --part serving-1b $OUT/raw/$1 --policy $3 \
      --workloads $4 --concurrency 128 --turns $5 --budget 100 > $OUT/raw/$1.log 2>&1
  echo "$1 exit $? at ${SECONDS}s"; grep -E "^$4 +128" $OUT/raw/$1.log
}
serve b1-rows rows continuous batched 32; serve b1-new new continuous batched 32; serve b1-dyn rows dynamic batched 32
serve b2-dyn rows dynamic batched 32; serve b2-new new continuous batched 32; serve b2-rows rows continuous batched 32
serve b3-new new continuous batched 32; serve b3-rows rows continuous batched 32; serve b3-dyn rows dynamic batched 32
serve c1-rows rows continuous chat 8; serve c1-new new continuous chat 8
serve c2-new new continuous chat 8; serve c2-rows rows continuous chat 8
tar czf $OUT/call2.tar.gz -C $OUT raw && rm -rf $OUT/raw

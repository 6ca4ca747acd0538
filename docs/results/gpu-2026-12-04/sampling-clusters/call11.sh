set -u
cd .gpu
xz -dkf gpu_kernels-new.xz; chmod +x gpu_kernels-new
for b in base new; do mkdir -p bin-$b; xz -dc isobench-$b.xz > bin-$b/isobench; chmod +x bin-$b/isobench; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt
./gpu_kernels-new > $OUT/gpu_kernels.txt 2>&1; echo "gpu_kernels exit $?"
echo "$(grep -c '^PASS' $OUT/gpu_kernels.txt) PASS, $(grep -c '^FAIL' $OUT/gpu_kernels.txt) FAIL"; grep '^FAIL' $OUT/gpu_kernels.txt | head; grep -A6 "^sampled tokens of" $OUT/gpu_kernels.txt; tail -1 $OUT/gpu_kernels.txt
cd ..
GPU_BENCH_BIN=.gpu/bin-new scripts/gpu-bench.sh --part check-server $OUT/check > $OUT/check-server.log 2>&1; echo "check-server exit $?"; tail -4 $OUT/check-server.log
i=0
for b in new base base new; do
  i=$((i+1))
  GPU_BENCH_BIN=.gpu/bin-$b scripts/gpu-bench.sh --part serving-1b $OUT/s1b-$i-$b --policy continuous --workloads chat --concurrency 1,8,32,128 --turns 4 --budget 100 > $OUT/serve-1b-$i-$b.log 2>&1
  echo "1b $i $b exit $?"; grep -E "^chat |continuous +sched" $OUT/serve-1b-$i-$b.log
done
for b in new base; do
  GPU_BENCH_BIN=.gpu/bin-$b scripts/gpu-bench.sh --part serving-8b $OUT/s8b-$b --policy continuous --workloads chat --concurrency 1,8,32 --turns 2 --budget 150 > $OUT/serve-8b-$b.log 2>&1
  echo "8b $b exit $?"; grep -E "^chat |continuous +sched" $OUT/serve-8b-$b.log
done
rm -rf $OUT/check $OUT/s1b-* $OUT/s8b-*

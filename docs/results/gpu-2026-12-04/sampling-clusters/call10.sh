set -u
cd .gpu
xz -dkf gpu_kernels-new.xz; chmod +x gpu_kernels-new
for b in base new; do mkdir -p bin-$b; xz -dc isobench-$b.xz > bin-$b/isobench; chmod +x bin-$b/isobench; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt
./gpu_kernels-new > $OUT/gpu_kernels.txt 2>&1; echo "gpu_kernels exit $?"
echo "$(grep -c '^PASS' $OUT/gpu_kernels.txt) PASS, $(grep -c '^FAIL' $OUT/gpu_kernels.txt) FAIL"; grep '^FAIL' $OUT/gpu_kernels.txt | head; grep -A6 "^sampled tokens of" $OUT/gpu_kernels.txt; tail -1 $OUT/gpu_kernels.txt
cd ..
GPU_BENCH_BIN=.gpu/bin-new scripts/gpu-bench.sh --part check-server $OUT/new > $OUT/check-server.log 2>&1; echo "check-server exit $?"; tail -4 $OUT/check-server.log
for b in new base base new; do
  n=$(ls -d $OUT/serve-$b-* 2>/dev/null | wc -l)
  GPU_BENCH_BIN=.gpu/bin-$b scripts/gpu-bench.sh --part serving-1b $OUT/serve-$b-$n --policy continuous --workloads chat --concurrency 1,8,32,64,128 --turns 4 --budget 120 > $OUT/serve-$b-$n.log 2>&1
  echo "serve $b $n exit $?"; grep -E "^chat |continuous +sched" $OUT/serve-$b-$n/serving-1b-summary.txt
done

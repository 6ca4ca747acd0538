#!/usr/bin/env bash
set -u
R=$OUT/gpu; mkdir -p $R
for d in .gpu/v2 .gpu/v4 .gpu/srv; do (cd $d && for f in *.xz; do xz -dkf "$f"; chmod +x "${f%.xz}"; done); done
M1=models/llama-3.2-1b-shape; M8=models/llama-3-8b-shape
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/smi.txt
echo "== cold server (CUDA_CACHE_DISABLE=1), old then new" | tee $R/cold-server.txt
python3 .gpu/cold_server.py .gpu/srv/isobench-old 8301 $R/old-server.log 2>&1 | tee -a $R/cold-server.txt
python3 .gpu/cold_server.py .gpu/srv/isobench-new 8302 $R/new-server.log 2>&1 | tee -a $R/cold-server.txt
grep -h 'warm-up' $R/new-server.log | tail -n 1 | cut -c1-300 | tee -a $R/cold-server.txt
echo "== step_bench v4, CUDA_CACHE_DISABLE=1" | tee $R/cold-step.txt
CUDA_CACHE_DISABLE=1 .gpu/v4/step_bench --device cuda:0 --dtype bf16 --model $M1 --graphs on --batch 1 --context 512 --steps 16 2>&1 | grep -E '^ *1 |loaded' | tee -a $R/cold-step.txt
for b in v2 v4 v2 v4; do echo "== $b"; .gpu/$b/step_bench --device cuda:0 --dtype bf16 --model $M8 --graphs on --batch 1 --context 512 --steps 64 2>&1 | grep -E '^ *1 |loaded'; done | tee $R/ab8.txt
ncu --clock-control none --cache-control none --launch-skip 3000 --launch-count 130 --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__registers_per_thread .gpu/v4/step_bench --device cuda:0 --dtype bf16 --model $M1 --graphs on --batch 1 --context 512 --steps 64 > $R/ncu1.csv 2> $R/ncu1.err
echo "ncu rc $? lines $(wc -l < $R/ncu1.csv)"

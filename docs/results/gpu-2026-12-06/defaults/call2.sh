#!/usr/bin/env bash
# Call 2: what the CUDA batching defaults buy on the 8B shape (compare.sh).
set -u
R=$OUT/c2; mkdir -p $R
[ -x .gpu/isobench ] || { python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' .gpu/isobench.xz .gpu/isobench; chmod +x .gpu/isobench; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
bash docs/results/gpu-2026-12-06/defaults/compare.sh $R models/llama-3-8b-shape 512 \
  continuous:short dynamic:short continuous:chat
echo "== done $(date +%T)"

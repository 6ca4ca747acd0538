#!/usr/bin/env bash
# Call 2: checks on the fused build; step_bench old vs new alternated.
set -u
R=$OUT/c2; mkdir -p $R
for d in old new; do (cd .gpu/$d && for f in *.xz; do xz -dkf $f && chmod +x ${f%.xz}; done); done
echo "== checks $(date +%T)"
GPU_BENCH_BIN=.gpu/new scripts/gpu-bench.sh --part checks $R/checks > $R/checks.log 2>&1; echo rc $?
grep -E "^(PASS|FAIL)" $R/checks/checks-summary.txt | cut -c1-200 | grep -v "^PASS .*paged\|^PASS .*decode\|^PASS .*mixed\|^PASS .*long" | head -40
tar -xzf $R/checks/checks.tar.gz -C $R 2>/dev/null; grep -hE "fused|^FAIL" $R/checks/gpu_kernels.txt 2>/dev/null | head -24
for m in llama-3-8b-shape llama-3.2-1b-shape; do for r in 1 2; do for b in old new; do
  echo "== step $m $b $r $(date +%T)"
  .gpu/$b/step_bench --device cuda:0 --dtype bf16 --model models/$m --graphs both --batch 8,32,128 --context 512 --steps 32 > $R/step-$m-$b-$r.txt 2>&1
  grep -E "^ +[0-9]+ " $R/step-$m-$b-$r.txt
done; done; done
echo "== done $(date +%T)"

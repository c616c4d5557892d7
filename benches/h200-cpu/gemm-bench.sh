#!/usr/bin/env bash
# Second GEMM call on the H200 machine's host CPU (see gemm.sh): parallel scaling with the final
# AMX default (Rows64) plus the FP16-C cost, then the full single-thread criterion table
# (bench `sme`, group gemm/: AVX-512 vs the gemm crate's f32 and f16 paths, M in
# {1,4,16,64,256,1024} x 5 shapes; M=1024 skipped in the bench code on the two largest shapes).
# Output: $OUT/gemm-bench-h200.txt (and stdout, trimmed to the figures).
set -u
cd "$(dirname "$0")/../../.device/sme-gemm"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
  echo "== cpu"; date -u; lscpu | grep -E 'Model name|^CPU\(s\)'; uptime
  echo "== scaling"; timeout 60 ./scaling 1 2 4 8 16 --reps 7 2>&1
  echo "== bench gemm/"
  timeout 175 ./bench-sme --bench --warm-up-time 0.5 --measurement-time 1 'gemm/' 2>&1 |
    grep -E '^gemm/|time:|thrpt:'
  date -u
} 2>&1 | tee "$OUT/gemm-bench-h200.txt"

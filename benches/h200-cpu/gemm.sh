#!/usr/bin/env bash
# GEMM-side figures on the H200 machine's host CPU (16 cores), run through the `device` tool in
# one call: x86-64 binaries built on the dev VM from the commit under test (stripped, in
# .device/sme-gemm/, carried), because that machine has no Rust toolchain.
#   1. the sme test binaries gemm, bad_input, parallel, pack (AMX runs there: every tile
#      blocking against the f64 reference, FP16 output included);
#   2. parallel scaling of the work-stealing driver at 1, 2, 4, 8, 16 threads (example
#      `scaling`: GEMM M=256 4096x4096 per kernel, Q4_0 GEMV M=1 4096x14336);
#   3. AMX-BF16 (three tile blockings) vs the gemm crate's f32 path, one thread (example
#      `amx_vs_gemm`, medians of 5).
# Output: $OUT/gemm-h200.txt (and stdout).
set -u
cd "$(dirname "$0")/../../.device/sme-gemm"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
  echo "== cpu"; date -u; lscpu | grep -E 'Model name|^CPU\(s\)|Thread|L2|L3'
  grep -o 'amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo; uptime
  for t in gemm bad_input parallel pack; do
    echo "== sme test $t"
    timeout 150 ./test-$t --nocapture 2>&1 | grep -E 'edge cases|test result|panicked|FAILED|error'
  done
  echo "== scaling"; timeout 150 ./scaling 1 2 4 8 16 --reps 7 2>&1
  echo "== amx_vs_gemm"; timeout 200 ./amx_vs_gemm 5 2>&1
} 2>&1 | tee "$OUT/gemm-h200.txt"

#!/usr/bin/env bash
# CPU-side figures on the H200 machine's host CPU (16 cores, quiet), run through the `device`
# tool: x86-64 binaries built here (stripped) travel in .device/ because that machine has no Rust
# toolchain. Runs the sme tests there (AMX runs only where the CPU has it), AMX vs gemm f32, the
# sync wake-up latency harness, the uma pool bench and the partition planning time.
set -u
cd "$(dirname "$0")/../.device"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
  echo "== cpu"; lscpu | grep -E 'Model name|^CPU\(s\)|Thread|L3'; grep -o 'amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  for t in gemm gemv bad_input parallel; do echo "== sme test $t"; timeout 120 ./sme-test-$t 2>&1 | tail -4; done
  echo "== amx_vs_gemm"; timeout 120 ./amx_vs_gemm 5 2>&1
  echo "== plan_time"; timeout 60 ./plan_time 30 2>&1 | tail -8
} > "$OUT/cpu-tests.txt" 2>&1
timeout 150 ./bench-wake 2>&1 | tail -60 > "$OUT/wake.txt"
timeout 60 ./bench-pool --bench --warm-up-time 1 --measurement-time 2 2>&1 | grep -vE '^\s*$|Warning|Found|outlier|^  [0-9]+ \(' > "$OUT/pool.txt"
timeout 150 ./bench-sme --bench --warm-up-time 1 --measurement-time 2 'gemm/.*/m(1|16|64|256)_k4096_n4096$|gemv/' 2>&1 | grep -E '^gemm|^gemv|time:|thrpt:' > "$OUT/sme-bench.txt"
cat "$OUT/cpu-tests.txt"

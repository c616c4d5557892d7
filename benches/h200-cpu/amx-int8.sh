#!/usr/bin/env bash
# Issue 19, hetero-sme side, on the H200 machine's host CPU (Xeon with AMX-INT8/BF16 and
# AVX512-FP16, 16 cores) through the `device` tool, in one call. That machine has no Rust
# toolchain, so the x86-64 binaries are built on the dev VM and travel stripped in .device/amx/
# (git-ignored, named in the call's `carry`), together with this script:
#   cargo test --profile ci -p hetero-sme --no-run          -> test-lib (unit tests: the AMX
#       program through the software tile model), test-int8, test-gemv_fp16
#   cargo build --release -p hetero-sme --examples          -> int8_amx, int8_decode, fp16_gemv
#   strip each into .device/amx/; device command: bash .device/amx/amx-int8.sh
# Runs: 1. the tests with HETERO_REQUIRE=amx-int8,avx512-fp16 (absence of either = failure);
#   2. AMX-INT8 vs VNNI, one core (taskset -c 0), M = 1..256 on SmolLM2 shapes + 4096², Q4_1,
#      then Q4_0 and Q8_0 at four M; 3. decode M = 1, 2, 4 GB/s vs a read probe over the same
#      bytes at 1, 2, 4, 8, 16 threads (dispatched kernel; AMX for every row chunk; default
#      tiles); 4. the FP16-arithmetic packed Q4 GEMV vs the FP32 one vs the probe, M = 1.
# Output: $OUT/amx-tests.txt (+ the full test logs test-*.log), amx-vs-vnni.txt, decode.txt,
# fp16-gemv.txt (and stdout).
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export HETERO_REQUIRE=amx-int8,avx512-fp16
{
  echo "== cpu"; date -u; lscpu | grep -E 'Model name|^CPU\(s\)|Thread|L2|L3|MHz'
  grep -o -w 'amx_[a-z0-9]*\|avx512_fp16\|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  uptime
  for t in lib int8 gemv_fp16; do
    echo "== test $t"
    timeout 120 ./test-$t --nocapture > "$OUT/test-$t.log" 2>&1
    grep -E -A1 '^test |test result|panicked|SKIP|worst' "$OUT/test-$t.log" | grep -v '^--$'
  done
} 2>&1 | tee "$OUT/amx-tests.txt"
{
  echo "== int8_amx q4_1, taskset -c 0"; timeout 200 taskset -c 0 ./int8_amx --budget-ms 30
  for f in q4_0 q8_0; do
    echo "== int8_amx $f, taskset -c 0"
    timeout 90 taskset -c 0 ./int8_amx --format $f --ms 1,4,16,128 --budget-ms 30
  done
} 2>&1 | tee "$OUT/amx-vs-vnni.txt"
{
  echo "== int8_decode (dispatched kernel)"; timeout 150 ./int8_decode 1 2 4 8 16
  echo "== int8_decode --kernel amx-all"; timeout 150 ./int8_decode 1 2 4 8 16 --kernel amx-all
  echo "== int8_decode --default-tiles"; timeout 90 ./int8_decode 1 4 16 --default-tiles
} 2>&1 | tee "$OUT/decode.txt"
{
  echo "== fp16_gemv"; timeout 200 ./fp16_gemv 1 2 4 8 16 --big
} 2>&1 | tee "$OUT/fp16-gemv.txt"

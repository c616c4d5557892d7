#!/bin/bash
# issue 34 (cpu): the decompression GEMM on the H200 host's Xeon. Binaries built on the dev VM.
cd "$(dirname "$0")"
{
echo "== cpu"; lscpu | grep -E 'Model name|^CPU\(s\)|L2'; grep -o 'amx[a-z_0-9]*\|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' '; echo; date -u
echo "== sme dq test (HETERO_REQUIRE=amx-bf16,avx512-bf16)"; HETERO_REQUIRE=amx-bf16,avx512-bf16 timeout 40 ./sme-dq --nocapture 2>&1 | grep -E "dq kernels|dq best|test |result|panicked|SKIP"
echo "== sme lib dq"; timeout 10 ./sme-lib dq 2>&1 | grep -E "test |result"
echo "== amx peak"; ./dq_gemm peak 1; ./dq_gemm peak 16
echo "== 8b q4_0 16 threads"; timeout 45 ./dq_gemm threads 16 q4_0 8b 64,512
echo "== f16 gemv"; timeout 20 ./dq_gemm f16gemv 16
echo "== 8b q4_k 16 threads"; timeout 25 ./dq_gemm threads 16 q4_k 8b 512
} 2>&1 | tee "$OUT/cpu2.txt"

#!/usr/bin/env bash
# Issue 31, one device call on the H200 machine (NVIDIA OpenCL): the fast matmuls of
# kernels/mm.cl. (1) tests/fast.rs there: every format against the f64 reference, the int8
# GEMVs on the dp4a path PoCL cannot run; (2) examples/mm_bench: GEMV/GEMM at 1B/8B shapes
# against the copy bandwidth and FP32 FMA rate measured in the same run; (3) the resident
# decoder at 8B/1B shapes, layered, pp512 in 512-row chunks and tg, profiled per op kind.
#
# Stage here (x86-64; no Rust there), from the workspace root of this branch:
#   cargo build --release -p hetero-opencl-kernels --examples
#   cargo test --release -p hetero-opencl-kernels --test fast --test decoder --no-run
#   D=/work/main/.device-gpu; mkdir -p $D
#   strip -o $D/mm_bench target/release/examples/mm_bench
#   strip -o $D/resident_decode target/release/examples/resident_decode
#   strip -o $D/fast-tests target/release/deps/fast-<hash>
#   strip -o $D/decoder-tests target/release/deps/decoder-<hash>
#   cp opencl-kernels/benches/h200-mm.sh $D/
# Run (device tool, carry [".device-gpu"]): bash .device-gpu/h200-mm.sh
# Env: PARTS (default "tests dtests bench 8b 8bk 1b"), MB_ENV (mm_bench's variables, e.g.
# "MB_PARTS=gemv,steps MB_TILES=128"), RD8K_PROFILE, RD1_PROFILE (1), TG (64), REPS (3).
# Outputs under $OUT: mm.txt (everything), bench.txt, decode.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=${D:-.device-gpu}
PARTS=${PARTS:-"tests dtests bench 8b 8bk 1b"}
TG=${TG:-64}; REPS=${REPS:-3}
LOG=$OUT/mm.txt
NV=$(ldconfig -p | grep -o '/[^ ]*libnvidia-opencl.so.1' | head -1)
mkdir -p /etc/OpenCL/vendors && echo "${NV:-libnvidia-opencl.so.1}" > /etc/OpenCL/vendors/nvidia.icd
ldconfig -p | grep -q "libOpenCL.so.1 " || export HETERO_OPENCL_LIB=${NV:-libnvidia-opencl.so.1}
export HETERO_OPENCL_PLATFORM=${HETERO_OPENCL_PLATFORM:-NVIDIA}
chmod +x "$D"/* 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$LOG"
t0=$SECONDS
rd() { # label, env...
  local label=$1; shift
  echo "== $label: $*" | tee -a "$LOG"
  env RD_REPS="$REPS" "$@" timeout 200 "$D/resident_decode" 2>&1 | grep -vE "^random" | tee -a "$LOG" "$OUT/decode.txt" > /dev/null
  grep -E "^RESULT|error" "$OUT/decode.txt" | tail -3
}
for p in $PARTS; do
  echo "== part $p at $((SECONDS - t0)) s" | tee -a "$LOG"
  case $p in
  tests)
    HETERO_REQUIRE=opencl timeout 150 "$D/fast-tests" --test-threads 1 2>&1 | grep -vE "^seed" | tail -8 | tee -a "$LOG" ;;
  dtests)
    HETERO_REQUIRE=opencl timeout 150 "$D/decoder-tests" --test-threads 1 q4_1_tied other_formats q5_and_k mixed_type matmul_rows 2>&1 |
      grep -E "^test |panicked|NMSE|test result" | tail -12 | tee -a "$LOG" ;;
  bench) env ${MB_ENV:-} timeout 240 "$D/mm_bench" 2>&1 | tee -a "$LOG" > "$OUT/bench.txt"; grep -cE "^RESULT" "$OUT/bench.txt"; tail -3 "$OUT/bench.txt" ;;
  8b) rd "llama-8b q4_0 Q6_K head" RD_SHAPE=llama-8b RD_LAYERS=32 RD_TYPE=q4_0 RD_HEAD=q6_k RD_PATHS=layered RD_ROWS=512 RD_PP=512 RD_TG="$TG" RD_PROFILE=1 RD_COPY_GBS=4276 RD_FP32_GFLOPS=56300 ;;
  8bk) rd "llama-8b q4_k_m Q6_K head" RD_SHAPE=llama-8b RD_LAYERS=32 RD_TYPE=q4_k_m RD_HEAD=q6_k RD_PATHS=layered RD_ROWS=512 RD_PP=512 RD_TG="$TG" RD_PROFILE=${RD8K_PROFILE:-1} RD_COPY_GBS=4276 RD_FP32_GFLOPS=56300 ;;
  1b) rd "llama-1b q4_0 tied Q8_0 head" RD_SHAPE=llama-1b RD_LAYERS=16 RD_TYPE=q4_0 RD_PATHS=layered RD_ROWS=512 RD_PP=512 RD_TG="$TG" RD_PROFILE=${RD1_PROFILE:-1} RD_COPY_GBS=4276 RD_FP32_GFLOPS=56300 ;;
  esac
done
echo "== done at $((SECONDS - t0)) s" | tee -a "$LOG"
grep -E "^RESULT" "$OUT/bench.txt" 2>/dev/null | sed -E 's/RESULT //' | cut -c1-150 | head -100

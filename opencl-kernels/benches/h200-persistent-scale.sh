#!/usr/bin/env bash
# Issue 25, one device call on the H200 machine (NVIDIA OpenCL): the persistent decode step at
# Llama-3.2-1B and Llama-3-8B widths (the 8B down projection's 14336-wide row staged in two
# chunks of local memory; a Q6_K head run as the layered head launches after the step),
# timed against the layered path, plus the decoder's persistent tests on NVIDIA.
#
# Stage here (x86-64, no Rust there), from the workspace root of this branch:
#   cargo build --release -p hetero-opencl-kernels --example resident_decode
#   cargo test --profile ci -p hetero-opencl-kernels --test decoder --no-run
#   D=/work/main/.devcarry-gpu; mkdir -p $D
#   strip -o $D/resident_decode target/release/examples/resident_decode
#   strip -o $D/decoder-tests target/ci/deps/decoder-<hash>
#   cp opencl-kernels/benches/h200-persistent-scale.sh $D/
# Run (device tool, carry [".devcarry-gpu"]): bash .devcarry-gpu/h200-persistent-scale.sh
# Env: PARTS (default "tests 1b 8b 8bk"; also "prof": 8B Q4_0 and Q4_K_M layered, profiled per
# op kind with bytes, FLOPs and the fractions of COPY_GBS / FP32_GFLOPS, the device's measured
# copy bandwidth and FP32 rate: defaults 4214, the copy figure of 2026-12-01, and 0 = not
# printed), TG (32), REPS (3). Output: $OUT/scale.txt. About 100 s for the default PARTS
# (2026-12-02), 70 s for prof.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=${D:-.devcarry-gpu}
PARTS=${PARTS:-"tests 1b 8b 8bk"}
TG=${TG:-32}; REPS=${REPS:-3}
LOG=$OUT/scale.txt
NV=$(ldconfig -p | grep -o '/[^ ]*libnvidia-opencl.so.1' | head -1)
mkdir -p /etc/OpenCL/vendors && echo "${NV:-libnvidia-opencl.so.1}" > /etc/OpenCL/vendors/nvidia.icd
ldconfig -p | grep -q "libOpenCL.so.1 " || export HETERO_OPENCL_LIB=${NV:-libnvidia-opencl.so.1}
export HETERO_OPENCL_PLATFORM=${HETERO_OPENCL_PLATFORM:-NVIDIA}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$LOG"
rd() { # label, env...
  local label=$1; shift
  echo "== $label: $*" | tee -a "$LOG"
  env RD_PP=16 RD_TG="$TG" RD_REPS="$REPS" RD_PROFILE=0 "$@" timeout 150 "$D/resident_decode" 2>&1 |
    grep -E "^(device|model|== decode|tg|pp|RESULT)|error" | tee -a "$LOG"
}
for p in $PARTS; do
  case $p in
  tests)
    echo "== decoder tests (persistent ones) on NVIDIA" | tee -a "$LOG"
    timeout 120 "$D/decoder-tests" --test-threads 1 persistent q4_1_tied 2>&1 | tail -25 | tee -a "$LOG" ;;
  1b) rd "llama-1b q4_0 tied Q8_0 head" RD_SHAPE=llama-1b RD_LAYERS=16 RD_TYPE=q4_0 RD_PATHS=persistent,layered,auto ;;
  8b) rd "llama-8b q4_0 Q6_K head" RD_SHAPE=llama-8b RD_LAYERS=32 RD_TYPE=q4_0 RD_HEAD=q6_k RD_PATHS=persistent,layered ;;
  prof)
    for t in q4_0 q4_k_m; do
      echo "== llama-8b $t layered, profiled" | tee -a "$LOG"
      env RD_PP=16 RD_TG=16 RD_REPS=1 RD_PROFILE=1 RD_SHAPE=llama-8b RD_LAYERS=32 RD_TYPE=$t \
        RD_HEAD=q6_k RD_PATHS=layered RD_COPY_GBS=${COPY_GBS:-4214} RD_FP32_GFLOPS=${FP32_GFLOPS:-0} \
        timeout 100 "$D/resident_decode" 2>&1 | grep -vE "^random" | tee -a "$LOG"
    done ;;
  8bk) rd "llama-8b q4_k_m Q6_K head (layered only: mixed layers)" RD_SHAPE=llama-8b RD_LAYERS=32 RD_TYPE=q4_k_m RD_HEAD=q6_k RD_PATHS=auto ;;
  esac
done

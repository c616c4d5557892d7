#!/usr/bin/env bash
# Final device call on the NVIDIA H200 machine: (1) the crate's test suite on NVIDIA's OpenCL
# (test binary built here: cargo test --profile ci -p hetero-opencl-kernels --test opencl
# --no-run, stripped into .device/ocl/opencl-tests), (2) the bandwidth example with default
# shapes only, three repeats (medians taken from the three SUMMARY tables), on the four decode
# shapes and four times the two large ones, (3) a work-group sweep including 128 and 256
# work-items per row on the longest-K shape, (4) torch.mv on the same shapes.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
NV=$(ldconfig -p | grep -o '/[^ ]*libnvidia-opencl.so.1' | head -1)
[ -z "$NV" ] && NV=$(find / -xdev -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1)
mkdir -p /etc/OpenCL/vendors && echo "${NV:-libnvidia-opencl.so.1}" > /etc/OpenCL/vendors/nvidia.icd
chmod +x .device/ocl/gemv_bandwidth .device/ocl/opencl-tests
export HETERO_OPENCL_PLATFORM=${HETERO_OPENCL_PLATFORM:-NVIDIA} HETERO_OPENCL_CACHE=off
HETERO_REQUIRE=opencl timeout 200 .device/ocl/opencl-tests --test-threads 2 2>&1 | tee "$OUT/tests-nvidia.txt" | grep -E "^test |test result|panicked"
SHAPES=4096x4096,14336x4096,4096x14336,49152x576,57344x4096,4096x57344
for i in 1 2 3; do
  BW_DEFAULT_ONLY=1 BW_MIN_SECONDS=0.2 BW_SHAPES=$SHAPES .device/ocl/gemv_bandwidth > "$OUT/default-$i.txt" 2>&1
  grep -A9 SUMMARY "$OUT/default-$i.txt"
done
BW_MIN_SECONDS=0.1 BW_SHAPES=4096x57344 .device/ocl/gemv_bandwidth > "$OUT/sweep-longk.txt" 2>&1
for v in "Q4_0-T " "Q4_0-T-dp4a"; do
  grep -F "$v" "$OUT/sweep-longk.txt" | awk -F'us, ' '{split($2,a," "); print a[1], $0}' | sort -rn | head -4 | cut -c1-120
done
TORCH_SHAPES=$SHAPES PYTHONUNBUFFERED=1 python3 opencl-kernels/benches/torch_mv.py 2>&1 | tee "$OUT/torch.txt"

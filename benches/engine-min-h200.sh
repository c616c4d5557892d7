#!/usr/bin/env bash
# engine-min on the H200 device machine (the `device` tool), GPU = the H200 through NVIDIA's
# OpenCL, CPU = the host's 16 Xeon cores. The model is 98 MB, over one call's carry limit, so it
# travels in two calls: target/devmodel/part00 in the first (the machine stays warm), then
# target/devmodel/part01 plus the stripped engine-min binary in .device/eng/ in the second,
# which runs this script. Binary built on the dev VM:
#   cargo build --release -p engine-min && strip -o .device/eng/engine-min target/release/engine-min
#   split -b 50000000 -d "$HETERO_MODEL" target/devmodel/part
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
M=/tmp/smollm2.gguf
cat target/devmodel/part00 target/devmodel/part01 > $M
sha256sum $M | grep -q '^b179c952' || { echo "model checksum mismatch"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -E '^Model name|^CPU\(s\)'
NV=$(ldconfig -p | grep -o '/[^ ]*libnvidia-opencl.so.1' | head -1)
[ -z "$NV" ] && NV=$(find / -xdev -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1)
mkdir -p /etc/OpenCL/vendors && echo "${NV:-libnvidia-opencl.so.1}" > /etc/OpenCL/vendors/nvidia.icd
ldconfig -p | grep -q "libOpenCL.so.1 " || export HETERO_OPENCL_LIB=${NV:-libnvidia-opencl.so.1}
E=.device/eng/engine-min; chmod +x $E
export HETERO_OPENCL_PLATFORM=${HETERO_OPENCL_PLATFORM:-NVIDIA} HETERO_MODEL=$M
run() { echo "\$ engine-min $*"; timeout 150 $E "$@" 2>&1 | tail -12; }
run run --plan gpu --prompt "The capital of France is" --max-tokens 16
run bench --plan gpu --reps 3
for t in 2 16; do run bench --threads $t --reps 3; done
run bench --threads 16 --kernel sme-gemv --reps 3
run run --plan cpu-gpu:0.5 --threads 16 --prompt "The capital of France is" --max-tokens 16

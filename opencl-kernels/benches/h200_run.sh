#!/usr/bin/env bash
# One device call on the NVIDIA H200 machine: NVIDIA's OpenCL through the ICD loader, our GEMV
# bandwidth example (which also dumps the program binaries, PTX on NVIDIA), the PTX assembled
# for sm_90 with the image's ptxas (registers, spills) and disassembled with cuobjdump (SASS
# instruction counts per kernel), then torch.mv and torch's copy for comparison.
# Expects .device/ocl/gemv_bandwidth (built here:
# cargo build --release --example gemv_bandwidth -p hetero-opencl-kernels; strip; copy).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
NV=$(ldconfig -p | grep -o '/[^ ]*libnvidia-opencl.so.1' | head -1)
[ -z "$NV" ] && NV=$(find / -xdev -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1)
echo "nvidia opencl: $NV"
mkdir -p /etc/OpenCL/vendors && echo "${NV:-libnvidia-opencl.so.1}" > /etc/OpenCL/vendors/nvidia.icd
chmod +x .device/ocl/gemv_bandwidth
export HETERO_OPENCL_PLATFORM=${HETERO_OPENCL_PLATFORM:-NVIDIA} HETERO_OPENCL_CACHE=off
BW_MIN_SECONDS=${BW_MIN_SECONDS:-0.1} BW_DUMP="$OUT/layer.ptx" .device/ocl/gemv_bandwidth 2>&1 | tee "$OUT/opencl.txt"
# Four times the two large decode shapes, defaults only: how the ratio to copy grows once the
# per-launch fixed cost is amortized over more bytes.
BW_DEFAULT_ONLY=1 BW_SHAPES=57344x4096,4096x57344 .device/ocl/gemv_bandwidth 2>&1 | tee "$OUT/opencl-big.txt"
PTXAS=$(command -v ptxas || ls /usr/local/cuda*/bin/ptxas 2>/dev/null | head -1)
CUOBJ=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
echo "ptxas: $PTXAS; cuobjdump: $CUOBJ"
for f in layer.ptx layer.ptx.dp4a; do
  [ -f "$OUT/$f" ] || continue
  tr -d '\000' < "$OUT/$f" > "/tmp/$f"   # the driver's binary ends with a NUL byte
  "$PTXAS" -arch=sm_90 -v "/tmp/$f" -o "/tmp/$f.cubin" >> "$OUT/ptxas.txt" 2>&1
  "$CUOBJ" --dump-sass "/tmp/$f.cubin" > "/tmp/$f.sass" 2>&1
  awk '/Function :/{name=$3} /\/\*[0-9a-f]{4}\*\//{n[name]++} END{for(k in n) print n[k], k}' \
    "/tmp/$f.sass" | sort -k2 >> "$OUT/sass-counts.txt"
  cat "/tmp/$f.sass" >> "$OUT/gemv.sass"
done
grep -E "Compiling entry|Used" "$OUT/ptxas.txt" | paste - - | grep -E "gemv_(f16_r2|q4_0_t)" | sed -E 's/ptxas info *: //g' | cut -c1-200
grep -E "gemv_(f16_r2|q4_0_t)" "$OUT/sass-counts.txt"
TORCH_SHAPES=4096x4096,14336x4096,4096x14336,49152x576,57344x4096,4096x57344 \
  PYTHONUNBUFFERED=1 python3 opencl-kernels/benches/torch_mv.py 2>&1 | tee "$OUT/torch.txt"

#!/usr/bin/env bash
# One device call on the NVIDIA H200 machine: NVIDIA's OpenCL through the ICD loader, our GEMV
# bandwidth example, then torch.mv and torch's copy for comparison. Expects in .device/:
# gemv_bandwidth (built here: cargo build --release --example gemv_bandwidth -p hetero-opencl-kernels)
# and Debian's ocl-icd-libopencl1 .deb (apt-get download ocl-icd-libopencl1), used only if the
# machine has no libOpenCL.so.1.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
NV=$(ldconfig -p | grep -o '/[^ ]*libnvidia-opencl.so.1' | head -1)
[ -z "$NV" ] && NV=$(find / -xdev -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1)
[ -z "$NV" ] && NV=$(find /usr/local/nvidia /usr/lib* -name 'libnvidia-opencl.so*' 2>/dev/null | head -1)
echo "nvidia opencl: $NV"
mkdir -p /etc/OpenCL/vendors && echo "${NV:-libnvidia-opencl.so.1}" > /etc/OpenCL/vendors/nvidia.icd
if ! ldconfig -p | grep -q 'libOpenCL.so.1'; then
  dpkg -x .device/ocl-icd-libopencl1_*.deb /tmp/ocl
  export HETERO_OPENCL_LIB=/tmp/ocl/usr/lib/x86_64-linux-gnu/libOpenCL.so.1
  echo "using Debian's ICD loader: $HETERO_OPENCL_LIB"
fi
chmod +x .device/gemv_bandwidth
HETERO_OPENCL_PLATFORM=${HETERO_OPENCL_PLATFORM:-NVIDIA} .device/gemv_bandwidth 2>&1 | tee "$OUT/opencl.txt"
if [ "${PIPESTATUS[0]}" -ne 0 ] && [ -n "$NV" ]; then
  echo "retrying with BW_LIB=$NV (vendor library directly)"
  BW_LIB="$NV" .device/gemv_bandwidth 2>&1 | tee "$OUT/opencl.txt"
fi
PYTHONUNBUFFERED=1 python3 opencl-kernels/benches/torch_mv.py 2>&1 | tee "$OUT/torch.txt"

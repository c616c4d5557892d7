#!/usr/bin/env bash
# On the dev VM: builds what opencl-kernels/benches/h200-resident.sh runs on the H200 machine
# (which has no Rust toolchain) and stages it, stripped, in .device/ocl-resident/ (git-ignored):
# the resident_decode example, the decoder and kernel test binaries, engine-min's
# gpu_resident test binary (real-model check, used only where the model file is there too) and
# engine-min's gguf-requantize (there it writes the Q4_K_M/Q5_K/Q6_K/Q5_0/Q5_1 fixtures from
# that model, for the fixture test: the fixtures are too big to travel).
#   opencl-kernels/benches/h200-resident-build.sh
# then, through the device tool: carry [".device/ocl-resident"], command
#   bash opencl-kernels/benches/h200-resident.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.device/ocl-resident
mkdir -p "$D"
# Timed programs in the release profile (what users build; `ci` keeps debug assertions and
# overflow checks, which cost the CPU kernels 2-3x), test binaries in `ci`.
cargo build -q --release -p hetero-opencl-kernels --example resident_decode
strip -o "$D/resident_decode" target/release/examples/resident_decode
stage() { # PACKAGE TEST NAME
  local exe
  exe=$(cargo test --profile ci -p "$1" --test "$2" --no-run 2>&1 |
    grep -o "target/ci/deps/$2-[0-9a-f]*" | tail -1)
  [[ -x $exe ]] || { echo "build: no test binary for $1 $2" >&2; exit 1; }
  strip -o "$D/$3" "$exe"
}
cargo build -q --release -p engine-min --bin gguf-requantize
strip -o "$D/gguf-requantize" target/release/gguf-requantize
stage hetero-opencl-kernels decoder decoder-tests
stage hetero-opencl-kernels opencl opencl-tests
stage engine-min gpu_resident gpu-resident-tests
git rev-parse --short HEAD > "$D/commit"
ls -l "$D"
du -sh "$D"

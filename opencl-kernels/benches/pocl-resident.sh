#!/usr/bin/env bash
# On the dev VM, side by side in one script: the device-resident decoder on PoCL (OpenCL on the
# CPU; SmolLM2-135M's shapes and weight types, random weights: the same bytes stream as the
# model's) against engine-min's `bench --plan cpu` and today's `--plan gpu` (one PoCL GEMV per
# matmul, host ops on the CPU) on the real model, llama-bench's pp128 / tg64, alternating
# ROUNDS times (default 1). PoCL is a correctness target: this reports, it has no goal.
#   opencl-kernels/benches/pocl-resident.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-1}
eval "$(scripts/setup.sh --env)"
cargo build -q --release -p engine-min -p hetero-opencl-kernels --bins --example resident_decode
E=target/release/engine-min
for r in $(seq "$ROUNDS"); do
  echo "== round $r, load $(cut -d' ' -f1-3 /proc/loadavg)"
  $E bench --model "$HETERO_MODEL" --plan cpu --threads 2 --reps 3 | sed 's/^/  plan cpu: /'
  $E bench --model "$HETERO_MODEL" --plan gpu --threads 2 --reps 1 | sed 's/^/  plan gpu (per-matmul PoCL): /'
  RD_PATHS=layered,blocks RD_REPS=1 RD_PROFILE=0 target/release/examples/resident_decode 2>&1 |
    grep -E "^(RESULT|== decode)" | sed 's/^/  resident (PoCL): /'
done

#!/usr/bin/env bash
# Issue 33's GPU start-up and host memory on the H200 machine, in one device call: an 8B Q4_0
# `engine-min synth` file, then `bench --plan gpu` three times (OpenCL program cache cold, warm,
# and warm with the weights re-laid on one thread: HETERO_GPU_PREPARE_THREADS=1), each with its
# startup line and the decoder's build steps; then `run --plan gpu --ctx 131072 -vv` under
# /usr/bin/time, whose last lines name the mappings that hold the process's resident memory,
# with the weights and caches in separate buffers and in one allocation each (sub-buffers).
#
#   here:  cargo build --release -p engine-min && mkdir -p .device/eng &&
#          strip -o .device/eng/engine-min target/release/engine-min &&
#          "$HETERO_GGUF_PYTHON" benches/probes/tokenizer_gguf.py "$HETERO_MODEL" .device/tokenizer.gguf
#   there: bash benches/h200-startup.sh        (device tool, carry [".device"])
#
# Outputs under $OUT (default /tmp/out): startup.txt. Environment: W (work dir, /root/startup),
# SHAPE (llama-8b), TYPE (q4_0), CTX (131072).
set -u
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib.sh
. benches/lib.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=${W:-/root/startup}; mkdir -p "$W"
SHAPE=${SHAPE:-llama-8b} TYPE=${TYPE:-q4_0} CTX=${CTX:-131072}
E=.device/eng/engine-min
LOG=$OUT/startup.txt
chmod +x "$E"
opencl_env
export HETERO_OPENCL_CACHE=$W/ocl-cache
rm -rf "$HETERO_OPENCL_CACHE"
f=$W/$SHAPE-$TYPE.gguf
say() { echo "$*" | tee -a "$LOG"; }
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $(nproc) cpus"
t0=$SECONDS
[ -f "$f" ] || "$E" synth --shape "$SHAPE" --type "$TYPE" --tokenizer .device/tokenizer.gguf --out "$f" > "$OUT/synth.txt" 2>&1 ||
  { tail -5 "$OUT/synth.txt"; exit 1; }
say "synth $SHAPE $TYPE: $(du -h "$f" | cut -f1) in $((SECONDS - t0)) s"
for label in "program cache cold" "program cache warm" "warm, one prepare thread"; do
  say "== bench --plan gpu --pp 16 --tg 4: $label"
  threads=0
  [[ $label == *one* ]] && threads=1
  t1=$SECONDS
  HETERO_GPU_PREPARE_THREADS=$threads /usr/bin/time -f "wall %e s, max RSS %M KiB, user %U s, sys %S s, minor faults %R" \
    "$E" bench --model "$f" --plan gpu --pp 16 --tg 4 --reps 1 -v 2>&1 |
    grep -E "^startup|^gpu|^pp|^tg|wall|error|note" | tee -a "$LOG"
  say "   (command $((SECONDS - t1)) s)"
done
# The whole context: the weights and caches as separate buffers (the decoder's default where
# the persistent step cannot run) and, for comparison, in one allocation each with sub-buffers.
for one in 0 1; do
  say "== run --plan gpu --ctx $CTX --max-tokens 4 -vv, HETERO_GPU_ONE_ALLOCATION=$one"
  HETERO_GPU_ONE_ALLOCATION=$one /usr/bin/time -f "wall %e s, max RSS %M KiB, user %U s, sys %S s, minor faults %R" \
    "$E" run --model "$f" --plan gpu --ctx "$CTX" --max-tokens 4 --prompt "The capital of France is" -vv \
    > "$OUT/run-ctx-$one.txt" 2>&1
  echo "exit $?" >> "$OUT/run-ctx-$one.txt"
  grep -E "^memory:|wall|exit|error|engine built" "$OUT/run-ctx-$one.txt" | head -4 | tee -a "$LOG"
  grep -E "wall|exit" "$OUT/run-ctx-$one.txt" | tail -2 | tee -a "$LOG"
done
say "== done in $((SECONDS - t0)) s"

#!/usr/bin/env bash
# The device-resident decoder on the NVIDIA H200 machine, in one call of the device tool
# (binaries from opencl-kernels/benches/h200-resident-build.sh, carried in .device/ocl-resident):
#
#  1. correctness on NVIDIA's OpenCL: the decoder tests (every decode path, every format,
#     against the f64 reference) and the kernel tests;
#  2. speed, ROUNDS rounds (default 3) alternating with llama.cpp's CUDA llama-bench when one is
#     given: our pp128 / tg64 on SmolLM2-135M's shapes with random weights (persistent, layered and blocks;
#     the model file does not travel in one call), llama-bench -ngl 99 -p 128 -n 64 on the real
#     model; medians and ratios;
#  3. one profiled run: launches per token and device time per op kind.
#
# llama.cpp is not part of this project: build llama-bench there yourself from the vendored
# source (CUDA, sm_90) and pass LLAMA_BENCH=/path/to/llama-bench and LLAMA_MODEL=/path/to.gguf
# (or leave target/devmodel/part00 + part01 of the model in the carried tree, as
# benches/engine-min-h200.sh does; the model is then also checked by the real-model test).
# Without them step 2 times ours alone and says so.
#
# Outputs in $OUT: tests.txt, bench.txt, profile.txt, llama.txt, summary.txt.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=.device/ocl-resident
ROUNDS=${ROUNDS:-3}
SUM=$OUT/summary.txt
: > "$SUM"
say() { echo "$*" | tee -a "$SUM"; }

say "== $(date -u +%FT%TZ) commit $(cat $D/commit 2>/dev/null || echo '?')"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$SUM"
  NV=$(ldconfig -p | grep -o '/[^ ]*libnvidia-opencl.so.1' | head -1)
  [ -z "$NV" ] && NV=$(find / -xdev -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1)
  mkdir -p /etc/OpenCL/vendors && echo "${NV:-libnvidia-opencl.so.1}" > /etc/OpenCL/vendors/nvidia.icd
  ldconfig -p | grep -q "libOpenCL.so.1 " || export HETERO_OPENCL_LIB=${NV:-libnvidia-opencl.so.1}
  export HETERO_OPENCL_PLATFORM=${HETERO_OPENCL_PLATFORM:-NVIDIA}
else
  # Not the H200 machine (a dry run elsewhere): the platform the environment chooses.
  say "no nvidia-smi: running on ${HETERO_OPENCL_PLATFORM:-the first OpenCL platform}"
fi
export HETERO_OPENCL_CACHE=/tmp/hetero-ocl-cache
chmod +x $D/* 2>/dev/null

# -- 1. correctness on NVIDIA -------------------------------------------------------------------
{
  echo "== decoder tests"; HETERO_REQUIRE=opencl timeout 240 $D/decoder-tests --test-threads 2 2>&1
  echo "== kernel tests"; HETERO_REQUIRE=opencl timeout 200 $D/opencl-tests --test-threads 2 2>&1
} > "$OUT/tests.txt"
grep -E "^test result|FAILED|panicked" "$OUT/tests.txt" | tee -a "$SUM"

# The real model, if it travelled in parts (see the header).
MODEL=${LLAMA_MODEL:-}
if [ -z "$MODEL" ] && [ -f target/devmodel/part00 ] && [ -f target/devmodel/part01 ]; then
  MODEL=/tmp/smollm2.gguf
  cat target/devmodel/part00 target/devmodel/part01 > $MODEL
  sha256sum $MODEL | grep -q '^b179c952' || { say "model checksum mismatch: not used"; MODEL=; }
fi
if [ -n "$MODEL" ] && [ -x $D/gpu-resident-tests ]; then
  HETERO_MODEL=$MODEL HETERO_REQUIRE=opencl,model timeout 300 $D/gpu-resident-tests --nocapture \
    --test-threads 1 >> "$OUT/tests.txt" 2>&1
  grep -E "pos (0|16|127|199|263):|compared|^test result" "$OUT/tests.txt" | tail -8 | tee -a "$SUM"
else
  say "real-model test: not run (no model here)"
fi

# -- 2. speed, alternating with llama.cpp -------------------------------------------------------
LB=${LLAMA_BENCH:-$(command -v llama-bench || true)}
[ -n "$LB" ] && [ -n "$MODEL" ] && [ -x "$LB" ] || LB=
: > "$OUT/bench.txt"; : > "$OUT/llama.txt"
for r in $(seq "$ROUNDS"); do
  echo "== round $r" >> "$OUT/bench.txt"
  RD_PATHS=persistent,layered,blocks RD_REPS=3 RD_PROFILE=0 RD_FLUSH=0,4 timeout 200 $D/resident_decode >> "$OUT/bench.txt" 2>&1
  if [ -n "$LB" ]; then
    echo "== round $r" >> "$OUT/llama.txt"
    LD_LIBRARY_PATH="$(dirname "$LB"):${LD_LIBRARY_PATH:-}" timeout 150 "$LB" -m "$MODEL" -ngl 99 \
      -p 128 -n 64 -r 3 -o csv >> "$OUT/llama.txt" 2>/dev/null
  fi
done
med() { sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
field() { # PATH FLUSH KEY: values of KEY=<v> on the RESULT lines of PATH and FLUSH
  grep "^RESULT path=$1 flush=$2 " "$OUT/bench.txt" | grep -o "$3=[0-9.]*" | cut -d= -f2
}
grep -m1 "^device:" "$OUT/bench.txt" | tee -a "$SUM"
grep -m1 "^model:" "$OUT/bench.txt" | tee -a "$SUM"
grep -E "^== decode path" "$OUT/bench.txt" | sed 's/build + upload [0-9.]* s, //' | sort -u | tee -a "$SUM"
if [ -n "$LB" ]; then
  lpp=$(awk -F, 'NR>1 && $0 ~ /"128","0"/ {gsub(/"/,"",$0); print $(NF-1)}' "$OUT/llama.txt" | med)
  ltg=$(awk -F, 'NR>1 && $0 ~ /"0","64"/ {gsub(/"/,"",$0); print $(NF-1)}' "$OUT/llama.txt" | med)
  say "llama.cpp CUDA (llama-bench -ngl 99, real model), medians of $ROUNDS rounds: pp128 $lpp tok/s, tg64 $ltg tok/s"
else
  lpp=; ltg=
  say "llama.cpp: not run (set LLAMA_BENCH and LLAMA_MODEL); the last side-by-side figures were pp128 ~13,900, tg64 905 tok/s"
fi
for p in persistent layered blocks; do for f in 0 4; do
  pp=$(field $p $f pp128 | med); tg=$(field $p $f tg64 | med); tl=$(field $p $f tg64_logits | med)
  [ -z "$pp" ] && continue
  line="ours ($p, flush every $f), medians of $ROUNDS rounds x 3: pp128 $pp tok/s, tg64 $tg tok/s (argmax read back), $tl tok/s (logits read back)"
  if [ -n "$lpp" ] && [ -n "$ltg" ]; then
    line="$line; vs llama.cpp: pp128 $(awk -v a="$pp" -v b="$lpp" 'BEGIN {printf "%.2f", a/b}')x, tg64 $(awk -v a="$tg" -v b="$ltg" 'BEGIN {printf "%.2f", a/b}')x"
  fi
  say "$line"
done; done

# -- 3. profile: device time per op kind --------------------------------------------------------
RD_PATHS=persistent,layered,blocks,persistent-barriers RD_REPS=1 RD_PROFILE=1 timeout 200 \
  $D/resident_decode > "$OUT/profile.txt" 2>&1
grep -E "^(==|profiled|  \|)" "$OUT/profile.txt" | tee -a "$SUM"

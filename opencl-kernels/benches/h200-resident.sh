#!/usr/bin/env bash
# The device-resident decoder on the NVIDIA H200 machine, in one call of the device tool
# (binaries from opencl-kernels/benches/h200-resident-build.sh, carried in .device/ocl-resident):
#
#  1. correctness on NVIDIA's OpenCL: the decoder tests (every decode path, every format,
#     against the f64 reference) and the kernel tests; where the model travelled, the real-model
#     test and (FIXTURES=1, the default) the fixture test on the five requantized files that
#     gguf-requantize writes there from it (~1 minute);
#  2. speed, ROUNDS rounds (default 3) alternating with llama.cpp's CUDA llama-bench when one is
#     given: our pp128 / tg64 on SmolLM2-135M's shapes with random weights (the model file does
#     not travel in one call) for each layer format of FORMATS (default
#     "q4_1 q5_0 q5_1 q4_k_m q5_k q6_k", the example's RD_TYPE: the K-quant names are the
#     fixtures' mixes, K-quant ffn_down beside Q5_0/Q5_1/Q8_0 matrices), on every decode path
#     the format runs (paths_for: persistent, layered and blocks for F16/Q8_0/Q4_0/Q4_1;
#     layered and blocks for Q5_0/Q5_1; layered alone for the mixes), llama-bench -ngl 99
#     -p 128 -n 64 on the real (Q4_1) model; medians, ratios to llama.cpp for q4_1 and to our
#     q4_1 for the others; flush every 4 is timed for q4_1 only;
#  3. one profiled run per format of PROFILE_FORMATS (default "q4_1 q4_k_m") on its paths (and
#     the persistent step's grid barriers alone where it runs): launches per token and device
#     time per op kind.
#
# llama.cpp is not part of this project: build llama-bench there yourself from the vendored
# source (CUDA, sm_90) and pass LLAMA_BENCH=/path/to/llama-bench and LLAMA_MODEL=/path/to.gguf
# (or leave target/devmodel/part00 + part01 of the model in the carried tree, as
# benches/engine-min-h200.sh does; the model is then also checked by the real-model test).
# Without them step 2 times ours alone and says so.
#
# Budget: with every format, the fixtures and llama-bench this can approach the device tool's
# 10-minute limit (not yet run); trim with ROUNDS=2, FORMATS="q4_1 q4_k_m" or FIXTURES=0.
#
# Outputs in $OUT: tests.txt, fixtures.txt, bench.txt, profile.txt, llama.txt, summary.txt.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=.device/ocl-resident
ROUNDS=${ROUNDS:-3}
FORMATS=${FORMATS:-q4_1 q5_0 q5_1 q4_k_m q5_k q6_k}
PROFILE_FORMATS=${PROFILE_FORMATS:-q4_1 q4_k_m}
SUM=$OUT/summary.txt
: > "$SUM"
say() { echo "$*" | tee -a "$SUM"; }
# The decode paths (the example's RD_PATHS) a layer format runs: the persistent step has
# kernels for F16, Q8_0, Q4_0 and Q4_1; mixed layers (the K-quant mixes) run layered only.
paths_for() {
  case $1 in
    q4_0 | q4_1 | q8_0 | f16) echo persistent,layered,blocks ;;
    q5_0 | q5_1) echo layered,blocks ;;
    *) echo layered ;;
  esac
}

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
    --test-threads 1 --skip every_fixture >> "$OUT/tests.txt" 2>&1
  grep -E "pos (0|16|127|199|263):|compared|^test result" "$OUT/tests.txt" | tail -8 | tee -a "$SUM"
  if [ "${FIXTURES:-1}" = 1 ] && [ -x $D/gguf-requantize ]; then
    FX=/tmp/hetero-fixtures; mkdir -p $FX
    for f in q4_k_m:Q4_K_M q5_k:Q5_K q6_k:Q6_K q5_0:Q5_0 q5_1:Q5_1; do
      $D/gguf-requantize "$MODEL" "$FX/SmolLM2-135M-Instruct.${f#*:}.gguf" "${f%%:*}" > /dev/null ||
        say "gguf-requantize ${f%%:*} failed"
    done
    HETERO_MODEL=$MODEL HETERO_FIXTURES=$FX HETERO_REQUIRE=opencl,model timeout 300 \
      $D/gpu-resident-tests --nocapture --test-threads 1 every_fixture > "$OUT/fixtures.txt" 2>&1
    grep -E "launches a decode step|^test result|panicked" "$OUT/fixtures.txt" | tee -a "$SUM"
  fi
else
  say "real-model test: not run (no model here)"
fi

# -- 2. speed, alternating with llama.cpp -------------------------------------------------------
LB=${LLAMA_BENCH:-$(command -v llama-bench || true)}
[ -n "$LB" ] && [ -n "$MODEL" ] && [ -x "$LB" ] || LB=
: > "$OUT/bench.txt"; : > "$OUT/llama.txt"
for r in $(seq "$ROUNDS"); do
  echo "== round $r" >> "$OUT/bench.txt"
  for ty in $FORMATS; do
    fl=0; [ "$ty" = q4_1 ] && fl=0,4
    RD_TYPE=$ty RD_PATHS=$(paths_for "$ty") RD_REPS=3 RD_PROFILE=0 RD_FLUSH=$fl timeout 200 \
      $D/resident_decode >> "$OUT/bench.txt" 2>&1
  done
  if [ -n "$LB" ]; then
    echo "== round $r" >> "$OUT/llama.txt"
    LD_LIBRARY_PATH="$(dirname "$LB"):${LD_LIBRARY_PATH:-}" timeout 150 "$LB" -m "$MODEL" -ngl 99 \
      -p 128 -n 64 -r 3 -o csv >> "$OUT/llama.txt" 2>/dev/null
  fi
done
med() { sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
field() { # TYPE PATH FLUSH KEY: values of KEY=<v> on the RESULT lines of TYPE, PATH and FLUSH
  grep "^RESULT type=$1 path=$2 flush=$3 " "$OUT/bench.txt" | grep -o "$4=[0-9.]*" | cut -d= -f2
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }
grep -m1 "^device:" "$OUT/bench.txt" | tee -a "$SUM"
grep -m1 "^model:" "$OUT/bench.txt" | tee -a "$SUM"
grep -E "^(model:|== decode path)" "$OUT/bench.txt" | sed 's/build + upload [0-9.]* s, //' |
  sort -u | tee -a "$SUM"
if [ -n "$LB" ]; then
  lpp=$(awk -F, 'NR>1 && $0 ~ /"128","0"/ {gsub(/"/,"",$0); print $(NF-1)}' "$OUT/llama.txt" | med)
  ltg=$(awk -F, 'NR>1 && $0 ~ /"0","64"/ {gsub(/"/,"",$0); print $(NF-1)}' "$OUT/llama.txt" | med)
  say "llama.cpp CUDA (llama-bench -ngl 99, real model), medians of $ROUNDS rounds: pp128 $lpp tok/s, tg64 $ltg tok/s"
else
  lpp=; ltg=
  say "llama.cpp: not run (set LLAMA_BENCH and LLAMA_MODEL); the last side-by-side figures were pp128 ~13,900, tg64 905 tok/s"
fi
for ty in $FORMATS; do for p in persistent layered blocks; do for f in 0 4; do
  pp=$(field "$ty" $p $f pp128 | med); tg=$(field "$ty" $p $f tg64 | med)
  tl=$(field "$ty" $p $f tg64_logits | med)
  [ -z "$pp" ] && continue
  line="ours ($ty, $p, flush every $f), medians of $ROUNDS rounds x 3: pp128 $pp tok/s, tg64 $tg tok/s (argmax read back), $tl tok/s (logits read back)"
  if [ "$ty" = q4_1 ] && [ -n "$lpp" ] && [ -n "$ltg" ]; then
    line="$line; vs llama.cpp: pp128 $(ratio "$pp" "$lpp")x, tg64 $(ratio "$tg" "$ltg")x"
  elif [ "$ty" != q4_1 ]; then
    # Our q4_1 on the same path (layered for the mixes, which cannot run decode blocks).
    bpp=$(field q4_1 $p $f pp128 | med); btg=$(field q4_1 $p $f tg64 | med)
    [ -n "$bpp" ] && [ -n "$btg" ] &&
      line="$line; vs our q4_1 ($p): pp128 $(ratio "$pp" "$bpp")x, tg64 $(ratio "$tg" "$btg")x"
  fi
  say "$line"
done; done; done

# -- 3. profile: device time per op kind --------------------------------------------------------
: > "$OUT/profile.txt"
for ty in $PROFILE_FORMATS; do
  paths=$(paths_for "$ty"); case $paths in persistent*) paths=$paths,persistent-barriers ;; esac
  RD_TYPE=$ty RD_PATHS=$paths RD_REPS=1 RD_PROFILE=1 timeout 200 $D/resident_decode \
    >> "$OUT/profile.txt" 2>&1
done
grep -E "^(model:|==|profiled|  \|)" "$OUT/profile.txt" | tee -a "$SUM"

#!/usr/bin/env bash
# Issue 24's side by side at the papers' scale, on the H200 device machine: llama.cpp (built there
# from the llama-cpp-python sdist's vendored source, CUDA sm_90 + GGML_NATIVE, so its CPU backend
# is the AMX build) against engine-min on `engine-min synth` files (llama-1b, llama-8b; Q4_0,
# Q4_K_M; random weights at the real shapes, SmolLM2's tokenizer), GPU and CPU, pp512 and tg128,
# alternating rounds, medians; and in the same session the machine's limits (GPU copy bandwidth
# and FP32 FMA rate, the CPU's read bandwidth at each thread count), so every figure has its
# fraction of the limit. That machine has no Rust toolchain and reaches no registry: what it
# needs travels in .device/ (git-ignored; `benches/scale-h200.sh pack` fills it here).
#
#   benches/scale-h200.sh pack      # here: the pruned llama.cpp source, engine-min, read-probe,
#                                   # the tokenizer GGUF (SmolLM2's tokenizer keys only)
#   benches/scale-h200.sh build     # there: llama.cpp (~4 min on 16 cores), the GPU probe,
#                                   # the synth files, then the limits
#   benches/scale-h200.sh gpu       # there: GPU figures (-ngl 99 vs --plan gpu)
#   benches/scale-h200.sh cpu       # there: CPU figures (-ngl 0, no CUDA device vs --plan cpu)
#   benches/scale-h200.sh big       # there: 8B time to first token, RSS, device memory, pp4096
#   benches/scale-h200.sh auto      # there: profile + --plan auto vs forced plans at 1B and 8B
#
# Each subcommand fits one device call (< 10 min); run them in consecutive calls of one warm
# session (the machine keeps /root between calls only while warm). Outputs under $OUT (default
# /tmp/out): summary.txt (the figures), raw-*.txt. Environment: ROUNDS (default 3), MODELS
# (default "llama-1b:q4_0 llama-1b:q4_k_m llama-8b:q4_0 llama-8b:q4_k_m"), CPU_THREADS
# (default "2 8 16"), PP (512), TG (128), W (work dir, default /root/scale).
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=benches/lib.sh
. benches/lib.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
W=${W:-/root/scale}
E=${E:-$ROOT/.device/eng/engine-min}
LLAMA_VERSION=0.3.36
ROUNDS=${ROUNDS:-3}
PP=${PP:-512} TG=${TG:-128}
MODELS=${MODELS:-"llama-1b:q4_0 llama-1b:q4_k_m llama-8b:q4_0 llama-8b:q4_k_m"}
CPU_THREADS=${CPU_THREADS:-"2 8 16"}
LB=$W/llama-build/bin/llama-bench
SUM=$OUT/summary.txt
say() { echo "$*" | tee -a "$SUM"; }
file_of() { echo "$W/synth/${1%%:*}-${1##*:}.gguf"; } # SHAPE:TYPE

machine() {
  say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
  say "   $(lscpu | grep -E '^Model name' | sed 's/  */ /g'); $(nproc) cpus; load $(cut -d' ' -f1-3 /proc/loadavg)"
}

# Here (the dev VM): everything the machine needs, into .device/.
pack() {
  local sdist=${HETERO_CACHE:-$HOME/.cache/hetero}/llama-cpp/llama_cpp_python-$LLAMA_VERSION.tar.gz
  [ -f "$sdist" ] || { echo "no $sdist: scripts/setup.sh llama-cpp fetches it" >&2; exit 1; }
  local t
  t=$(mktemp -d)
  tar xzf "$sdist" -C "$t"
  # Only what a CUDA + CPU build of llama-bench needs: no models, docs, tests, examples, web UI
  # or other backends (76 MB -> 5 MB). None of it enters the repository.
  (cd "$t"/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp &&
    rm -rf models docs media gguf-py conversion benches tests examples tools/ui tools/server \
      .github scripts ggml/src/ggml-{virtgpu,cann,openvino,webgpu,et,metal,hexagon,sycl,vulkan,opencl,zdnn,musa,rpc,zendnn})
  mkdir -p .device/eng
  tar czf .device/llama-src.tgz -C "$t"/llama_cpp_python-$LLAMA_VERSION/vendor llama.cpp
  rm -rf "$t"
  cargo build --release -p engine-min -p hetero-benches --bin engine-min --bin read-probe
  strip -o .device/eng/engine-min target/release/engine-min
  strip -o .device/read-probe target/release/read-probe
  # SmolLM2's tokenizer keys in a GGUF without tensors (the 98 MB model cannot travel).
  "${HETERO_GGUF_PYTHON:?eval \"\$(scripts/setup.sh --env)\" first}" benches/probes/tokenizer_gguf.py \
    "${HETERO_MODEL:?}" .device/tokenizer.gguf
  du -sh .device/* | tee /dev/stderr | awk '{print}' > /dev/null
  echo "carry: .device (under the device tool's 64 MiB)"
}

build() {
  machine
  mkdir -p "$W"
  local t0
  t0=$(date +%s)
  # llama.cpp builds in its own process session, so it goes on after this call returns (the
  # machine keeps it while warm) while the synth files are written; `gpu`/`cpu` wait for it.
  if [ ! -x "$LB" ] && [ ! -f "$W/build.pid" ]; then
    rm -rf "$W/llama.cpp" && tar xzf .device/llama-src.tgz -C "$W"
    setsid bash -c "cmake -S '$W/llama.cpp' -B '$W/llama-build' -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF &&
      cmake --build '$W/llama-build' -j $(nproc) --target llama-bench; echo \$? > '$W/build.rc'" \
      > "$W/build.log" 2>&1 < /dev/null &
    echo $! > "$W/build.pid"
    say "llama.cpp $LLAMA_VERSION (vendored): build started ($W/build.log)"
  fi
  nvcc -O3 -arch=sm_90 benches/probes/gpu_limits.cu -o "$W/gpu_limits" > "$OUT/raw-nvcc.txt" 2>&1 ||
    say "gpu_limits: nvcc failed ($(tail -1 "$OUT/raw-nvcc.txt"))"
  chmod +x "$E" .device/read-probe
  mkdir -p "$W/synth"
  for m in $MODELS; do
    local f
    f=$(file_of "$m")
    [ -f "$f" ] && continue
    t0=$(date +%s)
    "$E" synth --shape "${m%%:*}" --type "${m##*:}" --tokenizer .device/tokenizer.gguf --out "$f" \
      >> "$OUT/raw-synth.txt" 2>&1 || { tail -5 "$OUT/raw-synth.txt"; say "synth $m failed"; exit 1; }
    say "synth $m: $(du -h "$f" | cut -f1) in $(( $(date +%s) - t0 )) s"
  done
  limits
}

limits() {
  : > "$OUT/limits.txt"
  [ -x "$W/gpu_limits" ] && "$W/gpu_limits" | tee -a "$OUT/limits.txt" "$SUM"
  # Each share is above the LLC at every thread count (105 MB L3 per socket there).
  .device/read-probe --mib 4096 --threads "1,${CPU_THREADS// /,}" --reps 7 | tee -a "$OUT/limits.txt" "$SUM"
}

# The limits measured by `build`, as numbers: GPU copy GB/s, FP32 TFLOP/s, CPU GB/s at T threads.
gpu_copy() { awk '/copy \(read\+write\)/ {for (i=1;i<=NF;i++) if ($i=="GB/s") print $(i-1)}' "$OUT/limits.txt" | head -1; }
gpu_fma() { awk '/fp32 fma/ {for (i=1;i<=NF;i++) if ($i=="TFLOP/s") print $(i-1)}' "$OUT/limits.txt" | head -1; }
cpu_read() { awk -v t="$1" '$1=="read-probe" && $3==t {print $7}' "$OUT/limits.txt" | head -1; }

# Waits (up to 8 min) for the llama.cpp build that `build` started.
wait_llama() {
  local t0=$SECONDS
  while [ ! -f "$W/build.rc" ] && [ $((SECONDS - t0)) -lt 480 ]; do sleep 5; done
  cp "$W/build.log" "$OUT/raw-build.txt" 2>/dev/null
  [ -x "$LB" ] || { tail -20 "$W/build.log"; say "llama.cpp build failed or unfinished"; exit 1; }
  say "llama.cpp ready (waited $((SECONDS - t0)) s)"
}

eng() { # ARGS... -> "pp tg"
  timeout 300 "$E" bench --pp "$PP" --tg "$TG" "$@" 2>&1 | tee -a "$OUT/raw-eng.txt" | eng_pp_tg
}
lla() { # MODEL ARGS... -> "pp tg"
  local m=$1; shift
  timeout 300 "$LB" -m "$m" -p "$PP" -n "$TG" -o csv "$@" 2>>"$OUT/raw-llama.err" |
    tee -a "$OUT/raw-llama.txt" | lla_pp_tg
}

# Weight bytes a decode token reads (the file's tensor data; embeddings are read one row a token,
# but tied ones are read whole by the output projection, so the file size is the right count).
bytes_of() { stat -L -c %s "$1"; }

gpu() {
  machine
  opencl_env
  wait_llama
  [ -s "$OUT/limits.txt" ] || limits > /dev/null
  local copy fma
  copy=$(gpu_copy) fma=$(gpu_fma)
  : > "$OUT/gpu.txt"
  for m in $MODELS; do
    local f
    f=$(file_of "$m")
    for r in $(seq "$ROUNDS"); do
      echo "$m round $r ours $(HETERO_MODEL=$f eng --model "$f" --plan gpu --reps 3) llama $(lla "$f" -ngl 99 -r 3)" >> "$OUT/gpu.txt"
    done
    local c="\$1==\"$m\"" op ot lp lt gb flops
    op=$(medf "$OUT/gpu.txt" "$c" 5); ot=$(medf "$OUT/gpu.txt" "$c" 6)
    lp=$(medf "$OUT/gpu.txt" "$c" 8); lt=$(medf "$OUT/gpu.txt" "$c" 9)
    gb=$(bytes_of "$f")
    say "GPU $m: pp$PP $op / $lp = $(ratio "$op" "$lp")x of llama.cpp CUDA; tg$TG $ot / $lt = $(ratio "$ot" "$lt")x;" \
      "decode reads $(awk -v b="$gb" -v t="$ot" 'BEGIN {printf "%.0f", b*t/1e9}') GB/s = $(awk -v b="$gb" -v t="$ot" -v c="$copy" 'BEGIN {if (c>0) printf "%.2f", b*t/1e9/c; else print "n/a"}') of copy" \
      "(llama.cpp $(awk -v b="$gb" -v t="$lt" -v c="$copy" 'BEGIN {if (c>0) printf "%.2f", b*t/1e9/c; else print "n/a"}'));" \
      "prefill $(flops_of "$f" "$op") TFLOP/s = $(awk -v x="$(flops_of "$f" "$op")" -v p="$fma" 'BEGIN {if (p>0) printf "%.2f", x/p; else print "n/a"}') of FP32 FMA"
  done
}

# Prefill TFLOP/s at TOK tokens/s: 2 FLOPs per weight of the layers' matmuls per token (the
# output projection, run for the last token only, and attention, small at 512 tokens, left out).
flops_of() { # FILE TOK
  awk -v p="$(params_of "$1")" -v t="$2" 'BEGIN {printf "%.1f", 2*p*t/1e12}'
}
params_of() {
  case "$(basename "$1")" in
    llama-1b-*) echo 973078528 ;;  # 16 x (2048*(2048+512+512+2048) + 3*2048*8192)
    llama-3b-*) echo 2818572288 ;; # 28 x (3072*(3072+1024+1024+3072) + 3*3072*8192)
    llama-8b-*) echo 6979321856 ;; # 32 x (4096*(4096+1024+1024+4096) + 3*4096*14336)
    *) echo 0 ;;
  esac
}

cpu() {
  machine
  wait_llama
  [ -s "$OUT/limits.txt" ] || limits > /dev/null
  : > "$OUT/cpu.txt"
  for m in $MODELS; do
    local f
    f=$(file_of "$m")
    for t in $CPU_THREADS; do
      # 8B at 2 threads: one repetition a round (a pp512 there is ~30 s per engine).
      local reps=3
      [[ $m == llama-8b* ]] && reps=1
      for r in $(seq "$ROUNDS"); do
        echo "$m t $t round $r ours $(eng --model "$f" --plan cpu --threads "$t" --reps $reps) llama $(CUDA_VISIBLE_DEVICES= lla "$f" -ngl 0 -t "$t" -r $reps)" >> "$OUT/cpu.txt"
      done
      local c="\$1==\"$m\" && \$3==$t" op ot lp lt gb bw
      op=$(medf "$OUT/cpu.txt" "$c" 7); ot=$(medf "$OUT/cpu.txt" "$c" 8)
      lp=$(medf "$OUT/cpu.txt" "$c" 10); lt=$(medf "$OUT/cpu.txt" "$c" 11)
      gb=$(bytes_of "$f") bw=$(cpu_read "$t")
      say "CPU $m $t thr: pp$PP $op / $lp = $(ratio "$op" "$lp")x of llama.cpp (AMX build); tg$TG $ot / $lt = $(ratio "$ot" "$lt")x;" \
        "decode reads $(awk -v b="$gb" -v t="$ot" 'BEGIN {printf "%.1f", b*t/1e9}') GB/s = $(awk -v b="$gb" -v t="$ot" -v c="$bw" 'BEGIN {if (c>0) printf "%.2f", b*t/1e9/c; else print "n/a"}') of the read probe" \
        "(llama.cpp $(awk -v b="$gb" -v t="$lt" -v c="$bw" 'BEGIN {if (c>0) printf "%.2f", b*t/1e9/c; else print "n/a"}')); prefill $(flops_of "$f" "$op") TFLOP/s"
    done
  done
}

# 8B: time from start to first token (the file mapped, nothing preloaded), peak RSS, device
# memory, and a 4,096-token prompt end to end, on CPU and GPU (engine-min bench's own report).
big() {
  machine
  opencl_env
  local f
  f=$(file_of llama-8b:q4_0)
  : > "$OUT/big.txt"
  # Start-up on the CPU path: the first run packs the weights into a fresh prepared-weights
  # cache file (cold), the second maps that file (warm); bench's startup line says which.
  rm -rf "$W/prepared"
  for start in cold warm; do
    { echo "== 8B q4_0 --plan cpu --threads 16: start-up, $start prepared-weights cache"
      "$E" bench --model "$f" --plan cpu --threads 16 --pp 16 --tg 4 --reps 1 \
        --prepared-cache "$W/prepared" 2>&1 | grep -iE "startup|note|error"; } >> "$OUT/big.txt" 2>&1
  done
  for p in "gpu" "cpu --threads 16 --prepared-cache $W/prepared"; do
    # shellcheck disable=SC2086
    { echo "== 8B q4_0 --plan $p --pp 4096 --tg 16"
      local t0=$SECONDS
      "$E" bench --model "$f" --plan $p --pp 4096 --tg 16 --reps 1 2>&1 |
        grep -iE "^pp|^tg|first token|rss|memory|error"
      echo "wall $((SECONDS - t0)) s (load, prepare, one pp4096 and one tg16)"; } >> "$OUT/big.txt" 2>&1
    nvidia-smi --query-gpu=memory.used --format=csv,noheader >> "$OUT/big.txt" 2>&1
  done
  # The model's whole context: accepted within the memory budget, or refused with the figure.
  for p in "gpu" "cpu --threads 16 --prepared-cache $W/prepared"; do
    echo "== --ctx 131072 --plan $p" >> "$OUT/big.txt"
    # shellcheck disable=SC2086
    "$E" run --model "$f" --plan $p --ctx 131072 --max-tokens 4 --prompt "The capital of France is" \
      >> "$OUT/big.txt" 2>&1
    echo "exit $?" >> "$OUT/big.txt"
  done
  tee -a "$SUM" < "$OUT/big.txt"
}

auto() {
  machine
  opencl_env
  local m f
  for m in llama-1b:q4_0 llama-8b:q4_0; do
    f=$(file_of "$m")
    say "== auto on $m"
    HETERO_MODEL=$f ENGINE=$E THREADS=16 ROUNDS=2 REPS=2 PP=$PP TG=$TG PLANS="cpu gpu" \
      OUT=$OUT/auto-${m%%:*} timeout 280 benches/auto-vs-forced.sh > "$OUT/auto-${m%%:*}.txt" 2>&1
    echo "exit $?" >> "$OUT/auto-${m%%:*}.txt"
    grep -E "^plan:|^  (auto|cpu|gpu)|x \(goal|over [0-9]+ op classes|exit" "$OUT/auto-${m%%:*}.txt" | tee -a "$SUM"
  done
}

case "${1:-}" in
  pack) pack ;;
  build) build ;;
  gpu) gpu ;;
  cpu) cpu ;;
  big) big ;;
  auto) auto ;;
  *) echo "usage: $0 pack|build|gpu|cpu|big|auto" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Issue 32's figure at 8B on the H200 machine's Xeon (16 cores, AMX): llama.cpp alone against
# llama.cpp + hetero's ggml backend, llama-bench pp512 / tg128 at 16 threads on a llama-8b Q4_0
# synth file, alternating rounds, medians; plus a perplexity check that the backend computes
# what the CPU backend computes there (its AMX-INT8 kernels, not the dev VM's VNNI).
#
# llama.cpp there: the same pinned source (pruned tarball), CPU-only, GGML_NATIVE (its AMX
# build: the fair "alone"); the backend: target/ggml/libggml-hetero.so built here against the
# same source (no Rust toolchain there). That machine reaches no registry: what it needs
# travels in $PACK (default .device-ggml, git-ignored there as .device*).
#
#   benches/ggml-h200.sh pack     # here: $PACK/{llama-src.tgz, libggml-hetero.so, engine-min,
#                                 # tokenizer.gguf}; then copy $PACK into /work/main/ and carry it
#   benches/ggml-h200.sh build    # there (one device call, ~5-8 min): llama.cpp + the synth file
#   benches/ggml-h200.sh bench    # there (one call, ~5 min): the figures and the check
#
# Outputs under $OUT (default /tmp/out): summary.txt, raw-*.txt. Environment: ROUNDS (3),
# THREADS (16), PP (512), TG (128), W (work dir, /root/ggml-h200).
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=benches/lib.sh
. benches/lib.sh
PACK=${PACK:-.device-ggml}
OUT=${OUT:-/tmp/out}
W=${W:-/root/ggml-h200}
ROUNDS=${ROUNDS:-3} THREADS=${THREADS:-16} PP=${PP:-512} TG=${TG:-128}
LLAMA_VERSION=0.3.36
LB=$W/build/bin/llama-bench
MODEL=$W/llama-8b-q4_0.gguf
SUM=$OUT/summary.txt
mkdir -p "$OUT"
say() { echo "$*" | tee -a "$SUM"; }

pack() {
  eval "$(scripts/setup.sh --env)"
  local sdist=$HETERO_CACHE/llama-cpp/llama_cpp_python-$LLAMA_VERSION.tar.gz t
  [ -f "$sdist" ] || { echo "no $sdist: scripts/setup.sh llama-cpp fetches it" >&2; exit 1; }
  mkdir -p "$PACK"
  t=$(mktemp -d)
  tar xzf "$sdist" -C "$t"
  # A CPU build of llama-bench needs none of: models, docs, tests, examples, the web UI, the
  # server, other backends.
  (cd "$t/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp" &&
    rm -rf models docs media gguf-py conversion benches tests examples tools/ui tools/server \
      .github scripts ggml/src/ggml-{cuda,virtgpu,cann,openvino,webgpu,et,metal,hexagon,sycl,vulkan,opencl,zdnn,musa,rpc,zendnn})
  tar czf "$PACK/llama-src.tgz" -C "$t/llama_cpp_python-$LLAMA_VERSION/vendor" llama.cpp
  rm -rf "$t"
  scripts/ggml.sh build > /dev/null
  strip -o "$PACK/libggml-hetero.so" target/ggml/libggml-hetero.so
  cargo build --release --quiet -p engine-min --bin engine-min
  strip -o "$PACK/engine-min" target/release/engine-min
  "$HETERO_GGUF_PYTHON" benches/probes/tokenizer_gguf.py "$HETERO_MODEL" "$PACK/tokenizer.gguf"
  du -sh "$PACK"/*
  echo "then: rm -rf /work/main/$PACK && cp -a $PACK /work/main/ ; run with carry [\"$PACK\"]:"
  echo "  benches/ggml-h200.sh build   and then   benches/ggml-h200.sh bench"
}

machine() {
  say "== $(date -u +%FT%TZ) $(lscpu | grep -E '^Model name' | sed 's/  */ /g'); $(nproc) cpus; load $(cut -d' ' -f1-3 /proc/loadavg)"
}

build() {
  machine
  mkdir -p "$W"
  local t0=$SECONDS started=0
  if [ ! -x "$LB" ]; then
    rm -rf "$W/llama.cpp" "$W/build.rc" && tar xzf "$PACK/llama-src.tgz" -C "$W"
    # In the background (its own session) while the synth file is written.
    setsid bash -c "cmake -S '$W/llama.cpp' -B '$W/build' -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
      -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF &&
      cmake --build '$W/build' -j $(nproc) --target llama-bench; echo \$? > '$W/build.rc'" \
      > "$W/build.log" 2>&1 < /dev/null &
    started=1
  fi
  chmod +x "$PACK/engine-min"
  if [ ! -f "$MODEL" ]; then
    "$PACK/engine-min" synth --shape llama-8b --type q4_0 --tokenizer "$PACK/tokenizer.gguf" \
      --out "$MODEL" > "$OUT/raw-synth.txt" 2>&1 || { tail -5 "$OUT/raw-synth.txt"; exit 1; }
    say "synth llama-8b q4_0: $(du -h "$MODEL" | cut -f1) in $((SECONDS - t0)) s"
  fi
  if [ $started -eq 1 ]; then
    while [ ! -f "$W/build.rc" ] && [ $((SECONDS - t0)) -lt 540 ]; do sleep 5; done
  fi
  cp "$W/build.log" "$OUT/raw-build.txt" 2>/dev/null
  if [ -x "$LB" ]; then say "llama.cpp ready after $((SECONDS - t0)) s"; else say "llama.cpp build unfinished (raw-build.txt)"; fi
  # The perplexity tool (ggml/tools, llama.h only) for the check in `bench`.
  c++ -std=c++17 -O2 -I"$W/llama.cpp/include" -I"$W/llama.cpp/ggml/include" ggml/tools/perplexity.cpp \
    -L"$W/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$W/build/bin" -o "$W/hetero-perplexity" 2>> "$OUT/raw-build.txt" ||
    say "hetero-perplexity did not build (raw-build.txt)"
}

lla() { # WHICH ARGS... -> "pp tg"
  local which=$1
  shift
  if [ "$which" = hetero ]; then
    GGML_BACKEND_PATH=$ROOT/$PACK/libggml-hetero.so timeout 400 "$LB" "$@" -o csv 2>> "$OUT/raw-llama.err"
  else
    env -u GGML_BACKEND_PATH timeout 400 "$LB" "$@" -o csv 2>> "$OUT/raw-llama.err"
  fi | tee -a "$OUT/raw-llama.csv" | lla_pp_tg
}

bench() {
  machine
  [ -x "$LB" ] || { say "no llama-bench: run build first"; exit 1; }
  : > "$OUT/rounds.txt"
  for r in $(seq "$ROUNDS"); do
    local order="cpu hetero"
    [ $((r % 2)) -eq 0 ] && order="hetero cpu"
    for w in $order; do
      echo "llama-8b-q4_0 $w round $r load $(cut -d' ' -f1 /proc/loadavg) $(lla "$w" -m "$MODEL" -p "$PP" -n "$TG" -t "$THREADS" -r 2)" | tee -a "$OUT/rounds.txt"
    done
  done
  local cp ct hp ht
  cp=$(medf "$OUT/rounds.txt" '$2=="cpu"' 7); ct=$(medf "$OUT/rounds.txt" '$2=="cpu"' 8)
  hp=$(medf "$OUT/rounds.txt" '$2=="hetero"' 7); ht=$(medf "$OUT/rounds.txt" '$2=="hetero"' 8)
  say "llama-8b Q4_0, $THREADS threads: pp$PP $hp / $cp tok/s = $(ratio "$hp" "$cp")x; tg$TG $ht / $ct = $(ratio "$ht" "$ct")x (HETERO / llama.cpp AMX build alone, medians of $ROUNDS)"
  grep -m1 'HETERO' "$OUT/raw-llama.err" | sed 's/^/   /' | tee -a "$SUM"
  # The check: the same perplexity with and without the backend (AMX-INT8 kernels here), flash
  # attention off (see ggml/README.md), 2 chunks of this repository's READMEs.
  [ -x "$W/hetero-perplexity" ] || return 0
  cat README.md ./*/README.md > "$W/text.txt"
  local a b
  a=$(env -u GGML_BACKEND_PATH "$W/hetero-perplexity" -m "$MODEL" -f "$W/text.txt" --chunks 2 -t "$THREADS" -fa off 2> "$OUT/raw-ppl-cpu.err" | awk '/^PPL/ {print $2}')
  b=$(GGML_BACKEND_PATH=$ROOT/$PACK/libggml-hetero.so "$W/hetero-perplexity" -m "$MODEL" -f "$W/text.txt" --chunks 2 -t "$THREADS" -fa off 2> "$OUT/raw-ppl-hetero.err" | awk '/^PPL/ {print $2}')
  say "check: perplexity (2 x 512 tokens, FA off) alone ${a:-failed}, with HETERO ${b:-failed} ($(awk -v a="$a" -v b="$b" 'BEGIN {if (a > 0) printf "%+.3f%%", 100*(b-a)/a; else print "n/a"}'))"
}

case "${1:-}" in
  pack) pack ;;
  build) build ;;
  bench) bench ;;
  *) echo "usage: benches/ggml-h200.sh pack|build|bench" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Issue 32's figures: llama.cpp + hetero's ggml backend against llama.cpp alone, side by side in
# one script, llama-bench on both (the same binaries; the backend is GGML_BACKEND_PATH), rounds
# alternating which goes first, medians. Models: SmolLM2-135M Q4_1 ($HETERO_MODEL, pp128 tg64)
# and full 16-layer llama-1b synth files in Q4_0 and Q4_K_M (pp256 tg64; random weights time the
# same as real ones).
#
#   benches/ggml.sh            # -> target/ggml/bench/summary.txt and raw.txt
#
# Environment: ROUNDS (default 5), THREADS (2), REPS (llama-bench -r, 3), OUT.
# First run: builds llama-bench in the cached llama.cpp build (it needs llama-common) and writes
# the two 16-layer synth files into $HETERO_CACHE/synth (release engine-min).
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=benches/lib.sh
. benches/lib.sh
eval "$(scripts/setup.sh --env)"
OUT=${OUT:-$ROOT/target/ggml/bench}
ROUNDS=${ROUNDS:-5} THREADS=${THREADS:-2} REPS=${REPS:-3}
mkdir -p "$OUT"
LIB=$ROOT/target/ggml/libggml-hetero.so
LB=$HETERO_LLAMA_CPP_BUILD/bin/llama-bench
SUM=$OUT/summary.txt RAW=$OUT/raw.txt
: > "$SUM"
say() { echo "$*" | tee -a "$SUM"; }

[[ -x "$LB" ]] || cmake --build "$HETERO_LLAMA_CPP_BUILD" -j"$(nproc)" --target llama-bench > "$OUT/build.log" 2>&1 ||
  { tail "$OUT/build.log"; exit 1; }
scripts/ggml.sh build > /dev/null || exit 1
synth() { # TYPE -> path of the 16-layer llama-1b file
  local f=$HETERO_CACHE/synth/llama-1b-L16-$1-s24-f1.gguf
  if [[ ! -f "$f" ]]; then
    cargo build --release --quiet -p engine-min --bin engine-min &&
      target/release/engine-min synth --shape llama-1b --type "$1" --seed 24 \
        --tokenizer "$HETERO_MODEL" --out "$f" >&2 || return 1
  fi
  echo "$f"
}
MODELS=("smollm2-q4_1:$HETERO_MODEL:128" "llama-1b-q4_0:$(synth q4_0):256" "llama-1b-q4_k_m:$(synth q4_k_m):256")

say "== $(date -u +%FT%TZ) $(lscpu | grep -E '^Model name' | sed 's/  */ /g'); $(nproc) cpus; threads $THREADS"
say "   llama.cpp $(basename "$HETERO_LLAMA_CPP_SRC") ($HETERO_LLAMA_CPP_BUILD); backend $LIB"
say "   llama-bench -p PP -n 64 -t $THREADS -r $REPS -o csv, alone and with GGML_BACKEND_PATH; $ROUNDS rounds"
: > "$RAW"
one() { # NAME FILE PP WHICH -> "pp tg"
  if [[ $4 == hetero ]]; then
    GGML_BACKEND_PATH=$LIB "$LB" -m "$2" -p "$3" -n 64 -t "$THREADS" -r "$REPS" -o csv 2>> "$OUT/llama-bench.err"
  else
    env -u GGML_BACKEND_PATH "$LB" -m "$2" -p "$3" -n 64 -t "$THREADS" -r "$REPS" -o csv 2>> "$OUT/llama-bench.err"
  fi | tee -a "$OUT/llama-bench.csv" | lla_pp_tg
}
for r in $(seq "$ROUNDS"); do
  order="cpu hetero"
  (( r % 2 == 0 )) && order="hetero cpu"
  for m in "${MODELS[@]}"; do
    IFS=: read -r name file pp <<< "$m"
    for w in $order; do
      echo "$name $w round $r load $(cut -d' ' -f1 /proc/loadavg) $(one "$name" "$file" "$pp" "$w")" | tee -a "$RAW"
    done
  done
done
for m in "${MODELS[@]}"; do
  IFS=: read -r name file pp <<< "$m"
  cp=$(medf "$RAW" "\$1==\"$name\" && \$2==\"cpu\"" 7); ct=$(medf "$RAW" "\$1==\"$name\" && \$2==\"cpu\"" 8)
  hp=$(medf "$RAW" "\$1==\"$name\" && \$2==\"hetero\"" 7); ht=$(medf "$RAW" "\$1==\"$name\" && \$2==\"hetero\"" 8)
  ld=$(medf "$RAW" "\$1==\"$name\"" 6)
  say "$name: pp$pp $hp / $cp tok/s = $(ratio "$hp" "$cp")x; tg64 $ht / $ct = $(ratio "$ht" "$ct")x (HETERO / alone, medians of $ROUNDS; load median $ld)"
done

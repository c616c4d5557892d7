#!/usr/bin/env bash
# Side by side on this machine: engine-min's `bench` and llama.cpp's `llama-bench`, the same
# model, the same thread count, pp$PP and tg$TG (default 128 and 64), alternating ROUNDS times
# so both see the same machine state; prints each run (with the load average) and the medians per model.
# llama.cpp is not part of this project: build it yourself (issue 9 says how) and pass its
# llama-bench binary.
#   LLAMA_BENCH=/path/to/llama-bench [MODELS="a.gguf b.gguf"] [PP=128] [TG=64] \
#     benches/engine-min-vs-llama.sh [ROUNDS] [THREADS] [KERNEL]
# MODELS defaults to $HETERO_MODEL; each round runs every model, ours then theirs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}; THREADS=${2:-2}; KERNEL=${3:-sme-int8}
PP=${PP:-128}; TG=${TG:-64}
: "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}"
# shellcheck source=benches/lib.sh
. benches/lib.sh
eval "$(scripts/setup.sh --env)"
MODELS=${MODELS:-$HETERO_MODEL}
cargo build -q --release -p engine-min
E=target/release/engine-min
LIBDIR=$(dirname "$LLAMA_BENCH")
declare -A ours_pp ours_tg theirs_pp theirs_tg
for r in $(seq "$ROUNDS"); do
  for m in $MODELS; do
    name=$(basename "$m" .gguf)
    echo "round $r, $name, load: $(cut -d' ' -f1-3 /proc/loadavg)"
    o=$($E bench --model "$m" --threads "$THREADS" --kernel "$KERNEL" --reps 3 --pp "$PP" --tg "$TG")
    echo "$o" | sed 's/^/  engine-min: /'
    read -r pp tg <<< "$(echo "$o" | eng_pp_tg)"
    ours_pp[$m]+=" $pp"; ours_tg[$m]+=" $tg"
    read -r pp tg <<< "$(LD_LIBRARY_PATH="$LIBDIR" "$LLAMA_BENCH" -m "$m" -t "$THREADS" \
      -p "$PP" -n "$TG" -r 3 -o csv 2>/dev/null | lla_pp_tg)"
    echo "  llama.cpp:  pp$PP $pp tok/s, tg$TG $tg tok/s"
    theirs_pp[$m]+=" $pp"; theirs_tg[$m]+=" $tg"
  done
done
med_of() { printf '%s\n' $1 | med; } # "a b c" -> median
echo "medians over $ROUNDS rounds, $THREADS threads, kernel $KERNEL:"
for m in $MODELS; do
  op=$(med_of "${ours_pp[$m]}"); ot=$(med_of "${ours_tg[$m]}"); tp=$(med_of "${theirs_pp[$m]}"); tt=$(med_of "${theirs_tg[$m]}")
  echo "$(basename "$m" .gguf):"
  echo "  pp$PP: engine-min $op tok/s, llama.cpp $tp tok/s, ratio $(ratio "$op" "$tp")"
  echo "  tg$TG:  engine-min $ot tok/s, llama.cpp $tt tok/s, ratio $(ratio "$ot" "$tt")"
done

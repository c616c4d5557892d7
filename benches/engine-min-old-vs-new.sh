#!/usr/bin/env bash
# Issue 14's speed check: two engine-min binaries side by side, `bench --reps 3` (pp128 and
# tg64, plan cpu, the default CPU kernel) alternating ROUNDS times, old first then new, so both
# see the same machine state; prints each run, the load before it, the medians and new/old
# ratios (the bar: within 3%, ratios >= 0.97). Builds nothing and needs no Rust toolchain, so it
# runs as is on a machine that only has the two binaries and the model.
#   HETERO_MODEL=model.gguf benches/engine-min-old-vs-new.sh OLD NEW [ROUNDS (5)] [THREADS (2)]
# OLD: engine-min of commit d5c48af (its bench had no --plan argument beyond cpu|gpu and the
# same --kernel default); NEW: this tree's. Both take `bench --model --threads --reps`, and
# print `pp128: X tok/s median (...)` and `tg64: X tok/s median (...)`.
set -euo pipefail
OLD=${1:?usage: $0 OLD NEW [ROUNDS] [THREADS]}
NEW=${2:?usage: $0 OLD NEW [ROUNDS] [THREADS]}
ROUNDS=${3:-5}; THREADS=${4:-2}
: "${HETERO_MODEL:?set HETERO_MODEL to the GGUF model (SmolLM2-135M-Instruct Q4_1)}"
for b in "$OLD" "$NEW"; do [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }; done
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $THREADS thread(s), $ROUNDS rounds"
echo "old: $OLD"; echo "new: $NEW"
old_pp=(); old_tg=(); new_pp=(); new_tg=()
bench() { # BINARY -> its output; fails loudly when the binary does
  "$1" bench --model "$HETERO_MODEL" --threads "$THREADS" --reps 3
}
field() { awk -v k="$1" '$1 == k":" {print $2}'; }
for r in $(seq "$ROUNDS"); do
  for which in old new; do
    bin=$OLD; [ "$which" = new ] && bin=$NEW
    echo "round $r $which, load: $(cut -d' ' -f1-3 /proc/loadavg)"
    o=$(bench "$bin")
    echo "$o" | sed 's/^/  /'
    pp=$(echo "$o" | field pp128); tg=$(echo "$o" | field tg64)
    [ -n "$pp" ] && [ -n "$tg" ] || { echo "no pp128/tg64 line from $bin" >&2; exit 1; }
    if [ "$which" = old ]; then old_pp+=("$pp"); old_tg+=("$tg"); else new_pp+=("$pp"); new_tg+=("$tg"); fi
  done
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a/b}'; }
# Per-round ratios show whether the medians' ratio is steady or one noisy round.
per_round() { local -n o=$1 n=$2; local i s=""; for i in "${!o[@]}"; do s+="$(ratio "${n[$i]}" "${o[$i]}") "; done; echo "$s"; }
op=$(med "${old_pp[@]}"); np=$(med "${new_pp[@]}"); ot=$(med "${old_tg[@]}"); nt=$(med "${new_tg[@]}")
echo "medians over $ROUNDS rounds (each a median of 3 reps), $THREADS thread(s):"
echo "  pp128: old $op tok/s, new $np tok/s, new/old $(ratio "$np" "$op") (per round: $(per_round old_pp new_pp))"
echo "  tg64:  old $ot tok/s, new $nt tok/s, new/old $(ratio "$nt" "$ot") (per round: $(per_round old_tg new_tg))"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

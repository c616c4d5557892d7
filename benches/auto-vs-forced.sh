#!/usr/bin/env bash
# Issue 16's figures: `--plan auto` (the planner's plan from a profile measured here) against
# every forced plan, side by side: `engine-min bench` (pp N and tg N, medians of REPS) on each
# plan in turn, ROUNDS rounds alternating, so every plan sees the same machine state; then the
# medians, auto / best forced plan per phase, and auto's prediction error per op class
# (`bench --predict`). Builds nothing and needs no Rust toolchain: it runs unchanged on a machine
# that only has the engine-min binary and the model (the H200 machine: benches/h200-session.sh
# plans).
#
#   HETERO_MODEL=model.gguf benches/auto-vs-forced.sh
#
# Environment: ENGINE (default target/release/engine-min), ROUNDS (3), REPS (3), PP (128), TG (64),
# THREADS (all CPUs), PLANS (forced plans, default "cpu gpu cpu-gpu:0.5"; a plan this machine
# cannot run, e.g. gpu without OpenCL, is reported as n/a), PROFILE (a profile to use; default:
# `engine-min profile` first, written to $OUT/profile.json), OUT (default /tmp/auto-vs-forced).
# The NPU (QNN HTP simulator on x86) is left out: its times are not speed.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${HETERO_MODEL:?set HETERO_MODEL to the GGUF model (SmolLM2-135M-Instruct Q4_1)}"
ENGINE=${ENGINE:-target/release/engine-min}
ROUNDS=${ROUNDS:-3}; REPS=${REPS:-3}; PP=${PP:-128}; TG=${TG:-64}
THREADS=${THREADS:-$(nproc)}
PLANS=${PLANS:-"cpu gpu cpu-gpu:0.5"}
OUT=${OUT:-/tmp/auto-vs-forced}
mkdir -p "$OUT"
[ -x "$ENGINE" ] || { echo "not an executable: $ENGINE (cargo build --release -p engine-min)" >&2; exit 2; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $THREADS thread(s); load $(load)"
echo "engine: $ENGINE; pp$PP tg$TG, $REPS reps a bench, $ROUNDS rounds; $(date -u +%FT%TZ)"

PROFILE=${PROFILE:-}
if [ -z "$PROFILE" ]; then
  PROFILE=$OUT/profile.json
  echo "profiling (engine-min profile --threads $THREADS --no-npu), load $(load)"
  t0=$(date +%s)
  "$ENGINE" profile --threads "$THREADS" --no-npu --out "$PROFILE" > "$OUT/profile.log" 2>&1 ||
    { tail -20 "$OUT/profile.log"; echo "profile failed" >&2; exit 1; }
  echo "  profile written in $(( $(date +%s) - t0 )) s: $PROFILE (progress in $OUT/profile.log)"
fi
"$ENGINE" plan --profile "$PROFILE" 2>&1 | grep -m1 '^plan:'

# One bench: "pp tg" medians, or "n/a n/a" when the plan cannot run here (its reason in raw.txt).
bench() { # PLAN [ARGS...]
  local plan=$1; shift
  local o
  if [ "$plan" = auto ]; then set -- --profile "$PROFILE" "$@"; fi
  if o=$("$ENGINE" bench --plan "$plan" --threads "$THREADS" --pp "$PP" --tg "$TG" --reps "$REPS" "$@" 2>&1); then
    echo "== $plan $*" >> "$OUT/raw.txt"; echo "$o" >> "$OUT/raw.txt"
    echo "$o" | awk -v p="pp$PP:" -v t="tg$TG:" '$1==p {pp=$2} $1==t {tg=$2} END {print (pp==""?"n/a":pp), (tg==""?"n/a":tg)}'
  else
    { echo "== $plan $* FAILED"; echo "$o"; } >> "$OUT/raw.txt"
    echo "n/a n/a"
  fi
}

: > "$OUT/raw.txt"
: > "$OUT/rounds.txt"
all="auto $PLANS"
for r in $(seq "$ROUNDS"); do
  for p in $all; do
    l=$(load)
    line="round $r $p $(bench "$p") load $l"
    echo "  $line"
    echo "$line" >> "$OUT/rounds.txt"
  done
done

med() { grep -v 'n/a' | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); else print "n/a"}'; }
echo "medians over $ROUNDS rounds (tok/s; each a median of $REPS reps):"
declare -A mpp mtg
for p in $all; do
  mpp[$p]=$(awk -v p="$p" '$3==p {print $4}' "$OUT/rounds.txt" | med)
  mtg[$p]=$(awk -v p="$p" '$3==p {print $5}' "$OUT/rounds.txt" | med)
  printf '  %-12s pp%s %8s   tg%s %8s\n' "$p" "$PP" "${mpp[$p]}" "$TG" "${mtg[$p]}"
done
# auto against the best forced plan, per phase.
best() { # pp|tg
  local -n m=$1; local p b="" bv=0
  for p in $PLANS; do
    [ "${m[$p]}" = n/a ] && continue
    if awk -v a="${m[$p]}" -v b="$bv" 'BEGIN {exit !(a > b)}'; then b=$p; bv=${m[$p]}; fi
  done
  echo "$b $bv"
}
for ph in pp tg; do
  read -r bp bv < <(if [ $ph = pp ]; then best mpp; else best mtg; fi)
  if [ $ph = pp ]; then a=${mpp[auto]}; else a=${mtg[auto]}; fi
  if [ -n "$bp" ] && [ "$a" != n/a ]; then
    echo "  $ph: auto $a vs best forced ($bp) $bv: $(awk -v a="$a" -v b="$bv" 'BEGIN {printf "%.3f", a/b}')x (goal >= 0.97x)"
  else
    echo "  $ph: no comparison (auto $a, best forced ${bp:-none})"
  fi
done

echo "prediction error of auto's plan (bench --predict, $REPS reps):"
"$ENGINE" bench --plan auto --profile "$PROFILE" --threads "$THREADS" --pp "$PP" --tg "$TG" \
  --reps "$REPS" --predict > "$OUT/predict.txt" 2>&1 || echo "  bench --predict failed (see $OUT/predict.txt)"
sed -n '/^plan:/p; /^prediction error/,$p' "$OUT/predict.txt" | sed 's/^/  /'
echo "load after: $(load); outputs in $OUT"

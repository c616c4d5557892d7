#!/usr/bin/env bash
# The ggml stage's proof (scripts/ggml.sh test runs it after building the backend): llama.cpp,
# as scripts/setup.sh llama-cpp builds it, with and without hetero's backend.
#
#  1. test-backend-ops -o MUL_MAT -b HETERO: every case our backend takes passes (llama.cpp's own
#     comparison with its CPU backend), and each of the 9 types we run has passing cases.
#  2. placement (fallback.cpp): weights of types and shapes we do not run stay in CPU buffers and
#     the CPU backend computes them (bit-identical to the CPU alone); ours are computed by us.
#  3. perplexity (ggml/tools/perplexity.cpp, llama-perplexity's method) with vs without the
#     backend within 0.5% on SmolLM2 Q4_1 and on 2-layer llama-1b synth files in Q4_0 and
#     Q4_K_M, flash attention off (see ggml/README.md: llama.cpp's CPU flash attention
#     accumulates in FP16 and moves SmolLM2's perplexity by 0.6% between its own settings).
#  4. llama-simple: the same greedy text with and without the backend on SmolLM2.
#  5. the loader: a missing library, a backend of another API version, a backend built for
#     another ggml: each a clear message from the loader, and llama.cpp runs on without it.
#
# Environment: HETERO_LLAMA_CPP_SRC/BUILD, HETERO_MODEL, HETERO_CACHE (scripts/setup.sh --env).
set -uo pipefail

cd "$(dirname "$0")/../../.."
ROOT=$(pwd)
OUT=$ROOT/target/ggml
LIB=$OUT/libggml-hetero.so
BIN=$HETERO_LLAMA_CPP_BUILD/bin
TEXT=/usr/share/common-licenses/GPL-3 # English prose on every Debian (base-files), ~9k tokens
LOG=$OUT/logs
mkdir -p "$LOG"
FAILED=()

pass() { echo "ggml: ok   $*"; }
fail() { echo "ggml: FAIL $*"; FAILED+=("$1"); }

[[ -f "$LIB" ]] || { echo "ggml: $LIB missing (scripts/ggml.sh build)"; exit 1; }
[[ -f "$TEXT" ]] || { echo "ggml: $TEXT missing (Debian's base-files)"; exit 1; }

# --- 1. test-backend-ops -------------------------------------------------------------------------
t0=$SECONDS
GGML_BACKEND_PATH=$LIB "$BIN/test-backend-ops" -o MUL_MAT -b HETERO > "$LOG/test-backend-ops.log" 2>&1
rc=$?
line=$(grep -aoE '[0-9]+/[0-9]+ tests passed' "$LOG/test-backend-ops.log" | tail -1)
got=${line%%/*} all=${line#*/} all=${all%% *}
types_ok=1
for t in f16 q4_0 q4_1 q5_0 q5_1 q8_0 q4_K q5_K q6_K; do
  # One grep: `grep | grep -q` under pipefail fails when -q exits before the writer (SIGPIPE).
  grep -aqE "type_a=$t,.*OK" "$LOG/test-backend-ops.log" || { types_ok=0; echo "ggml: no passing MUL_MAT case for $t"; }
done
if [[ $rc -eq 0 && -n "$line" && "$got" == "$all" && $all -ge 150 && $types_ok -eq 1 ]]; then
  pass "test-backend-ops MUL_MAT on HETERO: $got/$all passed, all 9 types ($((SECONDS - t0)) s)"
else
  fail test-backend-ops "MUL_MAT on HETERO: '${line:-no summary}', rc $rc (see $LOG/test-backend-ops.log)"
fi

# --- 2. placement and fallback -------------------------------------------------------------------
c++ -std=c++17 -O1 -Wall -Wextra -Werror -I"$HETERO_LLAMA_CPP_SRC/ggml/include" ggml/tests/llama/fallback.cpp \
  -L"$BIN" -lggml -lggml-base -Wl,-rpath,"$BIN" -o "$OUT/fallback"
if GGML_BACKEND_PATH=$LIB "$OUT/fallback" > "$LOG/fallback.log" 2>&1; then
  pass "placement: $(tail -1 "$LOG/fallback.log")"
else
  fail fallback "placement (see $LOG/fallback.log):"; grep -v '^ok' "$LOG/fallback.log"
fi

# --- 3. perplexity -------------------------------------------------------------------------------
# synth_file TYPE: the 2-layer llama-1b synth file the real-width tests use (same name and seed),
# made once with a release build of engine-min.
synth_file() {
  local f=$HETERO_CACHE/synth/llama-1b-L2-$1-s24-f1.gguf
  if [[ ! -f "$f" ]]; then
    mkdir -p "$HETERO_CACHE/synth"
    cargo build --release --quiet -p engine-min --bin engine-min >&2 &&
      target/release/engine-min synth --shape llama-1b --layers 2 --type "$1" --seed 24 \
        --tokenizer "$HETERO_MODEL" --out "$f" >&2 || return 1
  fi
  echo "$f"
}

ppl() { # NAME MODEL CHUNKS
  local name=$1 model=$2 chunks=$3 a b
  "$OUT/hetero-perplexity" -m "$model" -f "$TEXT" -c 512 --chunks "$chunks" -t 2 -fa off \
    > "$LOG/ppl-$name-cpu.log" 2>&1
  GGML_BACKEND_PATH=$LIB "$OUT/hetero-perplexity" -m "$model" -f "$TEXT" -c 512 --chunks "$chunks" \
    -t 2 -fa off > "$LOG/ppl-$name-hetero.log" 2>&1
  a=$(awk '/^PPL /{print $2}' "$LOG/ppl-$name-cpu.log")
  b=$(awk '/^PPL /{print $2}' "$LOG/ppl-$name-hetero.log")
  local took=$(grep -c 'HETERO model buffer size' "$LOG/ppl-$name-hetero.log")
  if [[ -z "$a" || -z "$b" || $took -eq 0 ]]; then
    fail "ppl-$name" "perplexity $name: cpu '${a:-none}', hetero '${b:-none}', HETERO weights: $took (see $LOG/ppl-$name-*.log)"
    return
  fi
  if awk -v a="$a" -v b="$b" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d; exit !(d <= 0.005) }'; then
    pass "perplexity $name ($chunks x 512 tokens): CPU $a, with HETERO $b ($(awk -v a="$a" -v b="$b" 'BEGIN{printf "%+.3f%%", 100*(b-a)/a}'))"
  else
    fail "ppl-$name" "perplexity $name: CPU $a, with HETERO $b: beyond 0.5%"
  fi
}
t0=$SECONDS
ppl smollm2-q4_1 "$HETERO_MODEL" 8
for ty in q4_0 q4_k_m; do
  if f=$(synth_file $ty); then ppl "llama-1b-L2-$ty" "$f" 4; else fail "synth-$ty" "could not make the $ty synth file"; fi
done
echo "ggml: perplexity took $((SECONDS - t0)) s"

# --- 4. greedy text ------------------------------------------------------------------------------
# Prompts whose greedy continuation llama.cpp itself keeps under its own numerical noise (its
# flash attention on or off): SmolLM2's logits move by up to ~1 between those, so a prompt with
# near-ties in its continuation diverges with any change of summation order (ggml/README.md).
for prompt in "1, 2, 3, 4, 5, 6, 7, 8," "Monday, Tuesday, Wednesday,"; do
  a=$(env -u GGML_BACKEND_PATH "$BIN/llama-simple" -m "$HETERO_MODEL" -n 32 "$prompt" 2>/dev/null)
  b=$(GGML_BACKEND_PATH=$LIB "$BIN/llama-simple" -m "$HETERO_MODEL" -n 32 "$prompt" 2> "$LOG/simple-hetero.err")
  if [[ -n "$a" && "$a" == "$b" ]] && grep -q 'HETERO model buffer size' "$LOG/simple-hetero.err"; then
    pass "llama-simple greedy text identical with HETERO: $(echo "$b" | tr '\n' ' ' | cut -c1-70)..."
  else
    fail simple "llama-simple '$prompt': CPU '$(echo "$a" | tr '\n' ' ')' vs HETERO '$(echo "$b" | tr '\n' ' ')'"
  fi
done

# --- 5. the loader's messages --------------------------------------------------------------------
loader() { # NAME LIBRARY EXPECTED-MESSAGE
  local out
  out=$(GGML_BACKEND_PATH=$2 "$BIN/llama-simple" -m "$HETERO_MODEL" -n 4 "1, 2, 3," 2>&1)
  local rc=$?
  if [[ $rc -eq 0 ]] && grep -qF -- "$3" <<<"$out" && ! grep -q 'HETERO model buffer' <<<"$out"; then
    pass "loader, $1: \"$(grep -F -- "$3" <<<"$out" | head -1 | cut -c1-150)\"; llama.cpp ran on without it"
  else
    fail "loader-$1" "loader, $1: rc $rc, expected '$3' in: $(grep -i 'hetero\|load_backend' <<<"$out" | head -3)"
  fi
}
loader missing "$OUT/no-such-libggml-hetero.so" "failed to load $OUT/no-such-libggml-hetero.so"
# Test builds of the shim: another backend API version, headers of another ggml.
scripts/ggml.sh shim "$OUT/test-api-version.so" -DHETERO_GGML_TEST_API_VERSION=1 &&
  loader "api-version" "$OUT/test-api-version.so" "incompatible API version (backend: 1, current: "
scripts/ggml.sh shim "$OUT/test-ggml-version.so" -DHETERO_GGML_TEST_BUILT_FOR='"0.0.0-test"' &&
  loader "ggml-version" "$OUT/test-ggml-version.so" "was built against ggml 0.0.0-test"

echo
if [[ ${#FAILED[@]} -eq 0 ]]; then
  echo "ggml: all checks passed"
else
  echo "ggml: ${#FAILED[@]} failed: ${FAILED[*]}"
  exit 1
fi

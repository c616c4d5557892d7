#!/usr/bin/env bash
# Perplexity per model × text × kernel/plan (issue 18's table): `engine-min perplexity` for each
# CPU kernel and plan asked for, and llama.cpp's `llama-perplexity` on the same files and
# context when LLAMA_PERPLEXITY names a binary you built (llama.cpp is not part of this project).
# Prints one tab-separated row per run (model, text, engine, kernel/plan, chunks, PPL, ±, seconds,
# load average at the start) and keeps every raw output under OUT.
#
#   benches/ppl-table.sh                       # defaults below
#   MODELS="a.gguf b.gguf" TEXTS="GPL-3" KERNELS="avx512 sme-int8" PLANS="gpu npu" \
#   PLAN_CHUNKS=1 CHUNKS=4 CTX=512 THREADS=2 LLAMA_PERPLEXITY=/path/to/llama-perplexity \
#   OUT=target/ppl benches/ppl-table.sh
#
# MODELS: GGUF files (default: $HETERO_MODEL and every file in $HETERO_FIXTURES).
# TEXTS:  files, or names under /usr/share/common-licenses (base-files ships them on every Debian
#         system, CI's included). Default: GPL-3 Apache-2.0 GFDL-1.3.
# KERNELS: CPU kernels run on --plan cpu (default: avx512 sme-gemv sme-int8; `sme` equals
#         sme-int8 here, because perplexity runs every chunk as prefill batches, which `sme`
#         sends to the int8 GEMM). avx512 is the f32-exact path (f32 activations, weights
#         dequantized to f32), i.e. the f32 reference forward.
# PLANS:  extra plans (gpu, npu, ...) run with the default kernel, at most PLAN_CHUNKS chunks
#         each (PoCL and the QNN simulator are slow here). Default: none.
# PLAN_ARGS: extra arguments of the plan runs (e.g. "--gpu-path per-matmul": on PoCL under load a
#         256-row resident prefill step can outlast the decoder's 60 s readback bound).
# CHUNKS: at most this many chunks per text on the CPU (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/setup.sh --env)"
CTX=${CTX:-512}; THREADS=${THREADS:-2}; OUT=${OUT:-target/ppl}
KERNELS=${KERNELS-avx512 sme-gemv sme-int8}; PLANS=${PLANS:-}; PLAN_CHUNKS=${PLAN_CHUNKS:-1}
TEXTS=${TEXTS:-GPL-3 Apache-2.0 GFDL-1.3}
if [[ -z "${MODELS:-}" ]]; then
  MODELS="$HETERO_MODEL $(ls "$HETERO_FIXTURES"/*.gguf 2>/dev/null | tr '\n' ' ')"
fi
cargo build -q --release -p engine-min
E=target/release/engine-min
mkdir -p "$OUT"

text_path() { [[ -f "$1" ]] && echo "$1" || echo "/usr/share/common-licenses/$1"; }
short() { basename "$1" .gguf | sed 's/^SmolLM2-135M-Instruct\.//'; }
load() { cut -d' ' -f1 /proc/loadavg; }

# One engine-min run: MODEL TEXT LABEL CHUNKS ARGS...
ours() {
  local m=$1 t=$2 label=$3 chunks=$4; shift 4
  local log="$OUT/$(short "$m").$(basename "$t").$label.txt" l0 t0
  l0=$(load); t0=$(date +%s.%N)
  local extra=(); [[ -n "$chunks" ]] && extra=(--chunks "$chunks")
  if "$E" perplexity --model "$m" --file "$t" --ctx "$CTX" --threads "$THREADS" "${extra[@]}" "$@" >"$log" 2>&1; then
    awk -v m="$(short "$m")" -v t="$(basename "$t")" -v k="$label" -v s="$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')" -v l="$l0" \
      '/^Final estimate/ {printf "%s\t%s\tengine-min\t%s\t%s\t%s\t%s\t%.0f\t%s\n", m, t, k, substr($8,2), $5, $7, s, l}' "$log"
  else
    printf '%s\t%s\tengine-min\t%s\tfailed: %s\n' "$(short "$m")" "$(basename "$t")" "$label" "$(tail -1 "$log")"
  fi
}

# One llama-perplexity run: MODEL TEXT
theirs() {
  local m=$1 t=$2 log l0 t0
  log="$OUT/$(short "$m").$(basename "$t").llama.txt"; l0=$(load); t0=$(date +%s.%N)
  if LD_LIBRARY_PATH="$(dirname "$LLAMA_PERPLEXITY")" "$LLAMA_PERPLEXITY" -m "$m" -f "$t" -c "$CTX" \
      -t "$THREADS" ${CHUNKS:+--chunks "$CHUNKS"} >"$log" 2>&1; then
    # "[timestamp I] Final estimate: PPL = 12.3456 +/- 0.12345" (recent builds prefix a
    # timestamp); chunks from "calculating perplexity over N chunks" (older: "computing over").
    local n r; n=$(sed -n 's/.* over \([0-9]*\) chunks.*/\1/p' "$log" | head -1)
    r=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\).*/\1\t\2/p' "$log")
    printf '%s\t%s\tllama.cpp\tcpu\t%s\t%s\t%.0f\t%s\n' "$(short "$m")" "$(basename "$t")" "$n" "$r" \
      "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')" "$l0"
  else
    printf '%s\t%s\tllama.cpp\tcpu\tfailed: %s\n' "$(short "$m")" "$(basename "$t")" "$(tail -1 "$log")"
  fi
}

printf 'model\ttext\tengine\tkernel/plan\tchunks\tPPL\t+/-\tseconds\tload\n'
for m in $MODELS; do
  for name in $TEXTS; do
    t=$(text_path "$name")
    for k in $KERNELS; do ours "$m" "$t" "$k" "${CHUNKS:-}" --kernel "$k"; done
    for p in $PLANS; do ours "$m" "$t" "plan-$p" "$PLAN_CHUNKS" --plan "$p" ${PLAN_ARGS:-}; done
    if [[ -n "${LLAMA_PERPLEXITY:-}" ]]; then theirs "$m" "$t"; fi
  done
done

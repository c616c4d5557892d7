#!/usr/bin/env bash
# engine-min on the H200 device machine: the GPU-resident decoder (issue 15) and the CPU path
# (issue 19) side by side with llama.cpp, in the calls of one warm device session. The machine
# has no Rust toolchain and reaches no registry: x86-64 binaries built on the dev VM travel in
# .device/ (git-ignored), the 98 MB model in parts (one call carries at most 64 MiB), and
# llama.cpp is built there by the user from its own source, outside this repository (this
# script only takes the path of its llama-bench).
#
#   benches/h200-session.sh check     # model parts in /root/parts/ -> /root/smollm2.gguf;
#                                     # correctness on NVIDIA's OpenCL (decoder tests, the
#                                     # resident decoder on the real model, greedy text per plan)
#   benches/h200-session.sh figures   # the side-by-side figures (needs LLAMA_BENCH)
#   benches/h200-session.sh plans     # issue 16: `engine-min profile` here, then `bench` with
#                                     # --plan auto vs cpu vs gpu vs cpu-gpu:0.5, alternating,
#                                     # medians, and auto's prediction error (bench --predict)
#
# Environment: LLAMA_BENCH (path of a llama-bench built with CUDA sm_90 and GGML_NATIVE=ON, so
# its CPU backend is the AMX build), ROUNDS (default 3), THREADS (default "1 2 4 8 16"),
# PARTS (which figures: default "gpu cpu breakdown oldnew"), OLD/NEW (two engine-min binaries
# side by side; optional; OLDNEW_THREADS default "2 16", OLDNEW_GPU=1 adds --plan gpu), PLAN_THREADS
# (plans: default 16), M (the model file, default /root/smollm2.gguf), NO_OPENCL_ENV.
# Binaries: .device/eng/engine-min (stripped `cargo build --release -p engine-min`: timings
# need the release profile, `ci`'s debug assertions and overflow checks cost 2-3x), and
# .device/ocl-resident/ from opencl-kernels/benches/h200-resident-build.sh.
# Outputs under $OUT: check.txt, gpu.txt, cpu.txt, breakdown.txt, oldnew.txt, summary.txt;
# plans: plans.txt and plans/ (the profile, its progress, every bench's output).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
M=${M:-/root/smollm2.gguf}
E=${E:-$(pwd)/.device/eng/engine-min}
D=${D:-$(pwd)/.device/ocl-resident}
SUM=$OUT/summary.txt
say() { echo "$*" | tee -a "$SUM"; }
# shellcheck source=benches/lib.sh
. benches/lib.sh

model() {
  if [ ! -f $M ]; then
    cat /root/parts/part* > $M
  fi
  sha256sum $M | grep -q '^b179c952' || { say "model checksum mismatch"; exit 1; }
  export HETERO_MODEL=$M
}

machine() {
  say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
  say "   $(lscpu | grep -E '^Model name' | sed 's/  */ /g'); $(nproc) cpus; amx: $(grep -o 'amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  say "   load $(cut -d' ' -f1-3 /proc/loadavg)"
}

check() {
  chmod +x "$E" "$D"/* 2>/dev/null
  {
    echo "== decoder tests (NVIDIA)"
    HETERO_REQUIRE=opencl timeout 240 "$D/decoder-tests" --test-threads 2 2>&1 | tail -15
    echo "== resident decoder on SmolLM2 vs the f32 reference (NVIDIA)"
    HETERO_REQUIRE=opencl,model timeout 300 "$D/gpu-resident-tests" --nocapture --test-threads 1 2>&1 |
      grep -E "max \|logit|compared|^test |test result" | tail -20
    for p in cpu gpu "gpu --gpu-path per-matmul" cpu-gpu:0.5; do
      echo "== run --plan $p"
      # shellcheck disable=SC2086
      timeout 120 "$E" run --plan $p --threads 16 --prompt "The capital of France is" \
        --max-tokens 12 2>&1 | tail -9
    done
  } > "$OUT/check.txt" 2>&1
  grep -E "test result|FAILED|panicked|^ Paris| Paris|decode:|prefill:" "$OUT/check.txt" | tee -a "$SUM"
}

# One engine-min bench line: "pp tg" medians.
eng() { # ARGS...
  timeout 240 "$E" bench "$@" 2>&1 | tee -a "$OUT/raw-eng.txt" |
    eng_pp_tg
}

# One llama-bench run: "pp tg" (avg t/s of its repetitions).
lla() { # ARGS...
  timeout 240 "$LLAMA_BENCH" -m $M -p 128 -n 64 -r 3 -o csv "$@" 2>>"$OUT/raw-llama.err" |
    tee -a "$OUT/raw-llama.txt" | lla_pp_tg
}

has() { [[ " ${PARTS:-gpu cpu breakdown oldnew} " == *" $1 "* ]]; }

figures() {
  if has gpu || has cpu; then
    [ -x "${LLAMA_BENCH:-}" ] || { say "LLAMA_BENCH is not an executable: no figures"; exit 1; }
  fi
  has gpu && figures_gpu
  has cpu && figures_cpu
  has breakdown && figures_breakdown
  has oldnew && figures_oldnew
  return 0
}

figures_gpu() {
  local rounds=${ROUNDS:-3}
  # -- GPU: the resident decoder vs llama.cpp CUDA (-ngl 99), alternating.
  : > "$OUT/gpu.txt"
  for r in $(seq "$rounds"); do
    echo "round $r ours $(eng --plan gpu --reps 3) llama $(lla -ngl 99)" >> "$OUT/gpu.txt"
  done
  local gp gt lp lt
  gp=$(medf "$OUT/gpu.txt" 1 4); gt=$(medf "$OUT/gpu.txt" 1 5)
  lp=$(medf "$OUT/gpu.txt" 1 7); lt=$(medf "$OUT/gpu.txt" 1 8)
  say "GPU resident vs llama.cpp CUDA: pp128 $gp / $lp = $(ratio "$gp" "$lp")x; tg64 $gt / $lt = $(ratio "$gt" "$lt")x"
  say "   per-matmul GPU path (before): $(eng --plan gpu --gpu-path per-matmul --reps 2)"
}

figures_cpu() {
  local rounds=${ROUNDS:-3} threads=${THREADS:-"1 2 4 8 16"}
  # -- CPU: engine-min's default kernel vs llama.cpp's CPU backend (CUDA hidden: its AMX build).
  : > "$OUT/cpu.txt"
  for t in $threads; do
    for r in $(seq "$rounds"); do
      echo "t $t round $r ours $(eng --plan cpu --threads "$t" --reps 3) llama $(CUDA_VISIBLE_DEVICES= lla -ngl 0 -t "$t")" >> "$OUT/cpu.txt"
    done
    local cp ct lcp lct
    cp=$(medf "$OUT/cpu.txt" "\$2==$t" 6); ct=$(medf "$OUT/cpu.txt" "\$2==$t" 7)
    lcp=$(medf "$OUT/cpu.txt" "\$2==$t" 9); lct=$(medf "$OUT/cpu.txt" "\$2==$t" 10)
    say "CPU $t thr vs llama.cpp (AMX build): pp128 $cp / $lcp = $(ratio "$cp" "$lcp")x; tg64 $ct / $lct = $(ratio "$ct" "$lct")x"
  done
}

figures_breakdown() {
  local threads=${THREADS:-"1 2 4 8 16"}
  # -- Where the CPU's time goes, per thread count.
  : > "$OUT/breakdown.txt"
  for t in $threads; do
    echo "== threads $t" >> "$OUT/breakdown.txt"
    timeout 120 "$E" bench --plan cpu --threads "$t" --reps 1 --breakdown 2>&1 | tail -34 >> "$OUT/breakdown.txt"
  done
}

figures_oldnew() {
  local rounds=${ROUNDS:-3}
  # -- Two engine-min binaries side by side, alternating (issue 14's speed check: the old
  # engine-min against this one; or a `ci`-profile build against a release one), on the CPU
  # at OLDNEW_THREADS and, with OLDNEW_GPU=1, on the resident GPU path too.
  if [ -n "${OLD:-}" ] && [ -x "${OLD:-}" ] && [ -x "${NEW:-$E}" ]; then
    : > "$OUT/oldnew.txt"
    if [ -n "${OLDNEW_GPU:-}" ]; then
      for r in $(seq "$rounds"); do
        echo "gpu round $r old $(E=$OLD eng --plan gpu --reps 3) new $(E=${NEW:-$E} eng --plan gpu --reps 3)" >> "$OUT/oldnew.txt"
      done
      local gop got gnp gnt
      local g='$1=="gpu"'
      gop=$(medf "$OUT/oldnew.txt" "$g" 5); got=$(medf "$OUT/oldnew.txt" "$g" 6)
      gnp=$(medf "$OUT/oldnew.txt" "$g" 8); gnt=$(medf "$OUT/oldnew.txt" "$g" 9)
      say "old vs new, plan gpu: pp128 $gop -> $gnp ($(ratio "$gnp" "$gop" 3)x); tg64 $got -> $gnt ($(ratio "$gnt" "$got" 3)x)"
    fi
    for t in ${OLDNEW_THREADS:-2 16}; do
      for r in $(seq "$rounds"); do
        echo "t $t round $r old $(E=$OLD eng --threads "$t" --reps 3) new $(E=${NEW:-$E} eng --threads "$t" --reps 3)" >> "$OUT/oldnew.txt"
      done
      local op ot np nt
      op=$(medf "$OUT/oldnew.txt" "\$2==$t" 6); ot=$(medf "$OUT/oldnew.txt" "\$2==$t" 7)
      np=$(medf "$OUT/oldnew.txt" "\$2==$t" 9); nt=$(medf "$OUT/oldnew.txt" "\$2==$t" 10)
      say "old vs new, $t thr: pp128 $op -> $np ($(ratio "$np" "$op" 3)x); tg64 $ot -> $nt ($(ratio "$nt" "$ot" 3)x)"
    done
  fi
}

# Issue 16: the planner's plan against every forced plan (benches/auto-vs-forced.sh, which
# profiles first), on all 16 threads; ROUNDS rounds.
plans() {
  chmod +x "$E" 2>/dev/null
  ENGINE=$E THREADS=${PLAN_THREADS:-16} ROUNDS=${ROUNDS:-3} OUT=$OUT/plans \
    timeout 570 benches/auto-vs-forced.sh > "$OUT/plans.txt" 2>&1
  echo "auto-vs-forced exit $?" >> "$OUT/plans.txt"
  grep -E "^plan:|^  (auto|cpu|gpu|cpu-gpu)|x \(goal|over [0-9]+ op classes|gpu resident steps|exit" "$OUT/plans.txt" | tee -a "$SUM"
}

machine
# NO_OPENCL_ENV=1 keeps this machine's OpenCL setup (a dry run of `plans` on the dev VM with
# PoCL: M=<the model> E=target/release/engine-min NO_OPENCL_ENV=1 PLAN_THREADS=2 ROUNDS=1).
[ -n "${NO_OPENCL_ENV:-}" ] || opencl_env
model
case "${1:-check}" in
  check) check ;;
  figures) figures ;;
  plans) plans ;;
  *) echo "usage: $0 check|figures|plans" >&2; exit 2 ;;
esac

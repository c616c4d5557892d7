#!/usr/bin/env bash
# The main job: engine-min's whole pipeline on SmolLM2-135M-Instruct (GGUF Q4_1), on every
# backend this machine has (CPU; GPU through OpenCL, PoCL here; NPU through QNN, the HTP
# simulator here), after installing and caching what it needs:
#   1. profile: measure each backend on the model's matmul shapes, through the executor's own
#      paths (one progress line per step; a progress bar when stderr is a terminal);
#   2. plan and run: `run --profile` plans on that profile (`--plan auto`), says the decision
#      in one sentence with its predicted reason, streams the generated text, and ends with
#      three lines: prefill and decode tokens/s, time to first token, where the time went.
#
#   scripts/demo.sh                         # as root, on Debian 12 with the Rust toolchain
#   scripts/demo.sh -v                      # every profiled point, the per-op plans, predicted
#                                           # against measured time per op class (-vv: QNN's log)
#   PROMPT="Write a haiku" scripts/demo.sh  # another prompt (MAX_TOKENS=32 by default)
set -euo pipefail
cd "$(dirname "$0")/.."

VERBOSE=()
for arg in "$@"; do
  case $arg in
    -v | --verbose) VERBOSE+=(-v) ;;
    -vv) VERBOSE+=(-v -v) ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo: unknown argument \`$arg\` (see --help)" >&2; exit 2 ;;
  esac
done

PROMPT=${PROMPT:-The capital of France is}
MAX_TOKENS=${MAX_TOKENS:-32}
PROFILE_FILE=${PROFILE_FILE:-target/engine-min.profile.json}
mkdir -p target

# The installer's report (which OpenCL device, which QNN library, which model file) is a log
# line each; by default it goes to a file, and its tail to the terminal when it fails.
SETUP_LOG=target/demo-setup.log
if [[ ${#VERBOSE[@]} -gt 0 ]]; then
  scripts/setup.sh opencl qnn model 2>&1 | tee "$SETUP_LOG"
elif ! scripts/setup.sh opencl qnn model >"$SETUP_LOG" 2>&1; then
  tail -20 "$SETUP_LOG" >&2
  echo "demo: setup failed (whole log: $SETUP_LOG)" >&2
  exit 1
fi
eval "$(scripts/setup.sh --env)"
echo "demo: model $(basename "$HETERO_MODEL"); GPU $(sed -n 's/^opencl: .*Device #0: //p' "$SETUP_LOG" | head -1 | sed 's/ *$//'); NPU the QNN HTP simulator (setup log: $SETUP_LOG)"

cargo build --release -p engine-min
ENGINE=target/release/engine-min

"$ENGINE" profile "${VERBOSE[@]}" --model "$HETERO_MODEL" --out "$PROFILE_FILE"
if [[ ${#VERBOSE[@]} -gt 0 ]]; then
  # The planner's per-op plans for the profile (run's default workload).
  "$ENGINE" plan "${VERBOSE[@]}" --model "$HETERO_MODEL" --profile "$PROFILE_FILE"
fi
"$ENGINE" run "${VERBOSE[@]}" --model "$HETERO_MODEL" --profile "$PROFILE_FILE" \
  --prompt "$PROMPT" --max-tokens "$MAX_TOKENS"

#!/usr/bin/env bash
# The main job: engine-min's whole pipeline on SmolLM2-135M-Instruct (GGUF Q4_1) -- profile every
# available backend through the executor's own paths (~1 min here), plan, then generate text
# on the planner's plan -- after installing and caching what it needs.
#
#   scripts/demo.sh                         # as root, on Debian 12 with the Rust toolchain
#   PROMPT="Write a haiku" scripts/demo.sh  # another prompt
#
# It says plainly which parts of the pipeline do not exist yet instead of pretending they ran.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh opencl qnn model
eval "$(scripts/setup.sh --env)"
PROMPT=${PROMPT:-The capital of France is}
MAX_TOKENS=${MAX_TOKENS:-32}
PROFILE_FILE=${PROFILE_FILE:-target/engine-min.profile.json}

cargo build --release -p engine-min
ENGINE=target/release/engine-min

# Each step runs if engine-min has it; a step it reports as not built yet (exit code 2, with its
# own message) is listed as missing; any other failure fails the demo.
missing=()
step() { # NAME ARGS...
  local name=$1; shift
  echo
  echo "--- engine-min $name ---"
  set +e
  "$ENGINE" "$@"
  local rc=$?
  set -e
  if [[ $rc -eq 2 ]]; then missing+=("$name"); return 0; fi
  [[ $rc -eq 0 ]] || { echo "demo: engine-min $name failed (exit $rc)" >&2; exit "$rc"; }
}

step profile profile --model "$HETERO_MODEL" --out "$PROFILE_FILE"
step plan plan --model "$HETERO_MODEL" --profile "$PROFILE_FILE"
# With the profile, `run` executes `--plan auto`: the planner's plan when a mixed one is
# predicted to win (each split by >= 5%), else the best single backend (the resident GPU
# decoder counts as one), said plainly in its `plan:` line; after the text it prints predicted
# against measured matmul time per op class and phase.
step run run --model "$HETERO_MODEL" --profile "$PROFILE_FILE" --prompt "$PROMPT" --max-tokens "$MAX_TOKENS"

echo
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "demo: not there yet: engine-min ${missing[*]} (see the messages above)"
  # The generation itself is the main job: without it the demo has not run.
  [[ " ${missing[*]} " != *" run "* ]] || { echo "demo: text generation is not available yet" >&2; exit 1; }
fi
echo "demo: done"

#!/usr/bin/env bash
# The whole test matrix: installs what it needs (scripts/setup.sh), then proves every part on the
# real thing we have in place of the target hardware, with every backend required (a backend that
# is absent fails its stage instead of skipping). Ends with one summary line per stage.
#
#   scripts/test.sh                 # everything, as root, on Debian 12 with the Rust toolchain
#   scripts/test.sh host loom       # only the named stages (setup always runs first)
#
# Stages: fmt clippy host host-release loom aarch64-sme2-512 aarch64-sme2-256 aarch64-sme1
#         aarch64-sme2-512-release aarch64-sme2-256-release aarch64-sme1-release opencl qnn model demo
#         capi ggml
# (`*-release`: the same tests in the plain `release` profile users build with, whose code
# generation differs from `ci`'s: register allocation around `asm!` blocks, for one.)
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)

ALL_STAGES=(fmt clippy host host-release loom aarch64-sme2-512 aarch64-sme2-256 aarch64-sme1
  aarch64-sme2-512-release aarch64-sme2-256-release aarch64-sme1-release opencl qnn model demo capi ggml)
WANT=("$@")
[[ ${#WANT[@]} -eq 0 ]] && WANT=("${ALL_STAGES[@]}")
for w in "${WANT[@]}"; do
  [[ " ${ALL_STAGES[*]} " == *" $w "* ]] || { echo "test: unknown stage '$w' (${ALL_STAGES[*]})" >&2; exit 2; }
done

command -v cargo >/dev/null || { echo "test: missing prerequisite: cargo (install Rust with rustup)" >&2; exit 1; }

# --- setup: install and cache; a missing prerequisite stops everything here -----------------------
t0=$(date +%s)
if ! scripts/setup.sh all; then
  echo "test: setup failed (see the message above); no stage was run" >&2
  echo "stage setup: failed ($(( $(date +%s) - t0 )) s)"
  exit 1
fi
eval "$(scripts/setup.sh --env)"
SETUP_TIME=$(( $(date +%s) - t0 ))

export CARGO_TERM_COLOR=never
export REQUIRE_ALL=sme-emu,opencl,qnn,model
AARCH64=aarch64-unknown-linux-gnu
# Debian's rustc builds the aarch64 side (rustup cannot add targets here): its own target dir.
aarch64_test() { # PROFILE RUNNER REQUIRE
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$2" HETERO_REQUIRE="$3" \
    RUSTC="$RUSTC_AARCH64" RUSTDOC="$RUSTDOC_AARCH64" \
    cargo test --no-fail-fast --profile "$1" --target "$AARCH64" --target-dir target/aarch64-emu \
      -p hetero-sme -p hetero-sync -p hetero-uma -p qnn-sys --lib --tests
}

# The crates with a C API (feature `capi`; scripts/capi.sh lists the same). `capi-tests` adds
# the C tests (compiled with -Werror) that tests/capi.rs links; plain `capi` builds no C.
CAPI_PKGS="-p hetero-sme -p hetero-sync -p hetero-uma -p hetero-partition"
CAPI_FEATURES="hetero-sme/capi-tests,hetero-sync/capi-tests,hetero-uma/capi-tests,hetero-partition/capi-tests"

run_stage() { # NAME
  case "$1" in
    fmt) cargo fmt --all --check ;;
    clippy) cargo clippy --workspace --all-targets -- -D warnings &&
            # The C APIs (feature capi) are linted too.
            cargo clippy --features "$CAPI_FEATURES" $CAPI_PKGS --all-targets -- -D warnings &&
            # The aarch64-only code (SME/NEON kernels) is linted with Debian's clippy too.
            RUSTFLAGS="-D warnings" RUSTC="$RUSTC_AARCH64" RUSTC_WORKSPACE_WRAPPER="$CLIPPY_DRIVER_AARCH64" \
              cargo check --profile ci --target "$AARCH64" --target-dir target/aarch64-clippy \
                -p hetero-sme -p hetero-sync -p hetero-uma -p qnn-sys --lib --tests &&
            # The crate docs (each README is its crate's documentation): no broken link, no
            # missing item, no bad code block.
            RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps ;;
    host) HETERO_REQUIRE=$REQUIRE_ALL cargo test --no-fail-fast --profile ci --workspace \
            --exclude hetero-opencl-kernels --exclude qnn-sys --exclude engine-min ;;
    host-release) HETERO_REQUIRE=$REQUIRE_ALL cargo test --no-fail-fast --release --workspace \
            --exclude hetero-opencl-kernels --exclude qnn-sys --exclude engine-min ;;
    loom) RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 \
            cargo test --no-fail-fast --release --target-dir target/loom \
              -p hetero-sync -p hetero-uma -p hetero-sme --test loom ;;
    aarch64-sme2-512) aarch64_test ci "$QEMU_SME2 -cpu max,sme512=on" sme-emu ;;
    aarch64-sme2-256) aarch64_test ci "$QEMU_SME2 -cpu max,sme256=on" sme-emu ;;
    aarch64-sme1) aarch64_test ci "$QEMU_SME1 -cpu max,sme512=on" sme1-emu ;;
    aarch64-sme2-512-release) aarch64_test release "$QEMU_SME2 -cpu max,sme512=on" sme-emu ;;
    aarch64-sme2-256-release) aarch64_test release "$QEMU_SME2 -cpu max,sme256=on" sme-emu ;;
    aarch64-sme1-release) aarch64_test release "$QEMU_SME1 -cpu max,sme512=on" sme1-emu ;;
    opencl) HETERO_REQUIRE=opencl cargo test --no-fail-fast --profile ci -p hetero-opencl-kernels ;;
    qnn) HETERO_REQUIRE=qnn cargo test --no-fail-fast --profile ci -p qnn-sys ;;
    model) HETERO_REQUIRE=$REQUIRE_ALL cargo test --no-fail-fast --profile ci -p engine-min ;;
    demo) HETERO_REQUIRE=$REQUIRE_ALL scripts/demo.sh ;;
    # The C APIs: the C tests inside the Rust suites (results compared with the Rust APIs), then
    # the libraries built as users link them and the standalone C tests under ASan + UBSan.
    capi) cargo test --no-fail-fast --profile ci --features "$CAPI_FEATURES" $CAPI_PKGS --test capi &&
          scripts/capi.sh test ;;
    # llama.cpp (setup part llama-cpp) with and without hetero's ggml backend: test-backend-ops,
    # placement, perplexity, greedy text, the loader's messages (ggml/tests/llama/run.sh).
    ggml) scripts/ggml.sh test ;;
  esac
}

NAMES=() RESULTS=() TIMES=()
for stage in "${WANT[@]}"; do
  echo
  echo "=== stage $stage ==="
  s=$(date +%s)
  if run_stage "$stage"; then r=passed; else r=failed; fi
  NAMES+=("$stage") RESULTS+=("$r") TIMES+=("$(( $(date +%s) - s ))")
  echo "=== stage $stage: $r ==="
done

echo
echo "=== summary ==="
echo "stage setup: passed (${SETUP_TIME} s)"
passed=0 failed=0
for i in "${!NAMES[@]}"; do
  echo "stage ${NAMES[$i]}: ${RESULTS[$i]} (${TIMES[$i]} s)"
  if [[ ${RESULTS[$i]} == passed ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "stages: $passed passed, $failed failed"
[[ $failed -eq 0 ]]

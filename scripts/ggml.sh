#!/usr/bin/env bash
# hetero's ggml backend for llama.cpp: build it, and prove it (the `ggml` stage of scripts/test.sh).
#
#   scripts/ggml.sh build      # -> target/ggml/libggml-hetero.so (+ the perplexity tool)
#   scripts/ggml.sh test       # build, then the proof (ggml/tests/llama/run.sh); non-zero on a failure
#   scripts/ggml.sh shim OUT [CXXFLAGS...]   # the shim alone into OUT (the stage's test builds)
#
# Both need the llama.cpp that `scripts/setup.sh llama-cpp` builds and caches (its source and
# build directories: $HETERO_LLAMA_CPP_SRC, $HETERO_LLAMA_CPP_BUILD from `scripts/setup.sh --env`,
# or any llama.cpp checkout and its CMake build directory given in those variables). The shim is
# compiled against that tree's ggml headers, so its struct layouts are that ggml's own.
#
# Use it: GGML_BACKEND_PATH=$PWD/target/ggml/libggml-hetero.so llama-cli -m model.gguf ...
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=$ROOT/target/ggml
LIB=$OUT/libggml-hetero.so

die() { echo "ggml: $*" >&2; exit 1; }

llama_dirs() {
  SRC=${HETERO_LLAMA_CPP_SRC:-}
  BUILD=${HETERO_LLAMA_CPP_BUILD:-}
  [[ -n "$SRC" && -n "$BUILD" ]] || eval "$(scripts/setup.sh --env)"
  SRC=${HETERO_LLAMA_CPP_SRC:-} BUILD=${HETERO_LLAMA_CPP_BUILD:-}
  [[ -f "$SRC/ggml/src/ggml-backend-impl.h" ]] \
    || die "no llama.cpp source at '$SRC' (run scripts/setup.sh llama-cpp, or set HETERO_LLAMA_CPP_SRC)"
  [[ -f "$BUILD/ggml/src/ggml-version.h" && -e "$BUILD/bin/libggml-base.so" ]] \
    || die "no llama.cpp build at '$BUILD' (run scripts/setup.sh llama-cpp, or set HETERO_LLAMA_CPP_BUILD)"
}

# shim OUTPUT [EXTRA_CXXFLAGS...]: the shim linked with the Rust static library into OUTPUT.
link_shim() {
  local out=$1
  shift
  c++ -std=c++17 -O2 -fPIC -shared -fopenmp -Wall -Wextra -Werror -fvisibility=hidden "$@" \
    -I"$SRC/ggml/include" -I"$SRC/ggml/src" -I"$BUILD/ggml/src" -I"$ROOT/ggml/include" \
    ggml/shim/ggml-hetero.cpp "$ROOT/target/release/libhetero_ggml.a" \
    -L"$BUILD/bin" -lggml -lggml-base -Wl,--version-script="$ROOT/ggml/shim/exports.map" \
    -Wl,--gc-sections -Wl,-z,defs -lpthread -ldl -lm -o "$out"
}

build() {
  llama_dirs
  mkdir -p "$OUT"
  cargo build --release --quiet -p hetero-ggml
  link_shim "$LIB"
  # The perplexity tool: llama.cpp's method (score the second half of each n_ctx chunk) on the
  # public llama.h API, so the proof needs no llama-common (a third of llama.cpp's build time).
  c++ -std=c++17 -O2 -Wall -Wextra -Werror -I"$SRC/include" -I"$SRC/ggml/include" \
    ggml/tools/perplexity.cpp -L"$BUILD/bin" -lllama -lggml -lggml-base \
    -Wl,-rpath,"$BUILD/bin" -o "$OUT/hetero-perplexity"
  echo "ggml: built $LIB ($(du -h "$LIB" | cut -f1)) against $SRC"
}

case "${1:-}" in
  build) build ;;
  shim) llama_dirs; shift; link_shim "$@" ;;
  test) build; exec ggml/tests/llama/run.sh ;;
  *) echo "usage: scripts/ggml.sh build|test|shim OUT [CXXFLAGS...]" >&2; exit 2 ;;
esac

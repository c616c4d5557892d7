#!/usr/bin/env bash
# The C libraries of the crates with a C API (feature `capi`), cargo-c's way without cargo-c:
# `cargo rustc --crate-type staticlib --crate-type cdylib` per crate (normal builds stay rlib),
# then lib + header + a generated pkg-config file installed into a prefix.
#
#   scripts/capi.sh [CRATE...]     build and install (default: every crate below)
#   scripts/capi.sh test [CRATE...]  build, then compile each crate's standalone C test
#                                  (tests/c/*_main.c + its test sources) against the staticlib
#                                  with -fsanitize=address,undefined and run it; link the README
#                                  example through pkg-config, static and shared
#   scripts/capi.sh headers        regenerate the checked-in headers (cbindgen)
#
# PREFIX (default target/capi/prefix), PROFILE (default release), CC (default cc).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

# package folder library-name
CRATES=("hetero-sme sme hetero_sme" "hetero-sync sync hetero_sync" "hetero-uma uma hetero_uma")
PREFIX=${PREFIX:-$ROOT/target/capi/prefix}
PROFILE=${PROFILE:-release}
CC=${CC:-cc}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)

die() { echo "capi: $*" >&2; exit 1; }

pick() { # NAMES... -> the matching CRATES lines
  if [[ $# -eq 0 ]]; then printf '%s\n' "${CRATES[@]}"; return; fi
  for want in "$@"; do
    local hit=""
    for c in "${CRATES[@]}"; do [[ ${c%% *} == "$want" ]] && hit=$c; done
    [[ -n $hit ]] || die "unknown crate '$want' (have: ${CRATES[*]%% *})"
    echo "$hit"
  done
}

build_one() { # PKG DIR LIB
  local pkg=$1 dir=$2 lib=$3 log
  log=$(mktemp)
  echo "capi: building $pkg ($PROFILE)"
  # The soname carries the major version (0.x: the minor, cargo-c's rule for 0.x).
  local major=${VERSION%%.*} soname
  if [[ $major == 0 ]]; then soname=lib$lib.so.0.$(echo "$VERSION" | cut -d. -f2); else soname=lib$lib.so.$major; fi
  cargo rustc -p "$pkg" --lib --features capi --profile "$PROFILE" \
    --crate-type staticlib --crate-type cdylib -- \
    -C link-arg=-Wl,-soname,"$soname" --print native-static-libs 2>"$log" ||
    { cat "$log" >&2; rm -f "$log"; die "cargo rustc failed for $pkg"; }
  local natives
  natives=$(sed -n 's/.*native-static-libs: //p' "$log" | tail -1)
  rm -f "$log"
  local out=$ROOT/target/$PROFILE
  [[ $PROFILE == dev ]] && out=$ROOT/target/debug
  mkdir -p "$PREFIX/include" "$PREFIX/lib/pkgconfig"
  install -m 644 "$dir/include/$lib.h" "$PREFIX/include/"
  install -m 644 "$out/lib$lib.a" "$PREFIX/lib/"
  install -m 755 "$out/lib$lib.so" "$PREFIX/lib/$soname"
  ln -sf "$soname" "$PREFIX/lib/lib$lib.so"
  cat >"$PREFIX/lib/pkgconfig/$pkg.pc" <<PC
prefix=$PREFIX
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: $pkg
Description: C API of the Rust crate $pkg (hetero)
Version: $VERSION
Libs: -L\${libdir} -l$lib
Libs.private: $natives
Cflags: -I\${includedir}
PC
  echo "capi: installed $pkg into $PREFIX (lib$lib.a, $soname, $pkg.pc)"
}

c_test_one() { # PKG DIR LIB
  local pkg=$1 dir=$2 lib=$3 tdir=$ROOT/target/capi/test
  mkdir -p "$tdir"
  local short=${lib#hetero_}
  local main=$dir/tests/c/${short}_main.c
  [[ -f $main ]] || die "$pkg: no standalone C test $main"
  local srcs=("$main")
  for f in "$dir"/tests/c/*.c; do [[ $f == "$main" ]] || srcs+=("$f"); done
  export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig
  command -v pkg-config >/dev/null || die "pkg-config is missing (apt-get install pkg-config)"
  local san=(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1)
  echo "capi: $pkg: C tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  # shellcheck disable=SC2046
  "$CC" -std=c11 -pthread -Wall -Wextra -Werror "${san[@]}" -I"$dir/tests/c" "${srcs[@]}" \
    $(pkg-config --static --cflags "$pkg") "$PREFIX/lib/lib$lib.a" \
    $(pkg-config --static --libs-only-other --libs-only-l "$pkg" | sed "s/-l$lib//") -lm \
    -o "$tdir/${short}_asan"
  # Rust's runtime keeps a few allocations for the whole process (thread-local keys, the
  # stdout buffer): LeakSanitizer would report those, not our leaks.
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$tdir/${short}_asan"
  if [[ $pkg == hetero-sync ]]; then
    # Flags and barriers live in the caller's memory only: freeing one must not compile.
    local bad
    for bad in "hetero_sync_flag_free(f)" "hetero_sync_barrier_free((hetero_sync_barrier *)f)"; do
      if printf '#include "hetero_sync.h"\nvoid f(hetero_sync_flag *f) { %s; }\n' "$bad" |
        "$CC" -std=c11 -Wall -Werror -I"$dir/include" -x c -c -o /dev/null - 2>/dev/null; then
        die "$pkg: '$bad' compiled: the header still has a _free for caller-placed memory"
      fi
    done
    echo "capi: $pkg: freeing a caller-placed flag or barrier does not compile (as intended)"
  fi
  echo "capi: $pkg: the same through pkg-config, shared library"
  # shellcheck disable=SC2046
  "$CC" -std=c11 -pthread -Wall -Wextra -Werror -O2 -I"$dir/tests/c" "${srcs[@]}" \
    $(pkg-config --cflags --libs "$pkg") -lm -Wl,-rpath,"$PREFIX/lib" -o "$tdir/${short}_shared"
  "$tdir/${short}_shared"
}

case "${1:-}" in
  headers)
    HETERO_BLESS=1 cargo test -p hetero-tests --test capi_headers ;;
  test)
    shift
    command -v "$CC" >/dev/null || die "no C compiler '$CC'"
    while read -r line; do
      # shellcheck disable=SC2086
      build_one $line && c_test_one $line
    done < <(pick "$@") ;;
  *)
    while read -r line; do
      # shellcheck disable=SC2086
      build_one $line
    done < <(pick "$@") ;;
esac

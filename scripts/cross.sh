#!/usr/bin/env bash
# Cross-builds the platform packages a Linux x64 machine can build, one
# target at a time, into npm/<platform>/ (and packs each into dist/), then
# prints, per target, whether it was built, its size, time and glibc floor,
# or why it was not built.
#
#   scripts/cross.sh                 every target below
#   scripts/cross.sh TRIPLE...       only these
#
# Each build is `node scripts/prebuild.js --target TRIPLE` (see there):
#   x86_64-unknown-linux-gnu    cargo zigbuild, glibc 2.17 floor
#   aarch64-unknown-linux-gnu   cargo zigbuild, glibc 2.17 floor
#   x86_64-unknown-linux-musl   cargo zigbuild, -C target-feature=-crt-static
#   aarch64-unknown-linux-musl  cargo zigbuild, -C target-feature=-crt-static
#   aarch64-apple-darwin        cargo zigbuild, with SDKROOT naming a MacOSX.sdk
#   x86_64-apple-darwin         (Metal links against the SDK's frameworks)
#   x86_64-pc-windows-gnu       mingw-w64 (x86_64-w64-mingw32-gcc) into win32-x64-msvc;
#                               napi-build links it against node, so LIBNODE_PATH
#                               must name a directory with libnode.dll
#
# Needs: rustup with each target added (`rustup target add TRIPLE`), and
# `pip install ziglang cargo-zigbuild`; for Windows, mingw-w64 (Debian:
# gcc-mingw-w64-x86-64-posix). The MSVC Windows build and the macOS builds
# that ship are made natively by the release workflow.
# Each build's output goes to dist/cross-TRIPLE.log.
set -u
cd "$(dirname "$0")/.." || exit 1

ALL=(
  x86_64-unknown-linux-gnu
  aarch64-unknown-linux-gnu
  x86_64-unknown-linux-musl
  aarch64-unknown-linux-musl
  aarch64-apple-darwin
  x86_64-apple-darwin
  x86_64-pc-windows-gnu
)
if [ $# -gt 0 ]; then TARGETS=("$@"); else TARGETS=("${ALL[@]}"); fi

mkdir -p dist
have_zigbuild() {
  cargo-zigbuild --version >/dev/null 2>&1 &&
    { zig version >/dev/null 2>&1 || python3 -m ziglang version >/dev/null 2>&1; }
}
installed_targets=$(rustup target list --installed 2>/dev/null)

declare -a ROWS
failed=0
for t in "${TARGETS[@]}"; do
  reason=""
  if [ -n "$installed_targets" ] && ! grep -qx "$t" <<<"$installed_targets"; then
    reason="the Rust target is not installed (rustup target add $t)"
  elif [ "$t" = x86_64-pc-windows-gnu ]; then
    if ! command -v x86_64-w64-mingw32-gcc >/dev/null; then
      reason="no mingw-w64 linker (x86_64-w64-mingw32-gcc; Debian: gcc-mingw-w64-x86-64-posix)"
    elif [ -z "${LIBNODE_PATH:-}" ]; then
      reason="napi-build links windows-gnu against node: set LIBNODE_PATH to a directory with libnode.dll"
    fi
  elif [[ "$t" == *-apple-darwin && -z "${SDKROOT:-}" ]]; then
    reason="the Metal backend links against the macOS SDK's frameworks (Metal, QuartzCore, CoreGraphics, Foundation, libobjc): set SDKROOT to a MacOSX.sdk"
  elif [ "$t" = x86_64-pc-windows-msvc ]; then
    reason="the MSVC target is built on Windows (the release workflow)"
  elif ! have_zigbuild; then
    reason="cargo-zigbuild or zig is missing (pip install ziglang cargo-zigbuild)"
  fi
  if [ -n "$reason" ]; then
    ROWS+=("$t|not built|$reason")
    echo "== $t: not built: $reason"
    continue
  fi
  echo "== $t: building (log: dist/cross-$t.log)"
  start=$(date +%s)
  if node scripts/prebuild.js --target "$t" >"dist/cross-$t.log" 2>&1; then
    secs=$(($(date +%s) - start))
    info=$(tail -n 3 "dist/cross-$t.log" | grep '^prebuild: ' | sed 's/^prebuild: //')
    ROWS+=("$t|built in ${secs} s|$info")
    echo "   built: $info"
  else
    secs=$(($(date +%s) - start))
    last=$(grep -E '(^|[[:space:]])error(\[|:)' "dist/cross-$t.log" | head -n 3 | tr -s ' \n' ' ')
    ROWS+=("$t|FAILED after ${secs} s|${last:-see dist/cross-$t.log}")
    echo "   FAILED: ${last:-see dist/cross-$t.log}"
    failed=1
  fi
done

echo
echo "target | outcome | details"
for r in "${ROWS[@]}"; do echo "${r//|/ | }"; done
exit $failed

#!/usr/bin/env bash
# The library's unit tests built for aarch64 and run under qemu-user, on
# an x86-64 Linux machine: the NEON GEMM kernel against naive products and
# against the portable kernel (bit for bit at the edges), the portable
# paths of every other kernel test, the element-wise loops at NEON's
# width. A correctness check: emulated runs say nothing about speed.
#
#   scripts/test-aarch64.sh [test name filters...]   (default: all)
#
# Built for aarch64-unknown-linux-musl and linked by rust-lld (both come
# with rustup's target), so no cross C toolchain or aarch64 sysroot is
# needed: the binary is static, and qemu-aarch64 (Debian: qemu-user) runs
# it. napi's symbol loader asks the linker for libdl, which musl folds
# into libc; an empty archive stands in for it, as musl's own does.
set -euo pipefail
cd "$(dirname "$0")/.."

target=aarch64-unknown-linux-musl
dir=${CARGO_TARGET_DIR:-target}
if ! command -v qemu-aarch64 >/dev/null; then
  echo "test-aarch64: qemu-aarch64 not found (Debian: apt-get install qemu-user)" >&2
  exit 2
fi
rustup target add "$target" >/dev/null 2>&1 || true
mkdir -p "$dir/$target-emptylibs"
libs=$(cd "$dir/$target-emptylibs" && pwd)
[ -f "$libs/libdl.a" ] || ar rcs "$libs/libdl.a"

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=rust-lld
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUNNER=qemu-aarch64
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="-L native=$libs"
cargo test --release --lib --target "$target" -- "$@"

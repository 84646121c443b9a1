#!/usr/bin/env bash
# Miri (nightly's interpreter that reports undefined behaviour) over the
# unsafe code it can interpret: SGEMM packing, the portable and AVX2
# micro-kernels and edge kernels and the blocked driver's tasks; the
# NCHWc relayouts and the direct, depthwise and Winograd kernels (their
# portable 16-lane form and AVX2's); the element-wise loops written into
# uninitialised memory at each width; the completion inbox and the
# threadsafe function's data in binding/completion.rs (the pending
# promise table needs a live N-API environment: see its tests' comment).
#
#   scripts/miri.sh [smoke|ci|full]     (default: ci)
#
# Each mode runs the test binary twice, as Miri only enables the CPU
# features the build does (is_x86_feature_detected! reports nothing
# else there), and ci and full also run the SGEMM and NCHWc tests for
# aarch64 (the NEON kernels):
#   portable  no target features: the portable kernels and relayouts,
#             the baseline element-wise loops;
#   avx2      RUSTFLAGS=-Ctarget-feature=+avx2,+fma: the AVX2 kernels,
#             edge kernels and rows-in-place forms, the relayouts and the
#             NCHW input interleave, the AVX2 element-wise width. It
#             builds in target/miri-avx2, since other RUSTFLAGS would
#             rebuild target/miri's dependencies.
# AVX-512 does not run: Miri implements few of its intrinsics, and the
# kernels only take that path where the build enables avx512f.
#
# smoke what CI runs: a handful of quick tests in the portable build.
# ci    the Miri-sized tests (tests::miri modules, *_small), the
#       completion tests and the small native ones, in both builds.
# full  ci, plus the same tests with -Zmiri-many-seeds=0..4 for the
#       threaded ones (other thread interleavings), and the completion
#       and relayout tests under Stacked Borrows.
#
# MIRIFLAGS (override by setting it):
#   -Zmiri-tree-borrows         rayon's deque (crossbeam-epoch) breaks
#                               Stacked Borrows in its own code as soon
#                               as the thread pool starts (crossbeam
#                               issue 545; crossbeam runs Miri under Tree
#                               Borrows too); nearly every kernel asks
#                               rayon for its thread count.
#   -Zmiri-permissive-provenance  crossbeam-epoch's tagged pointers and
#                               the NCHWc kernels' base pointers passed
#                               to tasks as usize are integer-to-pointer
#                               casts; this keeps Miri quiet about them
#                               (it still checks every access).
#   -Zmiri-deterministic-floats Miri gives the float functions whose
#                               precision Rust leaves open (exp, ln,
#                               sin, ...) a random error of a few ULP on
#                               every call, so two calls on one value may
#                               differ; the tests that compare each
#                               vector width's bits against the
#                               baseline's (every_width_gives_the_same_bits)
#                               then fail on libm's results, not on ours.
#                               This flag makes each such call return
#                               the host's result; every memory access
#                               is checked as before.
#   -Zmiri-ignore-leaks         rayon's global pool keeps its threads for
#                               the life of the process, by design, and
#                               Miri refuses a main thread that exits
#                               while they run; this flag is the only one
#                               that allows it, and it also turns off
#                               Miri's leak check (LeakSanitizer checks
#                               for leaks in real runs: scripts/asan.sh).
# No -Zmiri-disable-isolation: nothing here reads the clock, the
# environment or files outside what isolation allows.
#
# The first run builds Miri's sysroot (about 2 minutes; it fetches the
# standard library's dependencies from the registry unless they are
# cached) and the dependencies for Miri (about 5 minutes per build on
# 2 cores). Times on this 2-core machine are at the end of the mode's
# output and in docs/memory-safety.md.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-ci}
case "$mode" in
smoke | ci | full) ;;
*)
  echo "usage: $0 [ci|full]" >&2
  exit 2
  ;;
esac

export MIRIFLAGS=${MIRIFLAGS:--Zmiri-tree-borrows -Zmiri-permissive-provenance -Zmiri-ignore-leaks -Zmiri-deterministic-floats}

# The tests Miri runs: sized for it, or small already.
tests=(
  sgemm::tests::miri::
  sgemm::tests::short_buffers_are_errors
  nchwc::tests::miri::
  nchwc::tests::layout_changes_place_each_element_and_invert
  nchwc::relayout::tests::the_16x8_tables_transpose
  nchwc::relayout::tests::reorder_matches_the_reference
  nchwc::simd::tests::every_kind_agrees_with_the_portable_form
  elementwise::tests::binary_broadcast_matches_naive_small
  elementwise::tests::every_width_gives_the_same_bits
  binding::completion::tests::
  copy::tests::miri_sized_helped_copy
)

start=$SECONDS
run() {
  local what=$1
  shift
  echo "== miri: $what" >&2
  local t0=$SECONDS
  "$@"
  echo "== miri: $what: $((SECONDS - t0)) s" >&2
}

if [ "$mode" = smoke ]; then
  # CI's slice: the portable build only, tests that finish in seconds each
  # under Miri (the element-wise loops written into uninitialised memory,
  # the NCHWc 16x8 transposes, the SGEMM size checks, the completion inbox
  # and the threadsafe function's data).
  run "portable (smoke)" cargo +nightly miri test --lib -- \
    elementwise::tests::every_width_gives_the_same_bits \
    elementwise::tests::binary_broadcast_matches_naive_small \
    nchwc::relayout::tests::the_16x8_tables_transpose \
    sgemm::tests::short_buffers_are_errors \
    binding::completion::tests:: \
    copy::tests::miri_sized_helped_copy
  echo "== miri: smoke done in $((SECONDS - start)) s" >&2
  exit 0
fi

run portable cargo +nightly miri test --lib -- "${tests[@]}"
run avx2 env RUSTFLAGS="-Ctarget-feature=+avx2,+fma" CARGO_TARGET_DIR=target/miri-avx2 \
  cargo +nightly miri test --lib -- "${tests[@]}"
# The aarch64 NEON GEMM kernel and the NEON form of the NCHWc kernels and
# relayouts (beside their portable form), interpreted for that target
# (Miri needs no aarch64 machine or toolchain for it; it builds that
# target's sysroot).
run aarch64 env CARGO_TARGET_DIR=target/miri-aarch64 \
  cargo +nightly miri test --target aarch64-unknown-linux-gnu --lib -- \
  sgemm::tests::miri:: sgemm::tests::short_buffers_are_errors \
  nchwc::tests::miri:: nchwc::tests::layout_changes_place_each_element_and_invert \
  nchwc::relayout::tests::reorder_matches_the_reference \
  nchwc::simd::tests::every_kind_agrees_with_the_portable_form

if [ "$mode" = full ]; then
  threaded=(
    sgemm::tests::miri::every_kernel_splits_across_threads_small
    binding::completion::tests::a_completion_racing_the_inline_wait_is_delivered_once
    copy::tests::miri_sized_helped_copy
  )
  run "portable, seeds 0..4" env MIRIFLAGS="$MIRIFLAGS -Zmiri-many-seeds=0..4" \
    cargo +nightly miri test --lib -- "${threaded[@]}"
  run "avx2, seeds 0..4" env MIRIFLAGS="$MIRIFLAGS -Zmiri-many-seeds=0..4" \
    RUSTFLAGS="-Ctarget-feature=+avx2,+fma" CARGO_TARGET_DIR=target/miri-avx2 \
    cargo +nightly miri test --lib -- "${threaded[@]}"
  # No rayon pool in these: the stricter Stacked Borrows model applies.
  run "stacked borrows" env MIRIFLAGS="-Zmiri-permissive-provenance -Zmiri-ignore-leaks -Zmiri-deterministic-floats" \
    RUSTFLAGS="-Ctarget-feature=+avx2,+fma" CARGO_TARGET_DIR=target/miri-avx2 \
    cargo +nightly miri test --lib -- binding::completion::tests:: nchwc::relayout::tests::
fi
echo "== miri: $mode done in $((SECONDS - start)) s" >&2

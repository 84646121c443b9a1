#!/usr/bin/env bash
# AddressSanitizer and LeakSanitizer over our code: the Rust unit tests, and
# the jest suite (with the fuzz test) in real Node processes that load an
# instrumented addon. See docs/memory-safety.md.
#
#   scripts/asan.sh rust [cargo test args]  the Rust tests under ASan
#   scripts/asan.sh node [jest args]        the jest suite under ASan
#   scripts/asan.sh ci                      the library's unit tests, then a
#                                           short slice of jest (API suites, a
#                                           short fuzz): what CI runs
#   scripts/asan.sh all                     rust, then node (the default)
#
# Fails (exit 1) on any test failure, any AddressSanitizer report, and any
# leak report that is ours: every process writes its reports into a folder
# (ASAN_OPTIONS=log_path), and each leak is read at the end. A leak with a
# frame in our code always counts; one without is forgiven only when
# scripts/lsan.supp names it (leaks of node, V8, libuv and Mesa themselves).
#
# Needs the nightly toolchain (`rustup toolchain install nightly --profile
# minimal`). Builds in target/asan, so it does not disturb the normal build.
# Environment:
#   WEBNN_ASAN_RUNTIME  the shared ASan runtime preloaded into node (default:
#                       made from the nightly toolchain's own runtime, so it
#                       matches the instrumentation of its LLVM)
#   WEBNN_ASAN_LOGS     where the reports go (default target/asan/logs/<time>)
#   WEBNN_ASAN_TARGET_DIR  the build folder (default target/asan)
#   WEBNN_ASAN_NO_BUILD    set: `node` runs the addon already built there
#                       (while another cargo holds the build folder, say)
#   WEBNN_FUZZ_RUNS     runs per backend of the fuzz test (3000 in `node`,
#                       300 in `ci`: under ASan a run takes about ten times
#                       as long, and the test allows each backend 150 s)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

mode=${1:-all}
[ $# -gt 0 ] && shift
case $mode in
  rust | node | ci | all) ;;
  *)
    echo "usage: scripts/asan.sh [rust|node|ci|all] [args passed on]" >&2
    exit 2
    ;;
esac

triple=x86_64-unknown-linux-gnu
export CARGO_TARGET_DIR=${WEBNN_ASAN_TARGET_DIR:-$root/target/asan}
# The target triple keeps RUSTFLAGS off build scripts and proc macros, which
# run in the compiler without the runtime. Frame pointers give the runtime's
# fast unwinder whole stacks; line tables give them file and line.
export RUSTFLAGS="-Zsanitizer=address -Cforce-frame-pointers=yes"
export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
export CARGO_PROFILE_RELEASE_STRIP=none
# Thin LTO doubles the link time on two cores and changes nothing that the
# sanitizer checks.
export CARGO_PROFILE_RELEASE_LTO=false

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "asan: needs the nightly toolchain: rustup toolchain install nightly --profile minimal" >&2
  exit 2
fi

logs=${WEBNN_ASAN_LOGS:-$CARGO_TARGET_DIR/logs/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)

# Shared by both halves. allow_user_segv_handler: V8 catches the faults of
# WebAssembly bounds checks with its own SIGSEGV handler and passes on the
# others, which ASan then reports. allocator_may_return_null: an allocation
# too large for the machine fails as it would under glibc (V8 turns that into
# a RangeError; our code must cope) instead of being a report of its own.
# exitcode=0 with abort_on_error=1: an ASan error aborts the process, while a
# leak report leaves its exit status alone (node's own leaks must not fail a
# test that checks a child's status); the reports are judged at the end.
# Each frame names its module, which tells our frames from others'.
export ASAN_OPTIONS="log_path=$logs/asan:log_exe_name=1:allow_user_segv_handler=1:allocator_may_return_null=1:abort_on_error=1:exitcode=0:detect_leaks=1:symbolize=1:malloc_context_size=40:stack_trace_format='    #%n %p %F %L {%m}'"
export LSAN_OPTIONS="exitcode=0"
if command -v llvm-symbolizer >/dev/null; then
  export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer)}
fi

failed=0
note() { printf '\n=== asan: %s\n' "$*"; }

run_rust() {
  note "cargo +nightly test under ASan ($*)"
  local t0=$SECONDS
  # --tests: the unit tests (and any integration tests), not the doc tests,
  # which rustdoc would build without the sanitizer against instrumented code;
  # a first argument --lib: the library's unit tests alone.
  local targets=(--tests)
  if [ "${1:-}" = --lib ]; then
    targets=(--lib)
    shift
  fi
  if ! cargo +nightly test --release --target $triple "${targets[@]}" "$@"; then
    failed=1
  fi
  echo "asan: rust tests took $((SECONDS - t0)) s"
}

build_addon() {
  if [ -n "${WEBNN_ASAN_NO_BUILD:-}" ]; then
    return
  fi
  note "building the instrumented addon in $CARGO_TARGET_DIR"
  local t0=$SECONDS
  cargo +nightly build --release --lib --target $triple
  echo "asan: addon build took $((SECONDS - t0)) s"
}

runtime() {
  if [ -n "${WEBNN_ASAN_RUNTIME:-}" ]; then
    echo "$WEBNN_ASAN_RUNTIME"
    return
  fi
  # The toolchain ships its runtime as a static archive for executables;
  # a cdylib leaves the __asan_* symbols undefined, so node must have the
  # runtime loaded before anything else. The archive's objects, less the one
  # that only an executable may hold (.preinit_array), make a shared runtime
  # that matches this compiler's instrumentation exactly.
  local sysroot archive out
  sysroot=$(rustc +nightly --print sysroot)
  archive=$(ls "$sysroot"/lib/rustlib/$triple/lib/librustc-*_rt.asan.a)
  out=$CARGO_TARGET_DIR/libasan-rt.so
  if [ ! -e "$out" ] || [ "$archive" -nt "$out" ]; then
    local objs
    objs=$(mktemp -d)
    (cd "$objs" && ar x "$archive" && rm -f asan_preinit.cpp.o)
    cc -shared -o "$out" "$objs"/*.o -lpthread -ldl -lm -lrt
    rm -rf "$objs"
  fi
  echo "$out"
}

addon=$root/webnn-node.node
saved=$CARGO_TARGET_DIR/webnn-node.node.saved

# The loader (binding.js) takes ./webnn-node.node when no prebuilt package is
# installed, so the instrumented build goes there for the run, and the addon
# that was there comes back after, even on failure or interruption. Every
# test that copies or links the package sees the layout of a normal run.
restore_addon() {
  if [ -e "$saved" ]; then
    mv -f "$saved" "$addon"
  else
    rm -f "$addon"
  fi
}

run_node() {
  build_addon
  local rt
  rt=$(runtime)
  [ -e "$saved" ] && restore_addon # an interrupted run left its copy there
  [ -e "$addon" ] && mv -f "$addon" "$saved"
  trap restore_addon EXIT
  cp "$CARGO_TARGET_DIR/$triple/release/libwebnn_node.so" "$addon.tmp"
  mv -f "$addon.tmp" "$addon"

  export WEBNN_FUZZ_RUNS=${WEBNN_FUZZ_RUNS:-3000}
  # Node and every node it spawns (jest's workers, the tests' children, the
  # fuzz runner) inherit the preload and the options.
  export LD_PRELOAD=$rt
  # The probe: the instrumented addon (not a prebuilt package) is the one
  # loaded, alongside the runtime.
  local maps
  maps=$(node -e "require('.'); process.stdout.write(require('fs').readFileSync('/proc/self/maps', 'utf8'))")
  if ! grep -qF "$addon" <<<"$maps" || ! grep -qF "$rt" <<<"$maps"; then
    unset LD_PRELOAD
    echo "asan: node did not load $addon with $rt" >&2
    exit 1
  fi
  note "jest under ASan (node $(node --version), runtime $rt) $*"
  local t0=$SECONDS
  # Tests whose subject is a time or memory measurement, which ASan's
  # slowdown and quarantine of freed memory distort: jest skips them (unless
  # the arguments choose tests by name themselves: jest takes one pattern).
  local distorted='quickly and without a large allocation|give their memory back'
  local pattern=(--testNamePattern "^(?!.*($distorted))")
  for a in "$@"; do
    case $a in -t | --testNamePattern | --testNamePattern=* | -t=*) pattern=() ;; esac
  done
  # Under ASan the heavy suites (the conformance run, the MiniLM
  # embeddings) take several times their usual 2 minutes a test.
  if ! node node_modules/jest/bin/jest.js --ci --testTimeout=900000 "${pattern[@]}" "$@"; then
    failed=1
  fi
  unset LD_PRELOAD
  echo "asan: jest took $((SECONDS - t0)) s"
  restore_addon
  trap - EXIT
}

case $mode in
  rust) run_rust "$@" ;;
  node) run_node "$@" ;;
  ci)
    # CI's slice (about 15 min cold on 2 cores): the instrumented addon,
    # the library's unit tests (the kernels, the timeline, the completion
    # table; they share the addon's instrumented dependencies), then the
    # API suites and a short fuzz in real Node processes. The differential
    # fuzzer's binary and the rest of jest are left to `all`.
    build_addon
    run_rust --lib
    WEBNN_FUZZ_RUNS=${WEBNN_FUZZ_RUNS:-300} run_node \
      __tests__/api.test.js __tests__/hostile.test.js __tests__/compute.test.js \
      __tests__/builder-errors.test.js __tests__/fuzz.test.js "$@"
    ;;
  all)
    run_rust
    run_node "$@"
    ;;
esac

# The verdict: every report in the folder.
note "reports in $logs"
if ! node - "$logs" scripts/lsan.supp <<'EOF'; then
'use strict';
// Reads every report: an ASan error fails; a leak fails unless it has no
// frame of ours and a pattern of the suppression file matches one of its
// frames (function, file or module; `*` any text, `^` and `$` anchors, as
// LeakSanitizer's own `leak:` lines).
const fs = require('fs');
const path = require('path');
const [dir, suppFile] = process.argv.slice(2);

const patterns = fs
  .readFileSync(suppFile, 'utf8')
  .split('\n')
  .map((l) => l.replace(/#.*/, '').trim())
  .filter(Boolean)
  .map((l) => {
    const m = /^leak:(.+)$/.exec(l);
    if (!m) throw new Error(`${suppFile}: not a leak: line: ${l}`);
    const body = m[1].replace(/^\^/, '').replace(/\$$/, '').split('*')
      .map((s) => s.replace(/[.+?()[\]{}|\\^$]/g, '\\$&')).join('.*');
    return { text: m[1], re: new RegExp((m[1].startsWith('^') ? '^' : '') + body + (m[1].endsWith('$') ? '$' : '')), used: 0 };
  });

// Frames are written `#n pc in function location {module}` (the
// stack_trace_format that this script sets), so the module is always known.
const frameRe = /^\s*#\d+ (0x[0-9a-f]+)\s+(?:in )?(.*?)\s*\{([^{}]*)\}$/;
const root = process.cwd();
const ourModule = (f) => /(^|\/)(webnn-node\.node|libwebnn_node\.so|webnn_node-[0-9a-f]+)$/.test(f.module);
// Ours: a function of our crate, a line of our sources, or a frame in our
// module (the addon, or the test binary) with no source line to say which
// crate it is from. Frames of our dependencies and of std compiled into the
// module name their sources (the registry, /rustc/...), so those alone do
// not make a leak ours. A stack cut at malloc_context_size frames while
// still in our module is ours too: our caller may lie below the cut.
const CONTEXT = 40;
const ours = (f) =>
  /webnn_node::/.test(f.func) ||
  f.loc.startsWith(root + '/src/') ||
  /^src\//.test(f.loc) ||
  (ourModule(f) && !/:\d+(:\d+)?$/.test(f.loc));
const oursIn = (frames) =>
  frames.some(ours) ||
  (new Set(frames.map((f) => f.pc)).size >= CONTEXT && ourModule(frames[frames.length - 1]));

let errors = 0;
let ourLeaks = 0;
let unknownLeaks = 0;
let forgiven = 0;
// Only node and the Rust test binaries load our code; a child process of
// another program (a shell, python) inherits the preload but its reports
// are not ours to judge (LeakSanitizer cannot even run in some of them).
const files = fs.readdirSync(dir).filter((f) => /^asan\.(node|webnn_node-[0-9a-f]+)\.\d+$/.test(f)).sort();
const others = fs.readdirSync(dir).filter((f) => f.startsWith('asan.') && !files.includes(f));
if (others.length) console.log(`asan: not judged, from programs that do not load our code: ${others.join(' ')}`);
// With allocator_may_return_null=1 a refused allocation is not an error
// (our code must cope, and the tests of oversized requests make some on
// purpose), but the runtime still writes one warning line for it: a file
// that holds nothing else has nothing to judge.
const refused = /^==[^\n]*==WARNING: AddressSanitizer failed to allocate 0x[0-9a-f]+ bytes\n?/gm;
let refusals = 0;
for (const file of files) {
  const raw = fs.readFileSync(path.join(dir, file), 'utf8');
  const text = raw.replace(refused, () => (refusals++, ''));
  if (text.trim() === '') continue;
  const blocks = text.split(/\n(?=(?:Direct|Indirect) leak of )/);
  const head = blocks[0];
  if (!/ERROR: LeakSanitizer: detected memory leaks/.test(head) || /ERROR: AddressSanitizer/.test(text)) {
    errors++;
    console.log(`--- ${file}: a report other than leaks\n${text}`);
    continue;
  }
  for (const block of blocks.slice(1)) {
    const frames = [];
    for (const line of block.split('\n').slice(1)) {
      const m = frameRe.exec(line);
      // The function is what precedes the location (its last word), where
      // the symbolizer knew them; an unknown frame has only its module.
      if (m) frames.push({ pc: m[1], func: m[2], loc: m[2].split(' ').pop(), module: m[3] });
      else if (line.trim() === '') break;
    }
    if (oursIn(frames)) {
      ourLeaks++;
      console.log(`--- ${file}: a leak in our code\n${block.split('\n\n')[0]}\n`);
      continue;
    }
    const p = patterns.find((q) => frames.some((f) => q.re.test(f.func) || q.re.test(f.loc) || q.re.test(f.module)));
    if (p) {
      p.used++;
      forgiven++;
    } else {
      unknownLeaks++;
      console.log(`--- ${file}: a leak outside our code that no suppression names\n${block.split('\n\n')[0]}\n`);
    }
  }
}
console.log(
  `asan: ${files.length} report files; ${errors} ASan errors, ${ourLeaks} leaks in our code, ` +
    `${unknownLeaks} other leaks not suppressed, ${forgiven} suppressed, ${refusals} allocations refused (not errors)` +
    patterns.filter((p) => p.used).map((p) => `\n  ${p.used} x leak:${p.text}`).join(''),
);
process.exitCode = errors + ourLeaks + unknownLeaks ? 1 : 0;
EOF
  failed=1
fi
exit $failed

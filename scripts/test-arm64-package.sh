#!/usr/bin/env bash
# The linux-arm64-gnu package, built and run on an x86-64 Linux machine:
# built through the release path (scripts/prebuild.js: cargo zigbuild
# against glibc 2.17) and packed with the main package, both tarballs
# installed into an empty project by `npm install` (scripts ignored, no
# cargo on PATH) run by the official arm64 Node under qemu-user, which
# then runs
#   1. the README's samples, in that project, checking their output;
#   2. the API test suites (jest, in band) against the installed addon;
#   3. a slice of the WPT conformance vectors (../shared/wpt-vectors).
# Emulated runs are correctness checks, not speed figures.
#
#   scripts/test-arm64-package.sh [jest suite patterns...]
#
# Environment:
#   WEBNN_ARM64_NODE          the Node major version to run (default 22)
#   WEBNN_CONFORMANCE_FILES   the vector files to run (names without .json,
#                             comma-separated); default: all but add.json
#   WEBNN_NODE_CACHE          where Node binaries are cached
#                             (scripts/node-binary.js; ~/.cache/webnn-node)
#   WEBNN_KEEP_TMP=1          keep the temporary project
#
# Needs cargo-zigbuild and zig (`pip install ziglang cargo-zigbuild`), and
# qemu-user plus an aarch64 glibc and libstdc++ for the arm64 Node
# (Debian: qemu-user libc6-arm64-cross libstdc++6-arm64-cross), which it
# installs with apt-get when run as root.
#
# Tests that start a child Node from process.execPath cannot run here:
# without a binfmt_misc entry the kernel cannot execute an arm64 binary,
# so those are skipped (counted and listed as skipped, never as passed;
# __tests__/helpers.js testWithChildNode), and the suites chosen are ones
# whose other tests run in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

node_major=${WEBNN_ARM64_NODE:-22}
sysroot=/usr/aarch64-linux-gnu
target=aarch64-unknown-linux-gnu
# The API suites: the ones whose tests run in the test process (the few
# that start a child Node are skipped, see above). cpu-chains and compute
# are the slowest under emulation (about 90 and 50 s).
default_suites=(api builder-errors compute spec-rules cpu-chains cpu-pools ops-)
if [ $# -gt 0 ]; then suites=("$@"); else suites=("${default_suites[@]}"); fi

say() { echo "test-arm64: $*"; }
die() {
  echo "test-arm64: $*" >&2
  exit 2
}

declare -a SUMMARY
failed=0
phase_start=$SECONDS
phase_done() { # name, outcome
  SUMMARY+=("$1|$(($SECONDS - phase_start)) s|$2")
  phase_start=$SECONDS
}

# --- 0. Tools ---------------------------------------------------------
missing=()
command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
[ -e "$sysroot/lib/ld-linux-aarch64.so.1" ] || missing+=(libc6-arm64-cross)
[ -e "$sysroot/lib/libstdc++.so.6" ] || missing+=(libstdc++6-arm64-cross)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing ${missing[*]} (Debian: apt-get install ${missing[*]})"
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq "${missing[@]}" >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }
fi
# The official arm64 Node is linked against glibc and libstdc++: qemu
# finds the aarch64 loader and libraries under this prefix (an
# environment variable rather than -L, so that every qemu-aarch64 started
# here gets it).
export QEMU_LD_PREFIX=$sysroot
command -v cargo-zigbuild >/dev/null ||
  die "cargo-zigbuild not found: the arm64 package is cross-built through zig (pip install ziglang cargo-zigbuild)"
rustup target add "$target" >/dev/null 2>&1 || true
# jest and the other dev dependencies, as `npm test` installs them.
if [ ! -f node_modules/jest/package.json ]; then
  npm install --ignore-scripts --no-save --no-audit --no-fund
fi
phase_done tools ready

# --- 1. The two tarballs, as the release makes them -------------------
platform_tgz=$(node scripts/prebuild.js --target "$target" | tail -n 1)
main_tgz=dist/$(npm pack --silent --pack-destination dist | tail -n 1)
main_tgz=$root/$main_tgz
record=$(node -p "const r = require('./dist/linux-arm64-gnu.prebuild.json'); r.method + ', needs glibc ' + r.glibcFloor")
phase_done build "$(basename "$platform_tgz") ($record)"

# --- 2. The official arm64 Node (cached), and npm run by it -----------
arm64_node=$(node -p "require('./scripts/node-binary').nodeBinary('$node_major', 'arm64')")
arch=$(qemu-aarch64 "$arm64_node" -p 'process.arch + " " + process.version')
[ "${arch%% *}" = arm64 ] || die "$arm64_node is not an arm64 Node ($arch)"
# npm itself is JavaScript: the arm64 Node runs this machine's npm, so the
# install sees an arm64 glibc machine and checks the platform package's
# os, cpu and libc fields as it would on one (the x64 npm refuses a
# package whose cpu is arm64).
npm_cli="$(npm root -g)/npm/bin/npm-cli.js"
[ -f "$npm_cli" ] || npm_cli=$(readlink -f "$(command -v npm)")
[[ "$npm_cli" == *.js ]] || die "cannot find npm's npm-cli.js to run under the arm64 Node"
arm64_npm() { qemu-aarch64 "$arm64_node" "$npm_cli" "$@"; }
phase_done node "Node $arch"

# --- 3. Install into an empty project, no cargo on PATH ---------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/webnn-arm64-XXXXXX")
if [ "${WEBNN_KEEP_TMP:-}" != 1 ]; then trap 'rm -rf "$tmp"' EXIT; fi
project=$tmp/project
mkdir -p "$project"
echo '{"name": "arm64-test", "version": "1.0.0", "private": true}' >"$project/package.json"
nocargo_path=$(printf '%s\n' "$PATH" | tr ':' '\n' | while read -r d; do
  [ -n "$d" ] && [ ! -e "$d/cargo" ] && printf '%s:' "$d"
done)
nocargo_path=${nocargo_path%:}
(
  cd "$project"
  export PATH=$nocargo_path CARGO_HOME=$tmp/no-cargo
  ! command -v cargo >/dev/null || die "cargo is still on PATH"
  arm64_npm install --ignore-scripts --no-audit --no-fund "$platform_tgz" "$main_tgz" >/dev/null
)
[ -f "$project/node_modules/webnn-node-linux-arm64-gnu/webnn-node.linux-arm64-gnu.node" ] ||
  die "npm did not install the arm64 platform package"
# jest resolves modules through unrs-resolver, a native addon whose
# binding npm installed for x64 only: its arm64 binding, of the same
# version, goes where NODE_PATH finds it.
jest_deps=$tmp/jest-deps
mkdir -p "$jest_deps"
echo '{"name": "jest-deps", "version": "1.0.0", "private": true}' >"$jest_deps/package.json"
if [ -f node_modules/unrs-resolver/package.json ]; then
  unrs=$(node -p "require('./node_modules/unrs-resolver/package.json').version")
  (cd "$jest_deps" && arm64_npm install --ignore-scripts --no-audit --no-fund \
    "@unrs/resolver-binding-linux-arm64-gnu@$unrs" >/dev/null)
fi
# The suites load the addon through this checkout's binding.js, which
# asks for the platform package first: NODE_PATH makes that the installed
# one (binding.js falls back to a local webnn-node.node only when no
# package loads, and an x64 one would not load here). Checked below.
export NODE_PATH="$project/node_modules:$jest_deps/node_modules"
loaded=$(qemu-aarch64 "$arm64_node" -e "
  require('./binding.js').load();
  console.log(Object.keys(require.cache).find((f) => f.endsWith('.node')));")
case "$loaded" in
  "$project"/node_modules/webnn-node-linux-arm64-gnu/*) ;;
  *) die "the suites would load $loaded, not the installed package" ;;
esac
phase_done install "both tarballs installed by the arm64 npm; suites load ${loaded#"$tmp"/}"

# --- 4. The README's samples, verbatim, in the project ----------------
# Extracted as __tests__/readme.test.js does: a block whose first line
# names a file (// example.mjs) runs as that kind of module, others as
# CommonJS. Each must exit 0 with no stderr and print something; where its
# last console.log says in a comment what it prints, the numbers printed
# must be those.
readme_out=$(node - "$project" "$arm64_node" <<'EOF'
const { spawnSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const [project, node] = process.argv.slice(2);
const readme = fs.readFileSync('README.md', 'utf8');
const blocks = [...readme.matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
const numbers = (s) => {
  const bracket = s.match(/\[([^\]]*)\]\s*$/);
  return ((bracket ? bracket[1] : s).match(/-?\d+(\.\d+)?/g) || []).map(Number);
};
let failed = 0;
blocks.forEach((code, i) => {
  const named = code.match(/^\/\/ (\S+\.[cm]?js)\n/);
  const name = named ? named[1] : `sample-${i + 1}.cjs`;
  fs.writeFileSync(path.join(project, name), code);
  const r = spawnSync('qemu-aarch64', [node, name], { cwd: project, encoding: 'utf8', timeout: 300000 });
  const promised = [...code.matchAll(/console\.log\(.*\);\s*\/\/ (.*)$/gm)].pop();
  const lastLine = (r.stdout || '').trim().split('\n').pop();
  const problems = [];
  if (r.status !== 0) problems.push(`exit ${r.status}${r.error ? ` (${r.error.message})` : ''}`);
  if (r.stderr) problems.push(`stderr: ${r.stderr.trim()}`);
  if (!r.stdout) problems.push('no output');
  if (promised && numbers(promised[1]).join(',') !== numbers(lastLine).join(',')) {
    problems.push(`printed "${lastLine}", the README says "${promised[1]}"`);
  }
  if (problems.length) failed++;
  console.log(`${problems.length ? 'FAIL' : 'ok  '} ${name}: ${problems.length ? problems.join('; ') : lastLine}`);
});
console.log(`${blocks.length - failed} of ${blocks.length} README samples ran as promised`);
process.exit(failed || !blocks.length ? 1 : 0);
EOF
) && readme_ok=1 || readme_ok=0
echo "$readme_out" | sed 's/^/  readme: /'
[ "$readme_ok" = 1 ] || failed=1
phase_done readme "$(echo "$readme_out" | tail -n 1)$([ "$readme_ok" = 1 ] || echo ' FAILED')"

# --- 5 and 6. jest in band under the arm64 Node -----------------------
# In band (-i): jest's workers would be child Nodes. Prints the counts
# from jest's JSON report, and every skipped test by name; what the tests
# print goes to $tmp/<label>.log too.
run_jest() { # label, jest arguments...
  local label=$1 report=$tmp/$1.json status=0
  shift
  # A cap, so that a hang fails the run instead of stalling it (either
  # run takes a few minutes emulated).
  timeout --kill-after=30 1200 \
    qemu-aarch64 "$arm64_node" node_modules/jest/bin/jest.js -i --ci --json --outputFile="$report" "$@" |
    tee "$tmp/$label.log" || status=$?
  if [ ! -f "$report" ]; then
    failed=1
    phase_done "$label" "jest exited $status without a report FAILED"
    return
  fi
  local counts
  counts=$(node -e "
    const j = require(process.argv[1]);
    for (const s of j.testResults)
      for (const t of s.assertionResults)
        if (t.status === 'pending') console.error('  skipped: ' + t.fullName);
    console.log(j.numPassedTests + ' passed, ' + j.numFailedTests + ' failed, ' + j.numPendingTests +
      ' skipped (' + j.numTotalTestSuites + ' suites)');" "$report")
  [ "$status" = 0 ] || failed=1
  # The conformance test says how many vector cases passed.
  local cases
  cases=$(grep -o '^\[conformance cpu\] [0-9]* of [0-9]* cases passed' "$tmp/$label.log" | sed 's/^\[conformance cpu\] /; /' || true)
  phase_done "$label" "$counts$cases$([ "$status" = 0 ] || echo " FAILED (jest exited $status)")"
}

run_jest api "${suites[@]}"

vectors=${WEBNN_WPT_VECTORS:-$root/../shared/wpt-vectors}
if [ -d "$vectors" ]; then
  # The whole set but add.json, unless WEBNN_CONFORMANCE_FILES names
  # others: add.json's "large inputs" case adds two 6000x6000 tensors,
  # which alone outlasts the runner's 60 s per case under emulation; the
  # other 1500-odd cases take about 20 s together.
  if [ -z "${WEBNN_CONFORMANCE_FILES:-}" ]; then
    WEBNN_CONFORMANCE_FILES=$(find "$vectors" -maxdepth 1 -name '*.json' ! -name index.json ! -name add.json \
      -printf '%f\n' | sed 's/\.json$//' | sort | paste -sd, -)
  fi
  export WEBNN_CONFORMANCE_FILES
  say "conformance slice: $(echo "$WEBNN_CONFORMANCE_FILES" | tr ',' '\n' | wc -l) vector files"
  # The CPU backend only: the GPU one has no adapter under emulation (its
  # test is reported skipped).
  run_jest conformance __tests__/conformance.test.js -t 'conformance \(cpu\)|of the slice exists'
else
  failed=1
  phase_done conformance "no vectors at $vectors FAILED"
fi

echo
echo "test-arm64: linux-arm64-gnu under qemu-aarch64, Node $arch"
for r in "${SUMMARY[@]}"; do
  IFS='|' read -r name secs what <<<"$r"
  printf '  %-12s %6s  %s\n' "$name" "$secs" "$what"
done
echo "  total        $SECONDS s"
exit $failed

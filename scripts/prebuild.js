#!/usr/bin/env node
// `npm run prebuild`: builds the stripped release addon for one platform,
// puts it into its platform package under npm/ (package.json's napi.targets
// name them), packs that package into dist/, records how it was built in
// dist/<platform>.prebuild.json, and prints the tarball's path as its last
// line.
//
//   node scripts/prebuild.js                      this machine's platform
//   node scripts/prebuild.js --target <triple>    another one (a cross build)
//
// How each target is built:
// - Linux glibc (x86_64/aarch64-unknown-linux-gnu): `cargo zigbuild` against
//   glibc 2.17 (`--target <triple>.2.17`), so the addon loads on any glibc
//   from 2.17 on. Needs cargo-zigbuild and zig (`pip install ziglang
//   cargo-zigbuild`). Without them, this machine's own target is built with
//   the system toolchain instead, and the addon then needs this machine's
//   glibc (printed, and recorded): fine for a local test, not for a release.
// - Linux musl: `cargo zigbuild` with `-C target-feature=-crt-static` (an
//   addon is a shared object that the musl Node loads dynamically).
// - macOS: natively with @napi-rs/cli on a Mac, else `cargo zigbuild`, which
//   needs SDKROOT to name a MacOSX.sdk: the Metal backend links against its
//   frameworks (not stripped, as stripping Mach-O needs Apple's tools).
// - Windows x64: natively with @napi-rs/cli (MSVC) on Windows;
//   `--target x86_64-pc-windows-gnu` builds the same package with mingw-w64
//   (its linker on PATH). N-API is a plain C interface and the addon frees
//   only what it allocated, so a mingw-built DLL loads in the MSVC-built
//   node.exe; releases are built with MSVC.
'use strict';
const { execFileSync, spawnSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const { platformName } = require('../binding.js');
const { glibcFloor } = require('./glibc-floor.js');

const root = path.resolve(__dirname, '..');
const napi = path.join(root, 'node_modules', '.bin', process.platform === 'win32' ? 'napi.cmd' : 'napi');
const run = (cmd, args, opts = {}) =>
  execFileSync(cmd, args, { cwd: root, stdio: ['ignore', 'inherit', 'inherit'], ...opts });

/** Each target triple's platform package (napi-rs names). */
const PLATFORMS = {
  'x86_64-unknown-linux-gnu': 'linux-x64-gnu',
  'x86_64-unknown-linux-musl': 'linux-x64-musl',
  'aarch64-unknown-linux-gnu': 'linux-arm64-gnu',
  'aarch64-unknown-linux-musl': 'linux-arm64-musl',
  'aarch64-apple-darwin': 'darwin-arm64',
  'x86_64-apple-darwin': 'darwin-x64',
  'x86_64-pc-windows-msvc': 'win32-x64-msvc',
  'x86_64-pc-windows-gnu': 'win32-x64-msvc',
};
/** The glibc the gnu targets are linked against through zig. */
const GLIBC_FLOOR = '2.17';

function fail(message) {
  console.error(`prebuild: ${message}`);
  process.exit(1);
}

function parseArgs(argv) {
  let target = null;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--target') target = argv[++i];
    else if (argv[i].startsWith('--target=')) target = argv[i].slice('--target='.length);
    else fail(`unknown argument ${argv[i]} (usage: node scripts/prebuild.js [--target <triple>])`);
  }
  if (target === undefined || target === '') fail('--target needs a triple');
  return { target };
}

const ok = (cmd, args) => {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  return !r.error && r.status === 0;
};
/** cargo-zigbuild and a zig it can use (on PATH, or the `ziglang` Python package). */
function haveZigbuild() {
  if (!ok('cargo-zigbuild', ['--version'])) return false;
  return ok('zig', ['version']) || ok('python3', ['-m', 'ziglang', 'version']) || ok('python', ['-m', 'ziglang', 'version']);
}

const hostTarget = Object.keys(PLATFORMS).find(
  (t) => PLATFORMS[t] === platformName() && !t.endsWith('-windows-gnu'),
);
const { target: asked } = parseArgs(process.argv.slice(2));
const target = asked || hostTarget;
if (!target) fail(`no platform package for ${platformName()} (see package.json's napi.targets); pass --target`);
const platform = PLATFORMS[target];
if (!platform) fail(`unknown target ${target}; known: ${Object.keys(PLATFORMS).join(', ')}`);
const pkgDir = path.join(root, 'npm', platform);
if (!fs.existsSync(path.join(pkgDir, 'package.json'))) fail(`no platform package npm/${platform}`);

const native = target === hostTarget;
const targetDir = process.env.CARGO_TARGET_DIR ? path.resolve(root, process.env.CARGO_TARGET_DIR) : path.join(root, 'target');
const dest = path.join(pkgDir, `webnn-node.${platform}.node`);
const libFile = target.includes('-windows-')
  ? 'webnn_node.dll'
  : target.includes('-apple-')
    ? 'libwebnn_node.dylib'
    : 'libwebnn_node.so';
const cargoArtifact = path.join(targetDir, target, 'release', libFile);
// The strip setting and the musl flags are per target, so they leave the
// other targets' (and the local build's) caches alone.
const envKey = target.toUpperCase().replace(/-/g, '_');
const stripEnv = { CARGO_PROFILE_RELEASE_STRIP: 'symbols' };

let method;
const t0 = Date.now();
fs.rmSync(dest, { force: true });
if (target.includes('-linux-') && haveZigbuild()) {
  const musl = target.endsWith('-musl');
  const zigTarget = musl ? target : `${target}.${GLIBC_FLOOR}`;
  method = `cargo zigbuild --target ${zigTarget}`;
  const env = { ...process.env, ...stripEnv };
  if (musl) env[`CARGO_TARGET_${envKey}_RUSTFLAGS`] = '-C target-feature=-crt-static';
  run('cargo', ['zigbuild', '--release', '--lib', '--target', zigTarget], { env });
  fs.copyFileSync(cargoArtifact, dest);
} else if (target.includes('-apple-') && process.platform !== 'darwin' && haveZigbuild()) {
  if (!process.env.SDKROOT) {
    fail(`${target} links against the macOS SDK's frameworks (Metal, QuartzCore, Foundation, libobjc): set SDKROOT to a MacOSX.sdk`);
  }
  method = `cargo zigbuild --target ${target} (not stripped)`;
  run('cargo', ['zigbuild', '--release', '--lib', '--target', target]);
  fs.copyFileSync(cargoArtifact, dest);
} else if (target === 'x86_64-pc-windows-gnu') {
  // napi-build links a windows-gnu addon against node: LIBNODE_PATH names a
  // directory with libnode.dll (or an import library for node.exe).
  if (!process.env.LIBNODE_PATH) fail('x86_64-pc-windows-gnu needs LIBNODE_PATH, a directory with libnode.dll');
  method = 'cargo build --target x86_64-pc-windows-gnu (mingw-w64)';
  run('cargo', ['build', '--release', '--lib', '--target', target], { env: { ...process.env, ...stripEnv } });
  fs.copyFileSync(cargoArtifact, dest);
} else if (native) {
  if (target.includes('-linux-gnu')) {
    console.error(
      `prebuild: cargo-zigbuild or zig was not found, so this builds with the system toolchain: ` +
        `the addon will need this machine's glibc, not ${GLIBC_FLOOR}. For a release build, ` +
        '`pip install ziglang cargo-zigbuild` first.',
    );
  } else if (target.includes('-linux-musl')) {
    console.error('prebuild: cargo-zigbuild or zig was not found; building musl with the system toolchain.');
  }
  method = `napi build --platform --release --strip (${target}, system toolchain)`;
  const staging = path.join(targetDir, 'napi');
  fs.rmSync(staging, { recursive: true, force: true });
  // The type definitions napi-rs would generate go to the staging folder:
  // index.d.ts is written by hand.
  run(napi, ['build', '--platform', '--release', '--strip', '--no-js', '--output-dir', staging], {
    shell: process.platform === 'win32',
  });
  fs.copyFileSync(path.join(staging, `webnn-node.${platform}.node`), dest);
} else {
  fail(
    `cannot build ${target} on ${platformName()}: ` +
      (target.includes('-windows-msvc')
        ? 'the MSVC target builds on Windows (or use --target x86_64-pc-windows-gnu with mingw-w64)'
        : 'cross builds need cargo-zigbuild and zig (`pip install ziglang cargo-zigbuild`)'),
  );
}
const seconds = (Date.now() - t0) / 1000;

const record = {
  platform,
  target,
  method,
  bytes: fs.statSync(dest).size,
  buildSeconds: Math.round(seconds),
};
if (target.includes('-linux-gnu')) record.glibcFloor = glibcFloor(dest);
const dist = path.join(root, 'dist');
fs.mkdirSync(dist, { recursive: true });
fs.writeFileSync(path.join(dist, `${platform}.prebuild.json`), JSON.stringify(record, null, 2) + '\n');
console.error(
  `prebuild: ${platform} built with ${method} in ${record.buildSeconds} s, ` +
    `${(record.bytes / 1048576).toFixed(1)} MiB` +
    (record.glibcFloor ? `, needs glibc ${record.glibcFloor} or newer` : ''),
);

const out = execFileSync('npm', ['pack', '--json', '--pack-destination', dist], {
  cwd: pkgDir,
  encoding: 'utf8',
  shell: process.platform === 'win32',
});
const [{ filename }] = JSON.parse(out);
console.log(path.join(dist, filename));

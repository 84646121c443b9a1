'use strict';
// Finds the native addon, in this order:
//   1. the prebuilt package for this platform (an optional dependency,
//      e.g. webnn-node-linux-x64-gnu), which installs without a toolchain;
//   2. an addon built from source in this package (`webnn-node.node`, made by
//      the install script when cargo is present, or by `npx webnn-node-build`);
//   3. otherwise an error that names the platform and the ways out.

const fs = require('fs');
const path = require('path');

/** The platforms with a prebuilt package (package.json's optionalDependencies). */
const PREBUILT = [
  'linux-x64-gnu',
  'linux-x64-musl',
  'linux-arm64-gnu',
  'linux-arm64-musl',
  'darwin-arm64',
  'darwin-x64',
  'win32-x64-msvc',
];

/**
 * 'gnu' or 'musl' on Linux. The process report names the glibc this Node
 * runs on, or lists the musl loader among its shared objects; without a
 * report (they can be disabled), the musl loader in /lib or an `ldd` that is
 * musl's decides. No child process is started.
 */
function linuxLibc() {
  try {
    const report = process.report && process.report.getReport();
    if (report && report.header) {
      if (report.header.glibcVersionRuntime) return 'gnu';
      const shared = Array.isArray(report.sharedObjects) ? report.sharedObjects : [];
      if (shared.some((f) => /(^|\/)(ld-musl-|libc\.musl-)/.test(f))) return 'musl';
    }
  } catch {
    // Reports can be disabled; fall through to the file system.
  }
  try {
    if (fs.readdirSync('/lib').some((f) => f.startsWith('ld-musl-'))) return 'musl';
  } catch {
    // No /lib: look at ldd below.
  }
  try {
    if (fs.readFileSync('/usr/bin/ldd', 'latin1').includes('musl')) return 'musl';
  } catch {
    // No ldd: assume glibc.
  }
  return 'gnu';
}

/**
 * The napi-rs platform name: linux-x64-gnu, linux-arm64-musl, darwin-arm64,
 * win32-x64-msvc. The arguments default to this process (libc is only
 * looked up on Linux).
 */
function platformName(platform = process.platform, arch = process.arch, libc) {
  if (platform === 'linux') return `linux-${arch}-${libc || linuxLibc()}`;
  if (platform === 'win32') return `win32-${arch}-msvc`;
  return `${platform}-${arch}`;
}

function load() {
  const platform = platformName();
  const pkg = `webnn-node-${platform}`;
  const failures = [];
  try {
    return require(pkg);
  } catch (e) {
    // A missing package is the normal case on platforms without one; an
    // installed one that fails to load (an old glibc, say) is worth naming.
    if (!(e && e.code === 'MODULE_NOT_FOUND' && String(e.message).includes(pkg))) {
      failures.push(`${pkg}: ${e && e.message}`);
    }
  }
  const local = path.join(__dirname, 'webnn-node.node');
  if (fs.existsSync(local)) {
    try {
      return require(local);
    } catch (e) {
      failures.push(`${local}: ${e && e.message}`);
    }
  }
  const err = new Error(
    `webnn-node: no native addon for ${platform}` +
      (failures.length ? ` (${failures.join('; ')})` : '') +
      `. Either install a Rust toolchain (cargo) and build it from source with ` +
      `\`npx webnn-node-build\`, or use a platform that has a prebuilt package ` +
      `(${pkg} is not installed; prebuilt: ${PREBUILT.join(', ')}).`,
  );
  err.code = 'WEBNN_NODE_NO_ADDON';
  throw err;
}

module.exports = { load, platformName, linuxLibc, PREBUILT };

#!/usr/bin/env node
// Builds the native addon from source with cargo and puts it next to
// index.js as webnn-node.node, where the loader (binding.js) finds it when
// no prebuilt package is installed. Also installed as `webnn-node-build`,
// the command to run by hand when install scripts are blocked.
//
//   node scripts/build.js [--debug]
//
// In a checkout the build stays in ./target (incremental). Inside
// node_modules it builds in a temporary directory and removes it after,
// so no ~500 MB build tree is left in the dependency folder.
'use strict';
const { spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const root = path.resolve(__dirname, '..');
const debug = process.argv.includes('--debug');

function fail(message) {
  console.error(`webnn-node: ${message}`);
  process.exit(1);
}

const probe = spawnSync('cargo', ['--version'], { encoding: 'utf8' });
if (probe.error || probe.status !== 0) {
  fail(
    'building from source needs a Rust toolchain, and `cargo` was not found on PATH. ' +
      'Install one (rustup installs cargo), then run `npx webnn-node-build` ' +
      '(or `npm run build` in a checkout).',
  );
}

const installed = root.split(path.sep).includes('node_modules');
let targetDir;
let temporary = false;
if (process.env.CARGO_TARGET_DIR) {
  targetDir = path.resolve(root, process.env.CARGO_TARGET_DIR);
} else if (installed) {
  targetDir = fs.mkdtempSync(path.join(os.tmpdir(), 'webnn-node-build-'));
  temporary = true;
} else {
  targetDir = path.join(root, 'target');
}

const args = ['build', '--lib', '--target-dir', targetDir];
if (!debug) args.push('--release');
const built = spawnSync('cargo', args, { cwd: root, stdio: 'inherit' });
if (built.error || built.status !== 0) {
  if (temporary) fs.rmSync(targetDir, { recursive: true, force: true });
  fail(`\`cargo ${args.join(' ')}\` failed (exit ${built.status})`);
}

const file = {
  linux: 'libwebnn_node.so',
  darwin: 'libwebnn_node.dylib',
  win32: 'webnn_node.dll',
}[process.platform] || 'libwebnn_node.so';
const artifact = path.join(targetDir, debug ? 'debug' : 'release', file);
const dest = path.join(root, 'webnn-node.node');
// Copy to a temporary name and rename, so a running process that has the
// old addon mapped keeps a valid file.
fs.copyFileSync(artifact, dest + '.tmp');
fs.renameSync(dest + '.tmp', dest);
if (temporary) fs.rmSync(targetDir, { recursive: true, force: true });
console.log(`built ${path.relative(process.cwd(), dest) || dest}`);

#!/usr/bin/env node
// Builds the native addon from source with cargo and copies it next to
// index.js as webnn-node.node. Run by `npm install`; nothing is downloaded
// except crates from the registry.
'use strict';
const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..');
const debug = process.argv.includes('--debug');
const args = ['build', '--lib'];
if (!debug) args.push('--release');
execFileSync('cargo', args, { cwd: root, stdio: 'inherit' });

const targetDir = process.env.CARGO_TARGET_DIR
  ? path.resolve(root, process.env.CARGO_TARGET_DIR)
  : path.join(root, 'target');
const file = {
  linux: 'libwebnn_node.so',
  darwin: 'libwebnn_node.dylib',
  win32: 'webnn_node.dll',
}[process.platform] || 'libwebnn_node.so';
const built = path.join(targetDir, debug ? 'debug' : 'release', file);
const dest = path.join(root, 'webnn-node.node');
// Copy to a temporary name and rename, so a running process that has the
// old addon mapped keeps a valid file.
fs.copyFileSync(built, dest + '.tmp');
fs.renameSync(dest + '.tmp', dest);
console.log(`built ${path.relative(root, dest)}`);

#!/usr/bin/env node
// The package's install script. With the prebuilt package for this platform
// (an optional dependency) there is nothing to do. Without one, it builds
// from source when cargo is present, and otherwise says plainly what to do
// instead of failing with a stack trace.
'use strict';
const { spawnSync } = require('child_process');
const path = require('path');
const { load, platformName, PREBUILT } = require('../binding.js');

try {
  load();
  process.exit(0);
} catch {
  // No usable addon yet: build one below, or explain.
}

const cargo = spawnSync('cargo', ['--version'], { encoding: 'utf8' });
if (cargo.error || cargo.status !== 0) {
  console.error(
    `webnn-node: there is no prebuilt addon for ${platformName()} and no Rust toolchain ` +
      'to build one. Install Rust (rustup installs cargo) and run `npx webnn-node-build`, ' +
      `or use a platform with a prebuilt package (${PREBUILT.join(', ')}).`,
  );
  process.exit(1);
}
const r = spawnSync(process.execPath, [path.join(__dirname, 'build.js')], { stdio: 'inherit' });
process.exit(r.status === null ? 1 : r.status);

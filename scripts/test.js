#!/usr/bin/env node
// `npm test`: the whole suite. Installs the dev dependencies when they are
// missing (a fresh clone), builds the addon, then runs the Rust unit tests
// and the jest suite (API tests and the conformance runner).
'use strict';
const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..');
const run = (cmd, args) => execFileSync(cmd, args, { cwd: root, stdio: 'inherit' });

if (!fs.existsSync(path.join(root, 'node_modules', 'jest'))) {
  // --ignore-scripts: our own install script (the native build) runs next.
  // `npm install` rather than `npm ci`: the lock records no registry
  // addresses and only this platform's optional packages, which `npm ci`
  // refuses as out of sync; --no-save leaves the lock as it is.
  run('npm', ['install', '--ignore-scripts', '--no-save', '--no-audit', '--no-fund']);
}
run('node', ['scripts/build.js']);
run('cargo', ['test', '--release']);
run(path.join(root, 'node_modules', '.bin', 'jest'), ['--ci', ...process.argv.slice(2)]);

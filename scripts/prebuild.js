#!/usr/bin/env node
// `npm run prebuild`: builds the release addon for this platform with
// @napi-rs/cli (stripped), puts it into its platform package under npm/
// (made by `napi create-npm-dirs` from package.json's `napi` field), packs
// that package into dist/, and prints the tarball's path as its last line.
'use strict';
const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const { platformName } = require('../binding.js');

const root = path.resolve(__dirname, '..');
const napi = path.join(root, 'node_modules', '.bin', 'napi');
const staging = path.join(root, 'target', 'napi');
const run = (cmd, args, opts = {}) =>
  execFileSync(cmd, args, { cwd: root, stdio: ['ignore', 'inherit', 'inherit'], ...opts });

const pkgDir = path.join(root, 'npm', platformName());
if (!fs.existsSync(path.join(pkgDir, 'package.json'))) {
  throw new Error(`no platform package for ${platformName()} under npm/ (see package.json's napi.targets)`);
}

fs.rmSync(staging, { recursive: true, force: true });
// The type definitions napi-rs would generate go to the staging folder:
// index.d.ts is written by hand.
run(napi, ['build', '--platform', '--release', '--strip', '--no-js', '--output-dir', staging]);
run(napi, ['artifacts', '--output-dir', staging, '--npm-dir', 'npm']);
// `napi artifacts` also leaves a copy beside package.json, where the loader
// has no use for it (it takes the platform package or webnn-node.node).
fs.rmSync(path.join(root, `webnn-node.${platformName()}.node`), { force: true });

const dist = path.join(root, 'dist');
fs.mkdirSync(dist, { recursive: true });
const out = execFileSync('npm', ['pack', '--json', '--pack-destination', dist], {
  cwd: pkgDir,
  encoding: 'utf8',
});
const [{ filename }] = JSON.parse(out);
console.log(path.join(dist, filename));

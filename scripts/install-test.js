#!/usr/bin/env node
// The install test: packs the package and this platform's prebuilt package,
// installs both into an empty project with install scripts ignored and no
// cargo on PATH, then `require`s and `import`s it and runs a graph. Prints
// the install time and both tarballs' sizes.
'use strict';
const { execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const root = path.resolve(__dirname, '..');

function sh(cmd, args, opts = {}) {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], ...opts });
}
const kib = (file) => `${(fs.statSync(file).size / 1024).toFixed(0)} KiB`;

// 1. The two tarballs.
const platformTgz = sh(process.execPath, [path.join(__dirname, 'prebuild.js')], { cwd: root })
  .trim()
  .split('\n')
  .pop();
const dist = path.join(root, 'dist');

// A Linux glibc package must load on glibc 2.28 or older (RHEL 8, Debian
// 10 and later). Built through zig it targets 2.17: then the floor is
// checked here, on the very addon that goes into the tarball. Built with
// the system toolchain (no cargo-zigbuild on this machine) it needs this
// machine's glibc, which is said rather than failed: it is a local build.
const recordFile = path.join(dist, `${require('../binding.js').platformName()}.prebuild.json`);
const record = fs.existsSync(recordFile) ? JSON.parse(fs.readFileSync(recordFile, 'utf8')) : {};
let glibcLine = '';
if (record.glibcFloor) {
  const { compareVersions, MAX_GLIBC } = require('./glibc-floor');
  if (!/zigbuild/.test(record.method)) {
    glibcLine = `  glibc floor NOT CHECKED: built with the system toolchain (needs glibc ${record.glibcFloor}); \`pip install ziglang cargo-zigbuild\` builds for 2.17`;
  } else if (compareVersions(record.glibcFloor, MAX_GLIBC) > 0) {
    console.error(`install test: the addon needs glibc ${record.glibcFloor}, past ${MAX_GLIBC} (${record.method})`);
    process.exit(1);
  } else {
    glibcLine = `  glibc floor: needs ${record.glibcFloor} (at most ${MAX_GLIBC} allowed; ${record.method})`;
  }
}
const [{ filename }] = JSON.parse(sh('npm', ['pack', '--json', '--pack-destination', dist], { cwd: root }));
const mainTgz = path.join(dist, filename);

// 2. An empty project; PATH without any directory that has cargo in it.
const project = fs.mkdtempSync(path.join(os.tmpdir(), 'webnn-install-'));
fs.writeFileSync(
  path.join(project, 'package.json'),
  JSON.stringify({ name: 'install-test', version: '1.0.0', private: true }),
);
const PATH = (process.env.PATH || '')
  .split(path.delimiter)
  .filter((d) => d && !fs.existsSync(path.join(d, 'cargo')))
  .join(path.delimiter);
const env = { ...process.env, PATH, CARGO_HOME: path.join(project, 'no-cargo') };
try {
  execFileSync('cargo', ['--version'], { env, stdio: 'ignore' });
  throw new Error('cargo is still reachable');
} catch (e) {
  if (e.message === 'cargo is still reachable') throw e;
}

const t0 = process.hrtime.bigint();
sh('npm', ['install', '--ignore-scripts', '--no-audit', '--no-fund', platformTgz, mainTgz], {
  cwd: project,
  env,
});
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;

// 3. What was installed: the prebuilt addon, no build tree, no local addon.
const pkg = path.join(project, 'node_modules', 'webnn-node');
for (const unwanted of ['target', 'webnn-node.node']) {
  if (fs.existsSync(path.join(pkg, unwanted))) throw new Error(`installed package has ${unwanted}`);
}

// 4. require, import, and a graph, in the project with the same PATH.
const cjs = `
const { ml, MLGraphBuilder } = require('webnn-node');
require.resolve('webnn-node/package.json');
(async () => {
  const ctx = await ml.createContext();
  const b = new MLGraphBuilder(ctx);
  const x = b.input('x', { dataType: 'float32', shape: [3] });
  const g = await b.build({ y: b.mul(x, b.constant({ dataType: 'float32', shape: [3] }, new Float32Array([2, 3, 4]))) });
  const { outputs } = await ctx.compute(g, { x: new Float32Array([1, 2, 3]) }, { y: new Float32Array(3) });
  console.log(Array.from(outputs.y).join(','));
})();`;
const esm = `
import { ml, MLGraphBuilder } from 'webnn-node';
import 'webnn-node/global';
const ctx = await navigator.ml.createContext();
const b = new MLGraphBuilder(ctx);
const x = b.input('x', { dataType: 'float32', shape: [2] });
const g = await b.build({ y: b.neg(x) });
const { outputs } = await ctx.compute(g, { x: new Float32Array([1, -2]) }, { y: new Float32Array(2) });
console.log(ml === navigator.ml, Array.from(outputs.y).join(','));`;
fs.writeFileSync(path.join(project, 'run.cjs'), cjs);
fs.writeFileSync(path.join(project, 'run.mjs'), esm);
const a = sh(process.execPath, ['run.cjs'], { cwd: project, env }).trim();
const b = sh(process.execPath, ['run.mjs'], { cwd: project, env }).trim();
if (a !== '2,6,12') throw new Error(`require: got ${a}`);
if (b !== 'true -1,2') throw new Error(`import: got ${b}`);

console.log(`install test: npm install of both tarballs took ${seconds.toFixed(1)} s (scripts ignored, no cargo)`);
console.log(`  ${path.basename(mainTgz)}: ${kib(mainTgz)}`);
console.log(`  ${path.basename(platformTgz)}: ${kib(platformTgz)}`);
console.log('  require: ok, import: ok, graph results correct');
if (glibcLine) console.log(glibcLine);
fs.rmSync(project, { recursive: true, force: true });

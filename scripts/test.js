#!/usr/bin/env node
// `npm test`: the whole suite. Installs the dev dependencies when any is
// missing (a fresh clone, a new one added), builds the addon, runs the Rust unit tests once,
// then the jest suite (API tests, the conformance run) and the demo under
// each Node version asked for, and the install test when asked for.
//
//   npm test                          jest under this Node
//   npm test -- --node=20,22,24       jest under each (what CI runs)
//   npm test -- --install             also pack, install and run the packages
//   npm test -- [jest arguments]      e.g. a test file's name
'use strict';
const { execFileSync, spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { nodeBinary } = require('./node-binary');
const { installDevDependencies } = require('./dev-deps');

const root = path.resolve(__dirname, '..');
const run = (cmd, args, env) =>
  execFileSync(cmd, args, { cwd: root, stdio: 'inherit', env: { ...process.env, ...env } });

let versions = [process.versions.node.split('.')[0]];
let install = false;
const jestArgs = [];
for (const a of process.argv.slice(2)) {
  if (a.startsWith('--node=')) versions = a.slice(7).split(',').filter(Boolean);
  else if (a === '--install') install = true;
  else jestArgs.push(a);
}

installDevDependencies();
run(process.execPath, ['scripts/build.js']);
run('cargo', ['test', '--release']);

const totals = [];
let failed = false;
for (const v of versions) {
  const node = nodeBinary(v);
  const report = path.join(os.tmpdir(), `webnn-jest-${process.pid}-${v}.json`);
  console.log(`\n=== jest under Node ${execFileSync(node, ['--version'], { encoding: 'utf8' }).trim()}`);
  const r = spawnSync(
    node,
    [path.join(root, 'node_modules', 'jest', 'bin', 'jest.js'), '--ci', '--json', `--outputFile=${report}`, ...jestArgs],
    { cwd: root, stdio: 'inherit' },
  );
  let line = `Node ${v}: jest exited ${r.status}`;
  if (fs.existsSync(report)) {
    const j = JSON.parse(fs.readFileSync(report, 'utf8'));
    line = `Node ${v}: ${j.numPassedTests} passed, ${j.numFailedTests} failed, ${j.numPendingTests} skipped (${j.numTotalTestSuites} suites)`;
    fs.rmSync(report);
  }
  // The quick start's example inference, under the same Node.
  const demo = spawnSync(node, [path.join(root, 'examples', 'demo.js')], { cwd: root, stdio: 'inherit' });
  line += `; demo ${demo.status === 0 ? 'ran' : `failed (exit ${demo.status})`}`;
  totals.push(line);
  if (r.status !== 0 || demo.status !== 0) failed = true;
}
if (install) {
  const r = spawnSync(process.execPath, ['scripts/install-test.js'], { cwd: root, stdio: 'inherit' });
  totals.push(`install test: ${r.status === 0 ? 'passed' : 'failed'}`);
  if (r.status !== 0) failed = true;
}
console.log('\n' + totals.join('\n'));
process.exit(failed ? 1 : 0);

'use strict';
// Every JavaScript sample in README.md runs verbatim, as a user would paste
// it into a file: a block whose first line is a comment naming a file
// (`// example.mjs`) runs as that kind of module, other blocks as CommonJS.
// `webnn-node` resolves to this checkout through a node_modules link.

const { spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { linkDir } = require('./link-dir');

const root = path.join(__dirname, '..');
const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
const blocks = [...readme.matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1]);

let dir;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'webnn-readme-'));
  fs.mkdirSync(path.join(dir, 'node_modules'));
  linkDir(root, path.join(dir, 'node_modules', 'webnn-node'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

test('README has CommonJS and ES module samples', () => {
  const names = blocks.map((b) => (b.match(/^\/\/ (\S+\.[cm]?js)\n/) || [])[1]);
  expect(names.some((n) => n && n.endsWith('.mjs'))).toBe(true);
  expect(names.some((n) => !n || n.endsWith('.cjs'))).toBe(true);
});

test.each(blocks.map((code, i) => [i + 1, code]))('README sample %i runs verbatim', (i, code) => {
  const named = code.match(/^\/\/ (\S+\.[cm]?js)\n/);
  const file = path.join(dir, named ? named[1] : `sample-${i}.cjs`);
  fs.writeFileSync(file, code);
  const r = spawnSync(process.execPath, [file], { cwd: dir, encoding: 'utf8', timeout: 60000 });
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  expect(r.stdout.length).toBeGreaterThan(0);
});

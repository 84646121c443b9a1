'use strict';
// The typings compile a strict TypeScript program (examples/typed.ts),
// resolving `webnn-node` as a user's project would (through the package's
// exports, via a node_modules link to this checkout).

const { spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { linkDir } = require('./link-dir');

const root = path.join(__dirname, '..');

test('examples/typed.ts type-checks with tsc --strict', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'webnn-tsc-'));
  fs.mkdirSync(path.join(dir, 'node_modules', '@types'), { recursive: true });
  linkDir(root, path.join(dir, 'node_modules', 'webnn-node'));
  linkDir(path.join(root, 'node_modules', '@types', 'node'), path.join(dir, 'node_modules', '@types', 'node'));
  for (const f of ['typed.ts', 'tsconfig.json']) {
    fs.copyFileSync(path.join(root, 'examples', f), path.join(dir, f));
  }
  const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  const r = spawnSync(process.execPath, [tsc, '-p', dir], { encoding: 'utf8', timeout: 120000 });
  fs.rmSync(dir, { recursive: true, force: true });
  expect(r.stdout + r.stderr).toBe('');
  expect(r.status).toBe(0);
});

'use strict';
// V8's external memory: every tensor and graph reports the native bytes it
// keeps alive, and its finalizer gives back exactly that. Node 24's V8
// aborts the process when more is given back than was reported, so the
// child process must exit cleanly as well as balance its books.

const { execFileSync } = require('child_process');
const path = require('path');

const MB = 1 << 20;

test('tensors and graphs report their bytes and give back exactly that when collected', () => {
  const rounds = 40;
  const out = execFileSync(
    process.execPath,
    ['--expose-gc', path.join(__dirname, 'fixtures', 'external-memory.js'), String(rounds)],
    { encoding: 'utf8', timeout: 60000 },
  );
  const r = JSON.parse(out.trim().split('\n').pop());
  // Each round holds a graph with one 1 MiB constant and a 1 MiB tensor.
  expect(r.peak - r.base).toBe(rounds * 2 * MB);
  expect(r.after).toBe(r.base);
});

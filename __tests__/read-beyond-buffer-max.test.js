'use strict';
// A read result is handed to JS as an external ArrayBuffer. Node refuses
// one longer than its largest Buffer (4 GiB on Node 20; larger tensors are
// allowed) and has then already run the finalizer it was given, so the
// result must not be taken back and used as well (a double free). Larger
// runtimes' maxima are beyond what this machine can allocate: skipped.

const { execFileSync } = require('child_process');
const path = require('path');
const { constants } = require('buffer');

const bytes = (Math.floor(constants.MAX_LENGTH / 4) + 1) * 4;
const fits = bytes <= 2 ** 34;
(fits ? test : test.skip)('a read longer than the largest Buffer settles without a crash', () => {
  const out = execFileSync(
    process.execPath,
    [path.join(__dirname, 'fixtures', 'read-beyond-buffer-max.js')],
    { encoding: 'utf8', timeout: 120000 },
  );
  const r = JSON.parse(out.trim().split('\n').pop());
  if (r.resolved) {
    expect(r.byteLength).toBe(bytes);
  } else {
    expect(r.name).toBe('UnknownError');
  }
}, 150000);

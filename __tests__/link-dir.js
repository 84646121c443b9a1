'use strict';
// A directory link for the tests that put this checkout (or a dev
// dependency) into a temporary project's node_modules. On Windows a
// 'dir' symlink needs the symlink privilege (an administrator, or
// Developer Mode); a junction needs none and resolves the same for
// Node's module lookup. Junction targets must be absolute.

const fs = require('fs');
const path = require('path');

function linkDir(target, linkPath) {
  fs.symlinkSync(path.resolve(target), linkPath, process.platform === 'win32' ? 'junction' : 'dir');
}

module.exports = { linkDir };

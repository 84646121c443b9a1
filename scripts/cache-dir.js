'use strict';
// Where the project keeps what it downloads once and reuses (the models the
// examples run, the Node binaries the suite runs under): one directory
// outside the checkout, so a fresh clone or a `git clean` does not fetch
// them again.
//
//   $WEBNN_NODE_CACHE                   when set (it predates the others)
//   $XDG_CACHE_HOME/webnn-node          when that is set to an absolute path
//                                       (the XDG base directory spec ignores
//                                       a relative one)
//   ~/.cache/webnn-node                 otherwise
//
// Each user of the cache takes a folder of its own under this root (the
// MiniLM model: all-minilm-l6-v2, which $WEBNN_MINILM_DIR overrides).

const os = require('os');
const path = require('path');

/** The cache's root directory (not created here). */
function cacheRoot(env = process.env) {
  if (env.WEBNN_NODE_CACHE) return path.resolve(env.WEBNN_NODE_CACHE);
  const xdg = env.XDG_CACHE_HOME;
  if (xdg && path.isAbsolute(xdg)) return path.join(xdg, 'webnn-node');
  return path.join(os.homedir(), '.cache', 'webnn-node');
}

module.exports = { cacheRoot };

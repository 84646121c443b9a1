'use strict';
// require('webnn-node/global') installs `navigator.ml` and the ML*
// interfaces as globals, for code written against the browser API.

const api = require('./index.js');

for (const name of ['ML', 'MLContext', 'MLGraphBuilder', 'MLOperand', 'MLTensor', 'MLGraph']) {
  if (!(name in globalThis)) {
    Object.defineProperty(globalThis, name, {
      value: api[name],
      writable: true,
      configurable: true,
    });
  }
}

if (typeof globalThis.navigator !== 'object' || globalThis.navigator === null) {
  Object.defineProperty(globalThis, 'navigator', {
    value: {},
    writable: true,
    configurable: true,
  });
}
if (!('ml' in globalThis.navigator)) {
  Object.defineProperty(globalThis.navigator, 'ml', {
    value: api.ml,
    configurable: true,
  });
}

module.exports = api;

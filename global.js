'use strict';
// require('webnn-node/global') installs `navigator.ml` and the ML*
// interfaces as globals, for code written against the browser API.
//
// It installs WebNN and nothing else. Libraries find WebNN by these names:
// onnxruntime-web's WebNN execution provider, for one, checks `navigator.ml`
// and constructs `MLGraphBuilder` by its global name (docs/ort-web.md).
// `navigator` itself is created only where Node has none (before v21), as a
// plain object, so it carries no other browser members that code could
// mistake for a browser. Interfaces of other APIs are deliberately not
// faked: a placeholder `GPUDevice` class (onnxruntime-web tests
// `options instanceof GPUDevice` when it creates a WebNN context itself)
// would tell every library that probes `typeof GPUDevice` that WebGPU
// exists, and would stand in the way of a real WebGPU binding installed
// later. Passing ORT an MLContext (`{name: 'webnn', context}`) avoids that
// test instead.

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

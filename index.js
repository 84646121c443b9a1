'use strict';
// webnn-node: the W3C Web Neural Network API for Node.js.
//
// The classes are native (see src/binding). This file only loads the addon,
// names one MLGraphBuilder method per operator (they all share one native
// entry point), and provides the `ml` object.

const native = require('./webnn-node.node');

const { MLContext, MLGraphBuilder, MLOperand, MLTensor, MLGraph } = native;

const callOperator = MLGraphBuilder.prototype._op;
Object.defineProperty(MLGraphBuilder.prototype, '_op', { enumerable: false });

for (const name of native.operatorNames()) {
  // A named function expression keeps the operator's name in stack traces.
  const method = {
    [name](...args) {
      return callOperator.call(this, name, args);
    },
  }[name];
  Object.defineProperty(MLGraphBuilder.prototype, name, {
    value: method,
    writable: true,
    enumerable: true,
    configurable: true,
  });
}

/** `ML`: the entry point, `navigator.ml` in browsers. */
class ML {
  /**
   * Creates a context: `{deviceType: 'cpu' | 'gpu', powerPreference,
   * accelerated, numThreads}`. The CPU backend is the default.
   */
  createContext(options) {
    return native.createContext(options);
  }

  get [Symbol.toStringTag]() {
    return 'ML';
  }
}

const ml = new ML();

module.exports = {
  ml,
  ML,
  MLContext,
  MLGraphBuilder,
  MLOperand,
  MLTensor,
  MLGraph,
};

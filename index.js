'use strict';
// webnn-node: the W3C Web Neural Network API for Node.js.
//
// The classes are native (see src/binding). This file only loads the addon,
// names one MLGraphBuilder method per operator (they all share one native
// entry point), and provides the `ml` object.

const { inspect } = require('util');
const native = require('./binding.js').load();

const { MLContext, MLGraphBuilder, MLOperand, MLTensor, MLGraph } = native;

// The native helpers behind the methods below are not API: hide them.
for (const [cls, name] of [
  [MLGraphBuilder, '_op'],
  [MLTensor, '_state'],
  [MLOperand, '_origin'],
  [MLGraph, '_summary'],
]) {
  Object.defineProperty(cls.prototype, name, { enumerable: false });
}
const callOperator = MLGraphBuilder.prototype._op;

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

// `using x = ...` destroys x at the end of the block (Node versions with
// explicit resource management); destroy() is idempotent.
if (typeof Symbol.dispose === 'symbol') {
  for (const cls of [MLContext, MLGraph, MLTensor]) {
    Object.defineProperty(cls.prototype, Symbol.dispose, {
      value: function dispose() {
        this.destroy();
      },
      writable: true,
      configurable: true,
    });
  }
}

// util.inspect (console.log) shows what an object is, not an empty {}.
function defineInspect(cls, describe) {
  Object.defineProperty(cls.prototype, inspect.custom, {
    value: function (depth, options, inspectFn = inspect) {
      if (depth < 0) return options.stylize(`[${cls.name}]`, 'special');
      return `${cls.name} ${inspectFn(describe(this), { ...options, depth: options.depth })}`;
    },
    configurable: true,
  });
}
const withLabel = (o, label) => (label ? { ...o, label } : o);
defineInspect(MLTensor, (t) =>
  withLabel(
    {
      dataType: t.dataType,
      shape: t.shape,
      readable: t.readable,
      writable: t.writable,
      constant: t.constant,
      exportableToGPU: t.exportableToGPU,
      state: t._state(),
    },
    t.label,
  ),
);
defineInspect(MLOperand, (o) => {
  const [from, label] = o._origin();
  return withLabel({ dataType: o.dataType, shape: o.shape, from }, label);
});
defineInspect(MLGraph, (g) => {
  const s = g._summary();
  const named = (list) =>
    Object.fromEntries(list.map((d) => [d.name, { dataType: d.dataType, shape: d.shape }]));
  return { inputs: named(s.inputs), outputs: named(s.outputs), state: s.state };
});

/** `ML`: the entry point, `navigator.ml` in browsers. */
class ML {
  /**
   * Creates a context: `{deviceType: 'cpu' | 'gpu', powerPreference,
   * accelerated, numThreads}`. The CPU backend is the default. Given a
   * GPUDevice instead, a context of that device (lib/interop.js).
   */
  createContext(options) {
    return native.createContext(options);
  }

  get [Symbol.toStringTag]() {
    return 'ML';
  }
}

// createContext(gpuDevice), createExportableTensor(), exportToGPU().
require('./lib/interop.js').install(native, ML, MLContext);

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

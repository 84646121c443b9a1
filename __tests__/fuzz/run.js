'use strict';

// Detaches an ArrayBuffer, resizable ones too: Node 22's structuredClone
// cannot transfer those (DataCloneError), ArrayBuffer.prototype.transfer can.
function detach(ab) {
  if (typeof ab.transfer === 'function') ab.transfer();
  else structuredClone(ab, { transfer: [ab] });
}
// The fuzzer: random builder, tensor and dispatch sequences over every
// operator, with valid and hostile arguments, on one backend.
//
//   node __tests__/fuzz/run.js --device cpu --seed 42 --runs 300 [--path P]
//
// fast-check generates each run's plan (a list of abstract commands) from
// the seed; the interpreter below turns it into calls against one context.
// Every call is classified: a success, an exception the method may raise
// (see ALLOWED), the caller's own exception passed on, or a failure (an
// exception of another kind, a synchronous throw from a promise-returning
// method, a call that never settles, a result that differs from the
// reference). A crash ends the process: the parent sees the exit status and
// the last run announced on stderr. The last stdout line is a JSON summary.
//
// Reproduce a run: the same --seed (and --path from a failure report).

const fc = require('fast-check');
const path = require('path');

const webnn = require(path.resolve(__dirname, '..', '..'));
const { ml, MLGraphBuilder, MLOperand } = webnn;

const argv = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : dflt;
};
const DEVICE = opt('device', 'cpu');
const SEED = Number(opt('seed', Date.now() % 2 ** 31));
const RUNS = Number(opt('runs', 200));
const PATH = opt('path', undefined);
/** Go on after a failing run (to survey failures rather than stop). */
const KEEP_GOING = argv.includes('--keep-going');
/** How long one call may take before it counts as a hang. */
const CALL_LIMIT_MS = Number(opt('call-limit-ms', 30000));

const OPERATORS = Object.keys(MLGraphBuilder.prototype).filter(
  (k) => typeof MLGraphBuilder.prototype[k] === 'function' && !['input', 'constant', 'build'].includes(k),
);

/** The exceptions each method may raise on bad arguments or state. */
const ALLOWED = {
  op: ['TypeError', 'InvalidStateError'],
  input: ['TypeError', 'InvalidStateError'],
  constant: ['TypeError', 'InvalidStateError'],
  builder: ['TypeError', 'InvalidStateError'],
  build: ['TypeError', 'InvalidStateError', 'OperationError', 'NotSupportedError', 'UnknownError'],
  createTensor: ['TypeError', 'InvalidStateError', 'UnknownError'],
  createConstantTensor: ['TypeError', 'InvalidStateError', 'UnknownError'],
  writeTensor: ['TypeError', 'InvalidStateError'],
  destroy: [],
  readTensor: ['TypeError', 'InvalidStateError', 'OperationError', 'UnknownError'],
  dispatch: ['TypeError', 'InvalidStateError'],
  compute: ['TypeError', 'InvalidStateError', 'OperationError'],
  computeSync: ['TypeError', 'InvalidStateError', 'OperationError'],
};
const PROMISING = new Set(['build', 'createTensor', 'createConstantTensor', 'readTensor', 'compute']);

/** `x instanceof MLOperand`, false for a Proxy whose traps throw. */
function isOperand(x) {
  try {
    return x instanceof MLOperand;
  } catch {
    return false;
  }
}

/** What the caller's hostile code throws: passed on as is, never wrapped. */
class Hostile extends Error {}
Hostile.prototype.name = 'Hostile';
const HOSTILE = new Hostile('thrown by the caller');

// ---------------------------------------------------------------------
// Plans: what fast-check generates.

const DTYPES = ['float32', 'float16', 'int32', 'uint32', 'int64', 'uint64', 'int8', 'uint8', 'int4', 'uint4'];
const SHAPES = [[], [1], [3], [2, 3], [1, 2, 3], [2, 1, 3], [2, 3, 4], [1, 2, 2, 2], [4, 4], [3, 1]];
const NUMBERS = [0, 1, 2, 3, -1, -0, 0.5, 1.5, NaN, Infinity, -Infinity, 2 ** 31, 2 ** 32, 2 ** 32 - 1, 2 ** 53, -(2 ** 53), 1e308, Number.MIN_VALUE];
const OPTION_KEYS = [
  'label', 'axis', 'axes', 'keepDimensions', 'padding', 'strides', 'dilations', 'groups', 'inputLayout',
  'filterLayout', 'bias', 'alpha', 'beta', 'epsilon', 'scale', 'permutation', 'minValue', 'maxValue',
  'windowDimensions', 'roundingType', 'outputSizes', 'outputPadding', 'sizes', 'scales', 'mode', 'value',
  'activations', 'direction', 'layout', 'aTranspose', 'bTranspose', 'c', 'upper', 'diagonal',
  'batchDimensions', 'exclusive', 'reversed', 'returnSequence', 'initialHiddenState', 'resetAfter',
];
const HOSTILE_KINDS = [
  'throwingGetter', 'throwingProxy', 'passthroughProxy', 'sparseHuge', 'sparseLong', 'denseLong', 'holeyShape',
  'detachedView', 'resizableView', 'shrunkView', 'sab', 'dataView', 'symbol', 'function', 'bigint', 'hugeBigint',
  'null', 'undefined', 'string', 'emptyObject', 'deepNesting', 'otherBuilderOperand', 'otherContextOperand',
  'tensor', 'destroyedTensor', 'otherContextTensor', 'graph', 'arrayOfHostile', 'numberObject', 'dateObject',
];

const nat = (max) => fc.nat({ max });
const argSpec = fc.oneof(
  { weight: 8, arbitrary: fc.record({ t: fc.constant('operand'), i: nat(1000) }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant('shape'), shape: fc.constantFrom(...SHAPES) }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant('number'), v: fc.constantFrom(...NUMBERS) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('int'), v: fc.integer({ min: -4, max: 6 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('string'), v: fc.constantFrom(...DTYPES, 'relu', 'nchw', 'nhwc', 'oihw', 'floor', 'linear', 'forward', 'both', '') }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant('hostile'), k: fc.constantFrom(...HOSTILE_KINDS) }) },
);
const optionsSpec = fc.record({
  t: fc.constant('options'),
  members: fc.array(fc.tuple(fc.constantFrom(...OPTION_KEYS), argSpec), { maxLength: 3 }),
  hostileMember: fc.boolean(),
});
const anyArg = fc.oneof({ weight: 5, arbitrary: argSpec }, { weight: 2, arbitrary: optionsSpec });
const descSpec = fc.oneof(
  { weight: 6, arbitrary: fc.record({ t: fc.constant('desc'), dt: fc.constant('float32'), shape: fc.constantFrom(...SHAPES) }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant('desc'), dt: fc.constantFrom(...DTYPES), shape: fc.constantFrom(...SHAPES) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('descHostile'), dt: fc.constantFrom(...DTYPES), shape: argSpec }) },
  { weight: 1, arbitrary: argSpec },
);

const EXACT = ['add', 'sub', 'mul', 'max', 'min', 'neg', 'abs', 'relu', 'identity'];
const command = fc.oneof(
  { weight: 6, arbitrary: fc.record({ c: fc.constant('exact'), name: fc.constantFrom(...EXACT), a: nat(1000), b: nat(1000) }) },
  { weight: 10, arbitrary: fc.record({ c: fc.constant('op'), name: fc.constantFrom(...OPERATORS), args: fc.array(anyArg, { maxLength: 5 }), plausible: fc.boolean() }) },
  { weight: 4, arbitrary: fc.record({ c: fc.constant('input'), desc: descSpec, hostileName: fc.boolean(), fill: nat(100) }) },
  { weight: 2, arbitrary: fc.record({ c: fc.constant('constant'), form: fc.constantFrom('buffer', 'scalar', 'tensor'), desc: descSpec, data: argSpec, fill: nat(100) }) },
  { weight: 2, arbitrary: fc.record({ c: fc.constant('tensor'), action: fc.constantFrom('create', 'createConstant', 'write', 'read', 'readInto', 'destroy'), desc: descSpec, data: argSpec, i: nat(100) }) },
  { weight: 4, arbitrary: fc.record({ c: fc.constant('build'), picks: fc.array(nat(1000), { minLength: 1, maxLength: 3 }), hostile: fc.oneof({ weight: 3, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: argSpec }), run: fc.constantFrom('compute', 'computeSync', 'dispatch', 'all'), runHostile: fc.option(fc.constantFrom(...HOSTILE_KINDS, 'getterDetach', 'getterShrink', 'getterDestroyGraph', 'getterDestroyTensor'), { freq: 2 }) }) },
  { weight: 1, arbitrary: fc.record({ c: fc.constant('useAfter'), what: fc.constantFrom('destroyGraph', 'destroyTensor', 'destroyContext', 'newBuilder', 'builderOfLostContext') }) },
);
const plan = fc.array(command, { minLength: 3, maxLength: 14 });

// ---------------------------------------------------------------------
// Reference results for the small graphs of exact float32 operators.

function broadcast(a, b) {
  const r = Math.max(a.length, b.length);
  const out = [];
  for (let i = 0; i < r; i++) {
    const x = i - (r - a.length) >= 0 ? a[i - (r - a.length)] : 1;
    const y = i - (r - b.length) >= 0 ? b[i - (r - b.length)] : 1;
    if (x !== y && x !== 1 && y !== 1) return null;
    out.push(Math.max(x, y));
  }
  return out;
}
const size = (shape) => shape.reduce((a, b) => a * b, 1);
function strides(shape) {
  const s = new Array(shape.length).fill(1);
  for (let i = shape.length - 2; i >= 0; i--) s[i] = s[i + 1] * shape[i + 1];
  return s;
}
/** Index into `shape` (broadcast to `out`) of flat output index k. */
function bindex(k, out, shape) {
  const os = strides(out);
  const is = strides(shape);
  const off = out.length - shape.length;
  let idx = 0;
  for (let d = 0; d < out.length; d++) {
    const c = Math.floor(k / os[d]) % out[d];
    if (d >= off && shape[d - off] !== 1) idx += c * is[d - off];
  }
  return idx;
}
const BINARY = { add: (x, y) => x + y, sub: (x, y) => x - y, mul: (x, y) => x * y, max: Math.max, min: Math.min };
const UNARY = { neg: (x) => -x, abs: Math.abs, relu: (x) => Math.max(x, 0), identity: (x) => x };

/** The reference of `name(args)`, when it is one of the exact operators. */
function reference(name, args, refs) {
  const r = (v) => (isOperand(v) ? refs.get(v) : undefined);
  if (BINARY[name] && args.length >= 2) {
    const [a, b] = [r(args[0]), r(args[1])];
    if (!a || !b || (args[2] !== undefined && !isPlainOptions(args[2]))) return undefined;
    const shape = broadcast(a.shape, b.shape);
    if (!shape) return undefined;
    const data = Array.from({ length: size(shape) }, (_, k) =>
      Math.fround(BINARY[name](a.data[bindex(k, shape, a.shape)], b.data[bindex(k, shape, b.shape)])));
    return { shape, data };
  }
  if (UNARY[name]) {
    const a = r(args[0]);
    if (!a || (args[1] !== undefined && !isPlainOptions(args[1]))) return undefined;
    return { shape: a.shape, data: a.data.map((x) => Math.fround(UNARY[name](x))) };
  }
  return undefined;
}
const isPlainOptions = (o) => o !== null && typeof o === 'object' && Object.getPrototypeOf(o) === Object.prototype &&
  Object.keys(o).every((k) => k === 'label' && typeof o[k] === 'string');

// ---------------------------------------------------------------------
// The interpreter.

const counts = {};
const failures = [];
let calls = 0;
let runIndex = -1;

function fail(what, detail) {
  failures.push({ run: runIndex, what, detail: String(detail).slice(0, 500) });
}

function within(p, what) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(Object.assign(new Error(`${what} did not settle in ${CALL_LIMIT_MS} ms`), { hang: true })), CALL_LIMIT_MS);
  });
  return Promise.race([p, limit]).finally(() => clearTimeout(timer));
}

/** Classifies an exception of `method`. */
function classifyError(method, e) {
  if (e === HOSTILE) return 'caller';
  if (e && e.hang) {
    fail(method, e.message);
    return 'hang';
  }
  const name = e && e.name;
  if (ALLOWED[method].includes(name) && typeof e.message === 'string') return name;
  fail(method, `unexpected ${name}: ${e && e.message}`);
  return `failure:${name}`;
}

/** With WEBNN_FUZZ_TRACE set, every exception of a call goes to stderr (to read a replayed run). */
function trace(method, e) {
  if (process.env.WEBNN_FUZZ_TRACE) process.stderr.write(`${method}: ${e === HOSTILE ? 'hostile caller' : `${e && e.name}: ${e && e.message}`}\n`);
}

/** Calls `fn` as `method`; returns its value, or undefined on an exception. */
async function call(method, fn) {
  calls++;
  let v;
  try {
    v = fn();
  } catch (e) {
    trace(method, e);
    const outcome = PROMISING.has(method) ? 'failure:threw' : classifyError(method, e);
    if (PROMISING.has(method)) fail(method, `threw synchronously instead of rejecting: ${e && e.name}: ${e && e.message}`);
    counts[outcome] = (counts[outcome] || 0) + 1;
    return undefined;
  }
  if (PROMISING.has(method)) {
    if (!v || typeof v.then !== 'function') {
      fail(method, 'did not return a promise');
      counts['failure:no-promise'] = (counts['failure:no-promise'] || 0) + 1;
      return undefined;
    }
    try {
      v = await within(v, method);
    } catch (e) {
      trace(method, e);
      const outcome = classifyError(method, e);
      counts[outcome] = (counts[outcome] || 0) + 1;
      return undefined;
    }
  }
  counts.success = (counts.success || 0) + 1;
  return v;
}

class Run {
  constructor(env) {
    this.env = env;
    this.ctx = env.ctx;
    this.builder = new MLGraphBuilder(this.ctx);
    this.operands = [];
    this.refs = new Map();
    /** The names of the inputs each operand depends on. */
    this.deps = new Map();
    this.inputs = new Map(); // operand -> { name, dt, shape, data }
    this.tensors = [];
    this.graphs = [];
    this.names = 0;
  }

  pick(list, i) {
    return list.length ? list[i % list.length] : undefined;
  }

  /** A fresh JS value for a plan's argument. */
  value(spec, depth = 0) {
    switch (spec.t) {
      case 'operand':
        return this.pick(this.operands, spec.i) ?? this.env.otherOperand;
      case 'shape':
        return spec.shape.slice();
      case 'number':
      case 'int':
      case 'string':
        return spec.v;
      case 'options': {
        const o = {};
        for (const [k, v] of spec.members) o[k] = this.value(v, depth + 1);
        if (spec.hostileMember && spec.members.length) {
          Object.defineProperty(o, spec.members[0][0], { enumerable: true, get() { throw HOSTILE; } });
        }
        return o;
      }
      case 'desc':
        return { dataType: spec.dt, shape: spec.shape.slice() };
      case 'descHostile':
        return { dataType: spec.dt, shape: this.value(spec.shape, depth + 1) };
      case 'hostile':
        return this.hostile(spec.k, depth);
      default:
        throw new Error(`no spec ${spec.t}`);
    }
  }

  hostile(kind, depth = 0) {
    const env = this.env;
    switch (kind) {
      case 'throwingGetter': {
        const o = {};
        for (const k of ['dataType', 'shape', 'label', 'axis', 'y']) {
          Object.defineProperty(o, k, { enumerable: true, get() { throw HOSTILE; } });
        }
        return o;
      }
      case 'throwingProxy':
        return new Proxy({}, { get() { throw HOSTILE; }, ownKeys() { throw HOSTILE; }, has() { throw HOSTILE; }, getOwnPropertyDescriptor() { throw HOSTILE; }, getPrototypeOf() { throw HOSTILE; } });
      case 'passthroughProxy':
        return new Proxy([2, 3], {});
      case 'sparseHuge':
        return new Array(2 ** 32 - 1);
      case 'sparseLong':
        return new Array(1e6);
      case 'denseLong':
        return new Array(1e5).fill(1);
      case 'holeyShape':
        return [2, , 3]; // eslint-disable-line no-sparse-arrays
      case 'detachedView': {
        const ab = new ArrayBuffer(24);
        const view = new Float32Array(ab);
        detach(ab);
        return view;
      }
      case 'resizableView':
        return new Float32Array(new ArrayBuffer(24, { maxByteLength: 64 }));
      case 'shrunkView': {
        const ab = new ArrayBuffer(24, { maxByteLength: 64 });
        const v = new Float32Array(ab, 0, 6);
        ab.resize(8);
        return v;
      }
      case 'sab':
        return new Float32Array(new SharedArrayBuffer(24));
      case 'dataView':
        return new DataView(new ArrayBuffer(24));
      case 'symbol':
        return Symbol('s');
      case 'function':
        return () => 1;
      case 'bigint':
        return 3n;
      case 'hugeBigint':
        return 2n ** 70n;
      case 'null':
        return null;
      case 'undefined':
        return undefined;
      case 'string':
        return 'float32';
      case 'emptyObject':
        return {};
      case 'deepNesting':
        return { a: { b: { c: { d: { e: [[[[1]]]] } } } } };
      case 'otherBuilderOperand':
        return env.otherOperand;
      case 'otherContextOperand':
        return env.foreignOperand;
      case 'tensor':
        return this.pick(this.tensors, 0) ?? env.foreignTensor;
      case 'destroyedTensor':
        return env.destroyedTensor;
      case 'otherContextTensor':
        return env.foreignTensor;
      case 'graph':
        return env.foreignGraph;
      case 'arrayOfHostile':
        return depth > 2 ? [] : [this.hostile('throwingGetter', depth + 1), 1];
      case 'numberObject':
        return new Number(2); // eslint-disable-line no-new-wrappers
      case 'dateObject':
        return new Date(0);
      default:
        throw new Error(`no hostile ${kind}`);
    }
  }

  addOperand(v, ref, from = []) {
    const deps = new Set();
    const walk = (x, depth) => {
      if (isOperand(x)) for (const n of this.deps.get(x) ?? []) deps.add(n);
      else if (depth < 3 && x && typeof x === 'object' && !ArrayBuffer.isView(x)) {
        let vals;
        try {
          vals = Array.isArray(x) ? x.slice(0, 16) : Object.values(x);
        } catch {
          return;
        }
        for (const y of vals) walk(y, depth + 1);
      }
    };
    walk(from, 0);
    const list = Array.isArray(v) ? v : [v];
    for (const o of list) if (isOperand(o)) this.deps.set(o, deps);
    for (const o of list) {
      if (!(isOperand(o))) {
        fail('op', `returned ${Object.prototype.toString.call(o)}, not an MLOperand`);
        continue;
      }
      this.operands.push(o);
    }
    if (ref && !Array.isArray(v)) this.refs.set(v, ref);
  }

  /** Data for an input or constant of `shape`: small exact values. */
  static data(shape, fill) {
    return Array.from({ length: size(shape) }, (_, i) => ((i * 7 + fill) % 11) - 5 + (i % 3) * 0.25);
  }

  async step(cmd) {
    switch (cmd.c) {
      case 'op':
        return this.op(cmd);
      case 'exact':
        return this.exact(cmd);
      case 'input':
        return this.input(cmd);
      case 'constant':
        return this.constant(cmd);
      case 'tensor':
        return this.tensor(cmd);
      case 'build':
        return this.build(cmd);
      case 'useAfter':
        return this.useAfter(cmd);
      default:
        throw new Error(`no command ${cmd.c}`);
    }
  }

  async op(cmd) {
    let args = cmd.args.map((a) => this.value(a));
    if (cmd.plausible && this.operands.length) {
      // Mostly operands of matching shapes: enough for many operators to
      // succeed, so that later steps have results to work on.
      const first = isOperand(args[0]) ? args[0] : this.operands[this.operands.length - 1];
      args = [first, ...args.slice(1)];
      if (BINARY[cmd.name] || /^(equal|greater|lesser|logical|pow|div|where|prelu|matmul)/.test(cmd.name)) {
        args[1] = this.operands.find((o) => o !== first && String(o.shape) === String(first.shape)) ?? first;
      }
    }
    const b = this.builder;
    const v = await call('op', () => b[cmd.name](...args));
    if (v === undefined) return;
    // An operator with a reference reads only its operand arguments (one,
    // or two when binary); the graph's inputs are those they depend on.
    // Otherwise any operand among the arguments may be read, and a run of
    // a graph whose inputs were over-counted fails with a TypeError, which
    // is right but not checked.
    const ref = reference(cmd.name, args, this.refs);
    this.addOperand(v, ref, ref ? args.slice(0, BINARY[cmd.name] ? 2 : 1) : args);
  }

  /** An operator with a reference, on operands that have one. */
  async exact(cmd) {
    const known = this.operands.filter((o) => this.refs.has(o));
    if (!known.length) return;
    const a = this.pick(known, cmd.a);
    const b = this.pick(known, cmd.b);
    const args = BINARY[cmd.name] ? [a, b] : [a];
    const v = await call('op', () => this.builder[cmd.name](...args));
    if (v !== undefined) this.addOperand(v, reference(cmd.name, args, this.refs), args);
  }

  async input(cmd) {
    const name = cmd.hostileName ? this.hostile('throwingGetter') : `in${this.names++}`;
    const desc = this.value(cmd.desc);
    const v = await call('input', () => this.builder.input(name, desc));
    if (v === undefined) return;
    this.addOperand(v);
    this.deps.set(v, new Set([name]));
    const dt = v.dataType;
    const shape = Array.from(v.shape);
    const data = Run.data(shape, cmd.fill);
    this.inputs.set(v, { name, dt, shape, data });
    if (dt === 'float32') this.refs.set(v, { shape, data: data.map(Math.fround) });
  }

  async constant(cmd) {
    const b = this.builder;
    if (cmd.form === 'scalar') {
      const [type, value] = [this.value(cmd.desc), this.value(cmd.data)];
      const v = await call('constant', () => b.constant(type, value));
      if (v !== undefined) this.addOperand(v);
      return;
    }
    if (cmd.form === 'tensor') {
      const t = this.pick(this.tensors, cmd.fill) ?? this.env.foreignTensor;
      const v = await call('constant', () => b.constant(t));
      if (v !== undefined) this.addOperand(v);
      return;
    }
    const desc = this.value(cmd.desc);
    let buffer;
    let ref;
    if (cmd.desc.t === 'desc' && cmd.data.t === 'operand' && cmd.desc.dt === 'float32') {
      const data = Run.data(cmd.desc.shape, cmd.fill);
      buffer = Float32Array.from(data);
      ref = { shape: cmd.desc.shape.slice(), data: Array.from(buffer) };
    } else {
      buffer = this.value(cmd.data);
    }
    const v = await call('constant', () => b.constant(desc, buffer));
    if (v !== undefined) this.addOperand(v, ref);
  }

  async tensor(cmd) {
    const ctx = this.ctx;
    const t = this.pick(this.tensors, cmd.i);
    switch (cmd.action) {
      case 'create': {
        const d = this.value(cmd.desc);
        if (cmd.desc.t === 'desc' && cmd.i % 2) Object.assign(d, { readable: true, writable: true });
        const v = await call('createTensor', () => ctx.createTensor(d));
        if (v !== undefined) this.tensors.push(v);
        return;
      }
      case 'createConstant': {
        const d = this.value(cmd.desc);
        const data = cmd.data.t === 'operand' && cmd.desc.t === 'desc' && cmd.desc.dt === 'float32'
          ? new Float32Array(size(cmd.desc.shape)) : this.value(cmd.data);
        const v = await call('createConstantTensor', () => ctx.createConstantTensor(d, data));
        if (v !== undefined) this.tensors.push(v);
        return;
      }
      case 'write': {
        const target = t ?? this.value(cmd.data);
        const data = t && cmd.data.t === 'operand' ? new Uint8Array(t.shape.reduce((a, b) => a * b, 1) * 4) : this.value(cmd.data);
        await call('writeTensor', () => ctx.writeTensor(target, data));
        return;
      }
      case 'read': {
        const target = t ?? this.value(cmd.data);
        await call('readTensor', () => ctx.readTensor(target));
        return;
      }
      case 'readInto': {
        const into = this.value(cmd.data);
        await call('readTensor', () => ctx.readTensor(t ?? this.env.foreignTensor, into));
        return;
      }
      case 'destroy':
        if (t) {
          await call('destroy', () => t.destroy());
        }
        return;
      default:
        throw new Error(cmd.action);
    }
  }

  async build(cmd) {
    let outputs;
    const named = {};
    if (cmd.hostile) {
      outputs = this.value(cmd.hostile);
    } else {
      const results = this.operands.filter((o) => !this.inputs.has(o));
      cmd.picks.forEach((p, k) => {
        const o = this.pick(p % 4 ? results : this.operands, p);
        if (o) named[`out${k}`] = o;
      });
      outputs = named;
    }
    const graph = await call('build', () => this.builder.build(outputs));
    if (graph === undefined) return;
    this.graphs.push(graph);
    if (outputs !== named) return;
    await this.runGraph(graph, named, cmd);
  }

  /** Views of the inputs `named`'s outputs depend on, and of the outputs. */
  views(named) {
    const reached = new Set();
    for (const o of Object.values(named)) for (const n of this.deps.get(o) ?? []) reached.add(n);
    const ins = {};
    const shapes = new Map();
    for (const info of this.inputs.values()) {
      if (reached.has(info.name)) {
        ins[info.name] = typed(info.dt, info.data);
        shapes.set(ins[info.name], info.shape);
      }
    }
    const outs = {};
    for (const [k, o] of Object.entries(named)) {
      outs[k] = typed(o.dataType, new Array(size(Array.from(o.shape))).fill(0));
      shapes.set(outs[k], Array.from(o.shape));
    }
    return { ins, outs, shapes };
  }

  check(named, results, how) {
    for (const [k, o] of Object.entries(named)) {
      const ref = this.refs.get(o);
      if (!ref || !results[k]) continue;
      const got = Array.from(results[k]);
      if (got.length !== ref.data.length || got.some((x, i) => !(x === ref.data[i]))) {
        fail(how, `output ${k}: got [${got.slice(0, 8)}] want [${ref.data.slice(0, 8)}] (shape ${ref.shape})`);
        counts['failure:wrong-result'] = (counts['failure:wrong-result'] || 0) + 1;
      } else {
        counts.checked = (counts.checked || 0) + 1;
      }
    }
  }

  async runGraph(graph, named, cmd) {
    const ctx = this.ctx;
    const hows = cmd.run === 'all' ? ['compute', 'computeSync', 'dispatch'] : [cmd.run];
    for (const how of hows) {
      const { ins, outs, shapes } = this.views(named);
      let results;
      if (how === 'computeSync') {
        const r = await call('computeSync', () => ctx.computeSync(graph, ins, outs));
        results = r === undefined ? undefined : outs;
      } else if (how === 'compute') {
        const r = await call('compute', () => ctx.compute(graph, ins, outs));
        results = r && r.outputs;
      } else {
        results = await this.dispatch(graph, ins, outs, shapes);
      }
      if (results) {
        this.check(named, results, how);
      } else if (Object.values(named).every((o) => this.refs.has(o))) {
        // A small float32 graph of exact operators on valid arguments
        // must run.
        fail(how, `a graph with a reference did not run (outputs ${Object.keys(named)})`);
      }
    }
    if (cmd.runHostile) await this.hostileRun(graph, named, cmd.runHostile);
  }

  async dispatch(graph, ins, outs, shapes) {
    const ctx = this.ctx;
    const tin = {};
    for (const [k, v] of Object.entries(ins)) {
      const t = await call('createTensor', () => ctx.createTensor({ dataType: dtOf(v), shape: shapes.get(v), writable: true }));
      if (!t) return undefined;
      await call('writeTensor', () => ctx.writeTensor(t, v));
      tin[k] = t;
    }
    const tout = {};
    for (const [k, v] of Object.entries(outs)) {
      const t = await call('createTensor', () => ctx.createTensor({ dataType: dtOf(v), shape: shapes.get(v), readable: true }));
      if (!t) return undefined;
      tout[k] = t;
    }
    const before = counts.success;
    await call('dispatch', () => ctx.dispatch(graph, tin, tout));
    const dispatched = counts.success > before;
    const results = {};
    for (const [k, t] of Object.entries(tout)) {
      const ab = await call('readTensor', () => ctx.readTensor(t));
      if (ab) results[k] = new (ARRAYS[dtOf(outs[k])])(ab);
    }
    for (const t of [...Object.values(tin), ...Object.values(tout)]) t.destroy();
    return dispatched ? results : undefined;
  }

  async hostileRun(graph, named, kind) {
    const ctx = this.ctx;
    const { ins, outs } = this.views(named);
    const key = Object.keys(outs)[0];
    let hostileOuts = { ...outs };
    const firstIn = Object.values(ins)[0];
    switch (kind) {
      case 'getterDetach':
      case 'getterShrink': {
        // A getter that detaches or shrinks a buffer read before it.
        let victim = firstIn ?? outs[Object.keys(outs)[1]];
        if (victim && kind === 'getterShrink') {
          const name = firstIn ? Object.keys(ins)[0] : Object.keys(outs)[1];
          const ab = new ArrayBuffer(victim.byteLength, { maxByteLength: victim.byteLength });
          const resizable = new victim.constructor(ab);
          resizable.set(victim);
          (firstIn ? ins : outs)[name] = resizable;
          victim = resizable;
        }
        hostileOuts = {};
        Object.defineProperty(hostileOuts, key, { enumerable: true,
          get() {
            if (!victim) return outs[key];
            if (kind === 'getterDetach') detach(victim.buffer);
            else victim.buffer.resize(0);
            return outs[key];
          } });
        for (const [k, v] of Object.entries(outs)) if (k !== key) hostileOuts[k] = v;
        break;
      }
      case 'getterDestroyGraph':
        hostileOuts = {};
        Object.defineProperty(hostileOuts, key, { enumerable: true, get() { graph.destroy(); return outs[key]; } });
        break;
      case 'getterDestroyTensor': {
        const t = this.pick(this.tensors, 0);
        hostileOuts = {};
        Object.defineProperty(hostileOuts, key, { enumerable: true, get() { if (t) t.destroy(); return outs[key]; } });
        break;
      }
      default:
        hostileOuts[key] = this.hostile(kind);
    }
    await call('computeSync', () => ctx.computeSync(graph, ins, hostileOuts));
    await call('compute', () => ctx.compute(graph, ins, hostileOuts));
    await call('dispatch', () => ctx.dispatch(graph, {}, hostileOuts));
  }

  async useAfter(cmd) {
    const env = this.env;
    switch (cmd.what) {
      case 'destroyGraph': {
        const g = this.pick(this.graphs, 0);
        if (g) {
          g.destroy();
          await call('dispatch', () => this.ctx.dispatch(g, {}, {}));
          await call('compute', () => this.ctx.compute(g, {}, {}));
        }
        return;
      }
      case 'destroyTensor': {
        const t = this.pick(this.tensors, 0);
        if (t) {
          t.destroy();
          await call('readTensor', () => this.ctx.readTensor(t));
          await call('writeTensor', () => this.ctx.writeTensor(t, new Float32Array(1)));
        }
        return;
      }
      case 'destroyContext':
        // Everything after this in the run uses a lost context.
        this.ctx.destroy();
        env.lost = true;
        await call('builder', () => new MLGraphBuilder(this.ctx));
        await call('createTensor', () => this.ctx.createTensor({ dataType: 'float32', shape: [1] }));
        return;
      case 'newBuilder':
        this.builder = (await call('builder', () => new MLGraphBuilder(this.ctx))) ?? this.builder;
        return;
      case 'builderOfLostContext':
        await call('op', () => env.lostBuilder.relu(env.lostOperand));
        await call('build', () => env.lostBuilder.build({ y: env.lostOperand }));
        return;
      default:
        throw new Error(cmd.what);
    }
  }
}

const ARRAYS = {
  float32: Float32Array, float16: Uint16Array, int32: Int32Array, uint32: Uint32Array,
  int64: BigInt64Array, uint64: BigUint64Array, int8: Int8Array, uint8: Uint8Array, int4: Uint8Array, uint4: Uint8Array,
};
function typed(dt, data) {
  const A = ARRAYS[dt];
  if (A === BigInt64Array || A === BigUint64Array) return A.from(data, (x) => BigInt(Math.trunc(Math.abs(x))));
  if (dt === 'int4' || dt === 'uint4') return new Uint8Array(Math.ceil(data.length / 2));
  if (dt === 'float16') return new Uint16Array(data.length);
  return A.from(data, (x) => (A === Float32Array ? x : Math.trunc(Math.abs(x))));
}
function dtOf(view) {
  const tag = Object.prototype.toString.call(view).slice(8, -1);
  return { Float32Array: 'float32', Uint16Array: 'float16', Int32Array: 'int32', Uint32Array: 'uint32', BigInt64Array: 'int64', BigUint64Array: 'uint64', Int8Array: 'int8', Uint8Array: 'uint8' }[tag];
}

/** Objects of another builder and of another context, made once. */
async function environment() {
  const ctx = await ml.createContext({ deviceType: DEVICE });
  const other = new MLGraphBuilder(ctx);
  const otherOperand = other.input('o', { dataType: 'float32', shape: [2, 3] });
  const foreign = await ml.createContext({ deviceType: 'cpu' });
  const fb = new MLGraphBuilder(foreign);
  const foreignOperand = fb.input('f', { dataType: 'float32', shape: [2, 3] });
  const foreignGraph = await fb.build({ y: fb.relu(foreignOperand) });
  const foreignTensor = await foreign.createTensor({ dataType: 'float32', shape: [2, 3], readable: true, writable: true });
  const destroyedTensor = await ctx.createTensor({ dataType: 'float32', shape: [2, 3], readable: true });
  destroyedTensor.destroy();
  const lostCtx = await ml.createContext({ deviceType: 'cpu' });
  const lostBuilder = new MLGraphBuilder(lostCtx);
  const lostOperand = lostBuilder.input('l', { dataType: 'float32', shape: [2] });
  lostCtx.destroy();
  return { ctx, otherOperand, foreignOperand, foreignGraph, foreignTensor, destroyedTensor, lostBuilder, lostOperand, lost: false };
}

async function main() {
  const env = await environment();
  const started = Date.now();
  const params = { seed: SEED, numRuns: RUNS, endOnFailure: true, verbose: 0 };
  if (PATH !== undefined) params.path = PATH;
  let report;
  try {
    await fc.assert(
      fc.asyncProperty(plan, async (cmds) => {
        runIndex++;
        process.stderr.write(`run ${runIndex}\n`);
        if (env.lost) {
          env.ctx = await ml.createContext({ deviceType: DEVICE });
          env.lost = false;
        }
        const before = failures.length;
        const run = new Run(env);
        try {
          for (const cmd of cmds) {
            if (process.env.WEBNN_FUZZ_TRACE) process.stderr.write(`step ${JSON.stringify(cmd)}\n`);
            run.current = cmd;
            await run.step(cmd);
          }
        } catch (e) {
          // A defect of this harness, not of the API: reported the same.
          fail('harness', `${run.current && JSON.stringify(run.current)}: ${e && e.stack}`);
        }
        for (const t of run.tensors) t.destroy();
        for (const g of run.graphs) g.destroy();
        return KEEP_GOING || failures.length === before;
      }),
      params,
    );
  } catch (e) {
    // The seed and path that replay the failing run.
    report = String(e.message).split('\n').slice(0, 2).join(' ');
  }
  const summary = {
    device: DEVICE,
    seed: SEED,
    runs: runIndex + 1,
    calls,
    ms: Date.now() - started,
    rssMB: Math.round(process.memoryUsage().rss / 2 ** 20),
    outcomes: counts,
    failures: failures.slice(0, 20),
    report,
  };
  console.log(JSON.stringify(summary));
  env.ctx.destroy();
}

main().catch((e) => {
  console.log(JSON.stringify({ device: DEVICE, seed: SEED, fatal: `${e && e.stack}` }));
  process.exitCode = 1;
});

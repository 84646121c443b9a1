#!/usr/bin/env node
'use strict';
// WebNN conformance runner for the JSON test vectors in shared/wpt-vectors
// (data extracted from the web-platform-tests WebNN conformance tests).
//
// The procedure (support-limit pre-check, graph building, tensor I/O and the
// comparison rules) follows the README.md that ships with the vectors. Every
// case that throws, is rejected by the pre-check, has a wrong output
// descriptor or wrong values is a failure; nothing is skipped.
//
// Library use:
//   const { runConformance } = require('./scripts/conformance');
//   const report = await runConformance({ deviceType: 'cpu' });
//
// CLI:
//   node scripts/conformance.js [--device cpu|gpu] [--verbose] [file-filter]

const fs = require('fs');
const path = require('path');

const DEFAULT_DIR =
  process.env.WEBNN_WPT_VECTORS || path.join(__dirname, '..', '..', 'shared', 'wpt-vectors');

// A case that does not settle within this time fails (and the context is
// replaced, in case it is stuck).
const CASE_TIMEOUT_MS = 60000;

// ---------------------------------------------------------------------------
// Value decoding

const SPECIAL_FLOATS = {
  NaN: NaN,
  Infinity: Infinity,
  '-Infinity': -Infinity,
  '-0': -0,
};

function toNumber(v) {
  if (typeof v === 'number') return v;
  if (typeof v === 'string' && Object.prototype.hasOwnProperty.call(SPECIAL_FLOATS, v)) {
    return SPECIAL_FLOATS[v];
  }
  if (typeof v === 'string') return Number(v);
  if (typeof v === 'bigint') return Number(v);
  if (typeof v === 'boolean') return v ? 1 : 0;
  throw new TypeError(`unexpected data value ${JSON.stringify(v)}`);
}

function toBigInt(v) {
  if (typeof v === 'bigint') return v;
  if (typeof v === 'string') return BigInt(v);
  if (typeof v === 'number') {
    if (!Number.isInteger(v)) throw new RangeError(`non-integer 64-bit value ${v}`);
    return BigInt(v);
  }
  throw new TypeError(`unexpected 64-bit value ${JSON.stringify(v)}`);
}

function elementCount(shape) {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** The element values of an operand, repeated if `data` is a single value. */
function expandValues(values, count) {
  if (Array.isArray(values)) {
    if (values.length !== count) {
      throw new Error(`data has ${values.length} elements, shape needs ${count}`);
    }
    return values;
  }
  return new Array(count).fill(values);
}

/** The typed array WPT writes for an input/constant operand. */
function makeTypedArray(operand) {
  const { dataType, shape } = operand.descriptor;
  const count = elementCount(shape);
  switch (dataType) {
    case 'float32':
      return Float32Array.from(expandValues(operand.data, count), toNumber);
    case 'float16': {
      if (operand.float16Bits === undefined) {
        throw new Error('float16 operand without float16Bits');
      }
      return Uint16Array.from(expandValues(operand.float16Bits, count));
    }
    case 'int64':
      return BigInt64Array.from(expandValues(operand.data, count), (v) => BigInt.asIntN(64, toBigInt(v)));
    case 'uint64':
      return BigUint64Array.from(expandValues(operand.data, count), (v) => BigInt.asUintN(64, toBigInt(v)));
    case 'int32':
      return Int32Array.from(expandValues(operand.data, count), toNumber);
    case 'uint32':
      return Uint32Array.from(expandValues(operand.data, count), toNumber);
    case 'int8':
      return Int8Array.from(expandValues(operand.data, count), toNumber);
    case 'uint8':
      return Uint8Array.from(expandValues(operand.data, count), toNumber);
    case 'int4':
    case 'uint4': {
      const values = expandValues(operand.data, count);
      const bytes = new Uint8Array(Math.ceil(count / 2));
      for (let i = 0; i < count; i++) {
        const nibble = toNumber(values[i]) & 0xf;
        bytes[i >> 1] |= i & 1 ? nibble << 4 : nibble;
      }
      return bytes;
    }
    default:
      throw new TypeError(`unsupported data type ${dataType}`);
  }
}

/** One value per element of an output buffer (raw patterns for float16). */
function readOutput(buffer, dataType, count) {
  const ab = buffer instanceof ArrayBuffer ? buffer : buffer.buffer;
  const byteOffset = buffer instanceof ArrayBuffer ? 0 : buffer.byteOffset;
  const byteLength = buffer.byteLength;
  const bytesNeeded = {
    float32: 4 * count,
    float16: 2 * count,
    int64: 8 * count,
    uint64: 8 * count,
    int32: 4 * count,
    uint32: 4 * count,
    int8: count,
    uint8: count,
    int4: Math.ceil(count / 2),
    uint4: Math.ceil(count / 2),
  }[dataType];
  if (bytesNeeded === undefined) throw new TypeError(`unsupported output data type ${dataType}`);
  if (byteLength < bytesNeeded) {
    throw new Error(`readTensor returned ${byteLength} bytes, expected ${bytesNeeded}`);
  }
  const copy = ab.slice(byteOffset, byteOffset + bytesNeeded);
  switch (dataType) {
    case 'float32':
      return { values: new Float32Array(copy), bits: new Uint32Array(copy) };
    case 'float16':
      return { values: new Uint16Array(copy) };
    case 'int64':
      return { values: new BigInt64Array(copy) };
    case 'uint64':
      return { values: new BigUint64Array(copy) };
    case 'int32':
      return { values: new Int32Array(copy) };
    case 'uint32':
      return { values: new Uint32Array(copy) };
    case 'int8':
      return { values: new Int8Array(copy) };
    case 'uint8':
      return { values: new Uint8Array(copy) };
    case 'int4':
    case 'uint4': {
      const bytes = new Uint8Array(copy);
      const out = new Array(count);
      for (let i = 0; i < count; i++) {
        let nibble = (bytes[i >> 1] >> (i & 1 ? 4 : 0)) & 0xf;
        if (dataType === 'int4' && nibble >= 8) nibble -= 16;
        out[i] = nibble;
      }
      return { values: out };
    }
    default:
      throw new TypeError(`unsupported output data type ${dataType}`);
  }
}

// ---------------------------------------------------------------------------
// Comparison

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** K(x) for a double: signed magnitude of the float32 nearest to |x|. */
function float32Key(x) {
  f32[0] = Math.abs(x);
  let mag = u32[0];
  if (Number.isNaN(x)) mag = 0x7fc00000;
  mag &= 0x7fffffff;
  return x < 0 ? -mag : mag;
}

/** K(actual) from the raw pattern of the output element. */
function float32KeyFromBits(bits, value) {
  const mag = bits & 0x7fffffff;
  return value < 0 ? -mag : mag;
}

/** The exact real value of a float16 bit pattern. */
function float16ToNumber(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  if (exp === 0) return sign * mant * 2 ** -24;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

function formatExpected(v) {
  return typeof v === 'string' ? v : formatValue('', v);
}

function formatValue(dataType, v) {
  if (dataType === 'float16' && typeof v === 'number') {
    return `${float16ToNumber(v)} (0x${v.toString(16).padStart(4, '0')})`;
  }
  if (typeof v === 'bigint') return `${v}n`;
  if (Object.is(v, -0)) return '-0';
  return String(v);
}

/**
 * Compares one output against its expectation. Returns null when it passes,
 * else a message describing the first mismatches.
 */
function compareOutput(outputName, expected, output, tolerance) {
  const { dataType, shape } = expected.descriptor;
  const count = elementCount(shape);
  const scalar = !Array.isArray(expected.data);
  const checked = scalar && count > 1 ? Math.min(1000, count) : count;
  if (!scalar && expected.data.length !== count) {
    return `${outputName}: expected data has ${expected.data.length} elements for shape [${shape}]`;
  }
  const pick = (arr, i) => (Array.isArray(arr) ? arr[i] : arr);
  const metric = tolerance.metricType;
  const limit = tolerance.value;
  const mismatches = [];
  let mismatchCount = 0;
  let worst = 0;

  for (let i = 0; i < checked; i++) {
    const rawExpected = pick(expected.data, i);
    const actual = output.values[i];
    let ok;
    let distance;
    if (metric === 'ATOL') {
      let a;
      if (dataType === 'float16') a = float16ToNumber(actual);
      else if (typeof actual === 'bigint') a = Number(actual);
      else a = actual;
      const e = toNumber(rawExpected);
      distance = Math.abs(a - e);
      ok = distance <= limit;
    } else if (metric === 'ULP') {
      switch (dataType) {
        case 'float32': {
          const e = toNumber(rawExpected);
          if (actual === e) {
            ok = true;
            distance = 0;
          } else {
            distance = Math.abs(float32KeyFromBits(output.bits[i], actual) - float32Key(e));
            ok = distance <= limit;
          }
          break;
        }
        case 'float16': {
          const e = toNumber(rawExpected);
          const h = pick(expected.float16Bits, i);
          if (actual === e) {
            ok = true;
            distance = 0;
          } else {
            distance = (actual & 0x7fff) === 0 && (h & 0x7fff) === 0 ? 0 : Math.abs(actual - h);
            ok = distance <= limit;
          }
          break;
        }
        case 'int64':
        case 'uint64': {
          const e = toBigInt(rawExpected);
          const d = actual > e ? actual - e : e - actual;
          distance = Number(d);
          ok = d <= BigInt(limit);
          break;
        }
        default: {
          const e = toNumber(rawExpected);
          distance = Math.abs(actual - e);
          ok = distance <= limit;
        }
      }
    } else {
      return `unknown tolerance metric ${metric}`;
    }
    if (!ok) {
      mismatchCount++;
      if (!(distance <= worst)) worst = distance;
      if (mismatches.length < 4) {
        mismatches.push(
          `[${i}] expected ${formatExpected(rawExpected)}` +
            (dataType === 'float16' ? ` (0x${pick(expected.float16Bits, i).toString(16)})` : '') +
            ` got ${formatValue(dataType, actual)}`,
        );
      }
    }
  }
  if (mismatchCount === 0) return null;
  return (
    `${outputName}: ${mismatchCount} of ${checked} elements off (${metric} ${limit}, ` +
    `worst distance ${worst}): ${mismatches.join(', ')}`
  );
}

// ---------------------------------------------------------------------------
// Tolerance for `tolerance: null` (generic precision tolerance of the whole
// graph, which needs intermediate operand shapes).

const FIXED_TOLERANCE = {
  batchNormalization: [6, 6],
  clamp: [0, 0],
  elu: [18, 18],
  gelu: [18, 18],
  hardSigmoid: [2, 2],
  hardSwish: [4, 4],
  leakyRelu: [1, 2],
  linear: [2, 2],
  prelu: [1, 1],
  relu: [0, 0],
  reshape: [0, 0],
  sigmoid: [34, 10],
  softplus: [18, 18],
  softsign: [3, 3],
};

/** The positional argument values of an operator (holes skipped). */
function flatArguments(op) {
  const out = [];
  for (const arg of op.arguments) {
    if (arg === null || arg === undefined) continue;
    for (const [key, value] of Object.entries(arg)) out.push({ key, value });
  }
  return out;
}

function computeGraphTolerance(testCase, shapeOf) {
  const outputs = testCase.graph.expectedOutputs;
  const firstType = outputs[Object.keys(outputs)[0]].descriptor.dataType;
  if (firstType !== 'float32' && firstType !== 'float16') {
    throw new Error(`null tolerance with output type ${firstType}`);
  }
  let total = 0;
  for (const op of testCase.graph.operators) {
    const args = flatArguments(op);
    const options = (args.find((a) => a.key === 'options') || {}).value || {};
    switch (op.name) {
      case 'conv2d':
      case 'convTranspose2d': {
        const inputShape = shapeOf(args[0].value);
        const filterShape = shapeOf(args[1].value);
        const channels = options.inputLayout === 'nhwc' ? inputShape[3] : inputShape[1];
        const groups = options.groups === undefined ? 1 : options.groups;
        let kh;
        let kw;
        const layout = options.filterLayout || (op.name === 'conv2d' ? 'oihw' : 'iohw');
        if (layout === 'oihw' || layout === 'iohw') {
          [kh, kw] = [filterShape[2], filterShape[3]];
        } else if (layout === 'hwio' || layout === 'hwoi') {
          [kh, kw] = [filterShape[0], filterShape[1]];
        } else {
          [kh, kw] = [filterShape[1], filterShape[2]];
        }
        total += 2 * kh * kw * (channels / groups);
        break;
      }
      case 'gemm': {
        const aShape = shapeOf(args[0].value);
        const k = options.aTranspose ? aShape[0] : aShape[1];
        let amount = 2 * k;
        if (options.alpha !== undefined && options.alpha !== 1) amount += 1;
        if (options.c !== undefined && options.beta !== 0) amount += 1;
        if (options.beta !== undefined && options.beta !== 1) amount += 1;
        total += amount;
        break;
      }
      case 'softmax': {
        const entries = op.arguments.length;
        const axis = entries === 2 ? Object.values(op.arguments[1])[0] : 1;
        total += 3 * shapeOf(args[0].value)[axis] + 3;
        break;
      }
      default: {
        const row = FIXED_TOLERANCE[op.name];
        if (row) total += firstType === 'float32' ? row[0] : row[1];
      }
    }
  }
  return { metricType: 'ULP', value: total };
}

// ---------------------------------------------------------------------------
// opSupportLimits pre-check

function dataTypesOf(limitsEntry) {
  if (!limitsEntry) return null;
  if (Array.isArray(limitsEntry)) return limitsEntry;
  if (Array.isArray(limitsEntry.dataTypes)) return limitsEntry.dataTypes;
  return null;
}

/** Returns null when the limits allow the case, else the reason. */
function checkSupportLimits(testCase, limits) {
  const inputs = testCase.graph.inputs;
  const expectedOutputs = testCase.graph.expectedOutputs;
  const checkOperand = (opName, key, name, allowed) => {
    if (typeof name !== 'string' || !Object.prototype.hasOwnProperty.call(inputs, name)) return null;
    const input = inputs[name];
    const type = input.descriptor.dataType;
    if (!allowed || !allowed.includes(type)) {
      return `${opName}.${key} does not support ${type} (operand ${name})`;
    }
    const kind = input.constant ? 'constant' : 'input';
    const general = dataTypesOf(limits[kind]);
    if (!general || !general.includes(type)) {
      return `${kind} does not support ${type} (operand ${name})`;
    }
    return null;
  };

  for (const op of testCase.graph.operators) {
    const opLimits = limits[op.name];
    if (!opLimits) return `opSupportLimits() has no entry for ${op.name}`;
    const args = flatArguments(op);
    const byKey = new Map();
    for (const { key, value } of args) {
      if (key === 'options' && value && typeof value === 'object' && !Array.isArray(value)) {
        for (const [optKey, optValue] of Object.entries(value)) {
          if (!byKey.has(optKey)) byKey.set(optKey, optValue);
        }
      } else if (!byKey.has(key)) {
        byKey.set(key, value);
      }
    }
    for (const key of Object.keys(opLimits)) {
      // Output limits: output, outputs (split), output0, output1... (gru, lstm, lstmCell).
      if (/^outputs?\d*$/.test(key)) continue;
      if (!byKey.has(key)) continue;
      const allowed = dataTypesOf(opLimits[key]);
      const value = byKey.get(key);
      const names = Array.isArray(value) ? value : [value];
      for (const name of names) {
        const problem = checkOperand(op.name, key, name, allowed);
        if (problem) return problem;
      }
    }
    const outputNames = Array.isArray(op.outputs) ? op.outputs : [op.outputs];
    for (const [i, name] of outputNames.entries()) {
      if (!Object.prototype.hasOwnProperty.call(expectedOutputs, name)) continue;
      const type = expectedOutputs[name].descriptor.dataType;
      const allowed = dataTypesOf(opLimits[`output${i}`] || opLimits.output || opLimits.outputs);
      if (!allowed || !allowed.includes(type)) {
        return `${op.name} output does not support ${type}`;
      }
      const general = dataTypesOf(limits.output);
      if (!general || !general.includes(type)) return `output does not support ${type}`;
    }
  }
  return null;
}

// ---------------------------------------------------------------------------
// Running one case

function sameShape(a, b) {
  if (!a || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (Number(a[i]) !== b[i]) return false;
  return true;
}

function descriptorOf(input) {
  return { dataType: input.descriptor.dataType, shape: input.descriptor.shape.slice() };
}

function errorMessage(e) {
  if (e && typeof e === 'object') {
    const name = e.name || 'Error';
    return `${name}: ${e.message}`;
  }
  return String(e);
}

async function runCase(context, limits, testCase, webnn) {
  const { MLGraphBuilder } = webnn;
  const graph = testCase.graph;

  if (!testCase.castToSupportedType) {
    const problem = checkSupportLimits(testCase, limits);
    if (problem) return { passed: false, unsupported: true, reason: `opSupportLimits: ${problem}` };
  }

  const builder = new MLGraphBuilder(context);
  const operands = new Map(); // earlier operator outputs and graph inputs
  const inputOperands = new Map(); // non-constant graph inputs, by name

  const operandFor = (name) => {
    if (operands.has(name)) return operands.get(name);
    const input = graph.inputs[name];
    if (input.constant) {
      // WPT creates one constant per reference.
      return builder.constant(descriptorOf(input), makeTypedArray(input));
    }
    const operand = builder.input(name, descriptorOf(input));
    inputOperands.set(name, operand);
    return operand;
  };
  const isOperandName = (v) =>
    typeof v === 'string' &&
    (operands.has(v) || Object.prototype.hasOwnProperty.call(graph.inputs, v));
  const resolve = (v) => (isOperandName(v) ? operandFor(v) : v);

  for (const op of graph.operators) {
    const args = [];
    for (const { key, value } of flatArguments(op)) {
      if (key === 'options' && value && typeof value === 'object' && !Array.isArray(value)) {
        const options = {};
        for (const [k, v] of Object.entries(value)) options[k] = resolve(v);
        args.push(options);
      } else if (
        key === 'inputs' &&
        Array.isArray(value) &&
        testCase.graphBuilder === 'buildAndExecuteGraphWithConcat'
      ) {
        args.push(value.map((name) => operandFor(name)));
      } else {
        args.push(resolve(value));
      }
    }
    if (typeof builder[op.name] !== 'function') {
      throw new TypeError(`MLGraphBuilder has no operator ${op.name}`);
    }
    const result = builder[op.name](...args);
    if (Array.isArray(op.outputs)) {
      if (!Array.isArray(result) || result.length < op.outputs.length) {
        throw new Error(`${op.name} returned ${Array.isArray(result) ? result.length : 'no array of'} operands`);
      }
      op.outputs.forEach((name, i) => operands.set(name, result[i]));
    } else {
      operands.set(op.outputs, result);
    }
  }

  // Output descriptors.
  const outputNames = Object.keys(graph.expectedOutputs);
  const namedOperands = {};
  for (const name of outputNames) {
    const operand = operands.get(name);
    if (!operand) throw new Error(`no operator produces output ${name}`);
    const expected = graph.expectedOutputs[name].descriptor;
    if (operand.dataType !== expected.dataType) {
      return { passed: false, reason: `${name}: dataType ${operand.dataType}, expected ${expected.dataType}` };
    }
    if (!sameShape(operand.shape, expected.shape)) {
      return {
        passed: false,
        reason: `${name}: shape [${operand.shape}], expected [${expected.shape}]`,
      };
    }
    namedOperands[name] = operand;
  }

  let tolerance = testCase.tolerance;
  if (tolerance === null || tolerance === undefined) {
    const shapeOf = (name) => {
      if (Object.prototype.hasOwnProperty.call(graph.inputs, name)) return graph.inputs[name].descriptor.shape;
      const operand = operands.get(name);
      if (!operand) throw new Error(`unknown operand ${name} for tolerance`);
      return Array.from(operand.shape);
    };
    tolerance = computeGraphTolerance(testCase, shapeOf);
  }

  const mlGraph = await builder.build(namedOperands);

  const inputTensors = {};
  for (const [name] of inputOperands) {
    const input = graph.inputs[name];
    const tensor = await context.createTensor({ ...descriptorOf(input), writable: true });
    context.writeTensor(tensor, makeTypedArray(input));
    inputTensors[name] = tensor;
  }
  const outputTensors = {};
  for (const name of outputNames) {
    const desc = graph.expectedOutputs[name].descriptor;
    outputTensors[name] = await context.createTensor({
      dataType: desc.dataType,
      shape: desc.shape.slice(),
      readable: true,
    });
  }

  context.dispatch(mlGraph, inputTensors, outputTensors);

  const problems = [];
  for (const name of outputNames) {
    const expected = graph.expectedOutputs[name];
    const buffer = await context.readTensor(outputTensors[name]);
    const output = readOutput(buffer, expected.descriptor.dataType, elementCount(expected.descriptor.shape));
    const problem = compareOutput(name, expected, output, tolerance);
    if (problem) problems.push(problem);
  }

  for (const t of [...Object.values(inputTensors), ...Object.values(outputTensors)]) {
    if (t && typeof t.destroy === 'function') {
      try {
        t.destroy();
      } catch (_) {
        // ignore
      }
    }
  }
  if (mlGraph && typeof mlGraph.destroy === 'function') {
    try {
      mlGraph.destroy();
    } catch (_) {
      // ignore
    }
  }

  if (problems.length) return { passed: false, reason: problems.join('; ') };
  return { passed: true };
}

function withTimeout(promise, ms) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`case did not finish within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// ---------------------------------------------------------------------------
// Public API

function listFiles(dir, files) {
  let names = fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.json') && f !== 'index.json')
    .sort();
  if (files !== undefined && files !== null) {
    if (typeof files === 'function') {
      names = names.filter(files);
    } else if (files instanceof RegExp) {
      names = names.filter((f) => files.test(f));
    } else if (typeof files === 'string') {
      names = names.filter((f) => f.includes(files));
    } else if (Array.isArray(files)) {
      const wanted = new Set(files.map((f) => (f.endsWith('.json') ? f : `${f}.json`)));
      names = names.filter((f) => wanted.has(f));
    }
  }
  return names;
}

/** The operator names a case uses. */
function caseOperators(testCase) {
  return [...new Set(testCase.graph.operators.map((op) => op.name))];
}

/** Data types of every input and expected output of a case. */
function caseDataTypes(testCase) {
  const types = new Set();
  for (const o of Object.values(testCase.graph.inputs)) types.add(o.descriptor.dataType);
  for (const o of Object.values(testCase.graph.expectedOutputs)) types.add(o.descriptor.dataType);
  return [...types];
}

/**
 * Runs every case of every vector file.
 *
 * @param {object} [opts]
 * @param {'cpu'|'gpu'} [opts.deviceType='cpu']
 * @param {string} [opts.dir] the vectors folder
 * @param {string|string[]|RegExp|Function} [opts.files] which files to run
 *   (substring, list of names, RegExp or predicate on the file name)
 * @param {Function} [opts.onCase] called after each case with
 *   `{ file, name, passed, reason, unsupported, advertised, operators,
 *   dataTypes }`: `unsupported` when the opSupportLimits() pre-check
 *   failed the case, `advertised` when the limits cover the case (computed
 *   even where the pre-check is skipped)
 * @param {object} [opts.webnn] the module to test (default: this package)
 * @returns {Promise<{available, dir, files, total, passed}>}
 */
async function runConformance({ deviceType = 'cpu', dir = DEFAULT_DIR, files, onCase, webnn } = {}) {
  const report = { available: false, dir, deviceType, files: [], total: 0, passed: 0 };
  if (!dir || !fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) return report;
  report.available = true;

  webnn = webnn || require(path.join(__dirname, '..'));
  const { ml } = webnn;

  let context = null;
  let limits = null;
  const newContext = async () => {
    context = await ml.createContext({ deviceType });
    limits = context.opSupportLimits();
  };

  for (const file of listFiles(dir, files)) {
    const content = JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'));
    const cases = content.cases || [];
    const fileReport = { file, total: cases.length, passed: 0, failures: [] };
    report.files.push(fileReport);

    let contextError = null;
    try {
      await newContext();
    } catch (e) {
      context = null;
      limits = null;
      contextError = `createContext({deviceType: '${deviceType}'}) failed: ${errorMessage(e)}`;
    }

    for (const testCase of cases) {
      const info = {
        file,
        name: testCase.name,
        operators: caseOperators(testCase),
        dataTypes: caseDataTypes(testCase),
      };
      // Whether opSupportLimits() covers the case's operators and data types
      // (also computed for castToSupportedType cases, which skip the check).
      info.advertised = !!limits && checkSupportLimits(testCase, limits) === null;
      let outcome;
      if (!context) {
        outcome = { passed: false, reason: contextError };
      } else {
        try {
          outcome = await withTimeout(runCase(context, limits, testCase, webnn), CASE_TIMEOUT_MS);
        } catch (e) {
          outcome = { passed: false, reason: errorMessage(e) };
          if (/did not finish within/.test(outcome.reason)) {
            try {
              await newContext();
            } catch (err) {
              context = null;
              limits = null;
              contextError = `createContext failed: ${errorMessage(err)}`;
            }
          }
        }
      }
      if (outcome.passed) {
        fileReport.passed++;
      } else {
        const failure = { name: testCase.name, reason: outcome.reason, operators: info.operators };
        if (outcome.unsupported) failure.unsupported = true;
        fileReport.failures.push(failure);
      }
      if (onCase) {
        onCase({
          ...info,
          passed: !!outcome.passed,
          reason: outcome.passed ? undefined : outcome.reason,
          unsupported: !!outcome.unsupported,
        });
      }
    }
    report.total += fileReport.total;
    report.passed += fileReport.passed;
  }
  return report;
}

/** The per-file table and the total line, as printed by the CLI. */
function formatReport(report, { verbose = false } = {}) {
  const lines = [];
  for (const f of report.files) {
    lines.push(`${f.file}: ${f.passed}/${f.total}`);
    if (verbose) {
      for (const failure of f.failures) lines.push(`  FAIL ${failure.name}: ${failure.reason}`);
    }
  }
  lines.push(`conformance (${report.deviceType}): ${report.passed} of ${report.total} cases passed`);
  return lines.join('\n');
}

function notFoundMessage(dir) {
  return `WPT vectors not found at ${dir}; set WEBNN_WPT_VECTORS`;
}

module.exports = {
  runConformance,
  formatReport,
  notFoundMessage,
  checkSupportLimits,
  computeGraphTolerance,
  compareOutput,
  makeTypedArray,
  readOutput,
  caseOperators,
  caseDataTypes,
  DEFAULT_DIR,
};

// ---------------------------------------------------------------------------
// CLI

async function main(argv) {
  let deviceType = 'cpu';
  let verbose = false;
  let filter;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--device') deviceType = argv[++i];
    else if (a.startsWith('--device=')) deviceType = a.slice('--device='.length);
    else if (a === '--verbose' || a === '-v') verbose = true;
    else if (a === '--help' || a === '-h') {
      console.log('usage: node scripts/conformance.js [--device cpu|gpu] [--verbose] [file-filter]');
      return 0;
    } else filter = a;
  }
  if (deviceType !== 'cpu' && deviceType !== 'gpu') {
    console.error(`unknown device ${deviceType}; use cpu or gpu`);
    return 2;
  }
  const report = await runConformance({ deviceType, files: filter });
  if (!report.available) {
    console.log(notFoundMessage(report.dir));
    return 0;
  }
  console.log(formatReport(report, { verbose }));
  return 0;
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e) => {
      console.error(e && e.stack ? e.stack : e);
      process.exit(1);
    },
  );
}

'use strict';
// A small ONNX writer: the second emitter of the benchmark's workload
// descriptions (bench/workloads.js). It records nodes and initializers in the
// order the description asks for them and encodes a ModelProto with
// onnx-proto, so the model onnxruntime runs is built from exactly the same
// weights as the WebNN graph, without any file or converter in between.

const { onnx } = require('onnx-proto');

// Opset 17 is the first with LayerNormalization; Gelu only arrives in 20, so
// gelu is spelled out with Erf (ORT's optimizer fuses it back at level 'all').
const OPSET = 17;
// IR version 8 is what opset 17 was released with.
const IR_VERSION = 8;

const FLOAT = onnx.TensorProto.DataType.FLOAT;
const INT64 = onnx.TensorProto.DataType.INT64;
const INT32 = onnx.TensorProto.DataType.INT32;
const A = onnx.AttributeProto.AttributeType;

function valueInfo(name, shape) {
  return {
    name,
    type: {
      tensorType: {
        elemType: FLOAT,
        shape: { dim: shape.map((d) => ({ dimValue: d })) },
      },
    },
  };
}

// Little-endian bytes of a typed array (raw_data is little-endian by spec;
// every platform Node runs this benchmark on is little-endian too).
function bytesOf(typed) {
  return new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength);
}

// Attribute values carry their ONNX type explicitly: a number alone cannot
// tell an INT from a FLOAT that happens to be integral.
const ints = (values) => ({ type: A.INTS, ints: values });
const int = (value) => ({ type: A.INT, i: value });
const float = (value) => ({ type: A.FLOAT, f: value });

/**
 * The ONNX emitter. Values are tensor names; the methods mirror the
 * operations the descriptions use (see the interface comment in
 * workloads.js).
 */
class OnnxEmitter {
  constructor(name) {
    this.name = name;
    this.nodes = [];
    this.initializers = [];
    this.inputs = [];
    this.outputs = [];
    this.counter = 0;
  }

  fresh(prefix) {
    this.counter += 1;
    return `${prefix}_${this.counter}`;
  }

  node(opType, inputs, attrs = {}) {
    const output = this.fresh(opType.toLowerCase());
    this.nodes.push({
      opType,
      name: output,
      input: inputs,
      output: [output],
      attribute: Object.entries(attrs).map(([name, typed]) => ({ name, ...typed })),
    });
    return output;
  }

  initializer(dims, dataType, typed) {
    const name = this.fresh('w');
    this.initializers.push({ name, dims, dataType, rawData: bytesOf(typed) });
    return name;
  }

  // --- the description interface ---

  input(name, shape) {
    this.inputs.push(valueInfo(name, shape));
    return name;
  }

  constant(shape, data) {
    return this.initializer(shape, FLOAT, data);
  }

  output(name, value, shape) {
    // Rename through Identity so the graph output has the description's name;
    // ORT removes the Identity when it optimizes.
    this.nodes.push({ opType: 'Identity', name, input: [value], output: [name], attribute: [] });
    this.outputs.push(valueInfo(name, shape));
  }

  add(a, b) {
    return this.node('Add', [a, b]);
  }

  mul(a, b) {
    return this.node('Mul', [a, b]);
  }

  matmul(a, b) {
    return this.node('MatMul', [a, b]);
  }

  gemm(a, b, c) {
    return this.node('Gemm', c === undefined ? [a, b] : [a, b, c]);
  }

  // pads: [top, bottom, left, right] (WebNN's order); ONNX wants all the
  // beginnings first: [top, left, bottom, right].
  conv2d(x, w, bias, { strides = [1, 1], pads = [0, 0, 0, 0], groups = 1, kernel }) {
    const inputs = bias === undefined ? [x, w] : [x, w, bias];
    return this.node('Conv', inputs, {
      kernel_shape: ints(kernel),
      strides: ints(strides),
      pads: ints([pads[0], pads[2], pads[1], pads[3]]),
      group: int(groups),
    });
  }

  clamp(x, lo, hi) {
    // Clip takes its bounds as scalar inputs since opset 11.
    const min = this.constant([], new Float32Array([lo]));
    const max = this.constant([], new Float32Array([hi]));
    return this.node('Clip', [x, min, max]);
  }

  softmax(x, axis) {
    return this.node('Softmax', [x], { axis: int(axis) });
  }

  reshape(x, shape) {
    const target = this.initializer([shape.length], INT64, BigInt64Array.from(shape, BigInt));
    return this.node('Reshape', [x, target]);
  }

  transpose(x, perm) {
    return this.node('Transpose', [x], { perm: ints(perm) });
  }

  globalAveragePool(x) {
    return this.node('GlobalAveragePool', [x]);
  }

  // Normalizes the last axis (the only form the descriptions use).
  layerNorm(x, scale, bias, epsilon) {
    return this.node('LayerNormalization', [x, scale, bias], { axis: int(-1), epsilon: float(epsilon) });
  }

  // gelu(x) = 0.5 * x * (1 + erf(x / sqrt(2))), the exact form WebNN specifies.
  gelu(x) {
    const invSqrt2 = this.constant([], new Float32Array([Math.SQRT1_2]));
    const one = this.constant([], new Float32Array([1]));
    const half = this.constant([], new Float32Array([0.5]));
    const erf = this.node('Erf', [this.node('Mul', [x, invSqrt2])]);
    return this.node('Mul', [this.node('Mul', [x, this.node('Add', [erf, one])]), half]);
  }

  relu(x) {
    return this.node('Relu', [x]);
  }

  maxPool2d(x, { window, strides = [1, 1], pads = [0, 0, 0, 0], ceil = false }) {
    return this.node('MaxPool', [x], {
      kernel_shape: ints(window),
      strides: ints(strides),
      pads: ints([pads[0], pads[2], pads[1], pads[3]]),
      ceil_mode: int(ceil ? 1 : 0),
    });
  }

  concat(values, axis) {
    return this.node('Concat', values, { axis: int(axis) });
  }

  // --- used by the sentence-embedding model (examples/lib/sentence-bert.js) ---

  // An int32 input (token ids).
  intInput(name, shape) {
    this.inputs.push({
      name,
      type: { tensorType: { elemType: INT32, shape: { dim: shape.map((d) => ({ dimValue: d })) } } },
    });
    return name;
  }

  sub(a, b) {
    return this.node('Sub', [a, b]);
  }

  div(a, b) {
    return this.node('Div', [a, b]);
  }

  max(a, b) {
    return this.node('Max', [a, b]);
  }

  sqrt(x) {
    return this.node('Sqrt', [x]);
  }

  // Rows of `table` picked by `indices` (axis 0).
  gather(table, indices) {
    return this.node('Gather', [table, indices], { axis: int(0) });
  }

  // ReduceSum takes its axes as an input since opset 13.
  reduceSum(x, axes, keepDims) {
    const target = this.initializer([axes.length], INT64, BigInt64Array.from(axes, BigInt));
    return this.node('ReduceSum', [x, target], { keepdims: int(keepDims ? 1 : 0) });
  }

  // ReduceMax keeps its axes attribute until opset 18.
  reduceMax(x, axes, keepDims) {
    return this.node('ReduceMax', [x], { axes: ints(axes), keepdims: int(keepDims ? 1 : 0) });
  }

  // WebNN's (starts, sizes) as ONNX's starts and ends, every axis listed.
  slice(x, starts, sizes) {
    const i64 = (values) => this.initializer([values.length], INT64, BigInt64Array.from(values, BigInt));
    const ends = starts.map((s, i) => s + sizes[i]);
    return this.node('Slice', [x, i64(starts), i64(ends), i64(starts.map((_, i) => i))]);
  }

  /** The encoded model, ready for InferenceSession.create. */
  encode() {
    const model = onnx.ModelProto.fromObject({
      irVersion: IR_VERSION,
      producerName: 'webnn-node bench',
      opsetImport: [{ domain: '', version: OPSET }],
      graph: {
        name: this.name,
        node: this.nodes,
        initializer: this.initializers,
        input: this.inputs,
        output: this.outputs,
      },
    });
    return onnx.ModelProto.encode(model).finish();
  }
}

module.exports = { OnnxEmitter, OPSET };

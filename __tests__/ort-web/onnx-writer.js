'use strict';
// A small ONNX model writer for the onnxruntime-web tests: any element type,
// nodes with several outputs, optional inputs left empty, and value names
// chosen by the caller (so the tests can use names like "gpu_0/data_0" or
// "5", which ORT hands to WebNN verbatim). Models are encoded with
// onnx-proto; nothing is read from or written to disk.

const { onnx } = require('onnx-proto');

const DT = onnx.TensorProto.DataType;
const A = onnx.AttributeProto.AttributeType;

/** ONNX element type of each tensor type name the tests use. */
const ELEM = {
  float32: DT.FLOAT,
  float16: DT.FLOAT16,
  int64: DT.INT64,
  int32: DT.INT32,
  uint8: DT.UINT8,
  bool: DT.BOOL,
};

/** Attribute helpers: a number alone cannot tell an INT from a FLOAT. */
const attr = {
  int: (i) => ({ type: A.INT, i }),
  ints: (ints) => ({ type: A.INTS, ints }),
  float: (f) => ({ type: A.FLOAT, f }),
  floats: (floats) => ({ type: A.FLOATS, floats }),
  string: (s) => ({ type: A.STRING, s: Buffer.from(s) }),
  strings: (strings) => ({ type: A.STRINGS, strings: strings.map((s) => Buffer.from(s)) }),
};

function valueInfo(name, type, shape) {
  return {
    name,
    type: {
      tensorType: {
        elemType: ELEM[type],
        shape: { dim: shape.map((d) => (typeof d === 'string' ? { dimParam: d } : { dimValue: d })) },
      },
    },
  };
}

// Little-endian bytes of a typed array (raw_data is little-endian by the
// ONNX spec, as is every platform these tests run on).
function bytesOf(typed) {
  return new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength);
}

class OnnxWriter {
  /** @param {number} opset the default domain's opset */
  constructor(name, opset = 17) {
    this.name = name;
    this.opset = opset;
    this.nodes = [];
    this.initializers = [];
    this.inputs = [];
    this.outputs = [];
    this.counter = 0;
    // Operator set domains other than the default one that nodes use
    // ('com.microsoft' for ORT's contrib operators), with their versions.
    this.domains = new Map();
  }

  fresh(prefix) {
    this.counter += 1;
    return `${prefix}_${this.counter}`;
  }

  /** A graph input. `shape` entries are numbers or symbolic names. */
  input(name, type, shape) {
    this.inputs.push(valueInfo(name, type, shape));
    return name;
  }

  /** A graph output (an existing value). */
  output(name, type, shape) {
    this.outputs.push(valueInfo(name, type, shape));
    return name;
  }

  /**
   * An initializer from a typed array (`float16` data as Uint16Array bit
   * patterns, `bool` as Uint8Array of 0/1).
   */
  constant(type, dims, typed, name = this.fresh('w')) {
    this.initializers.push({ name, dims, dataType: ELEM[type], rawData: bytesOf(typed) });
    return name;
  }

  /**
   * A node. `outputs` is a number (that many fresh names) or an array of
   * names; returns the output names (one name when there is one output).
   * An input given as '' is an omitted optional input. `domain` names
   * the operator's set (version 1) when it is not the default one.
   */
  node(opType, inputs, attrs = {}, outputs = 1, domain = '') {
    const names =
      typeof outputs === 'number'
        ? Array.from({ length: outputs }, () => this.fresh(opType.toLowerCase()))
        : outputs;
    if (domain) this.domains.set(domain, 1);
    this.nodes.push({
      opType,
      domain,
      name: this.fresh(`n_${opType}`),
      input: inputs,
      output: names,
      attribute: Object.entries(attrs).map(([n, typed]) => ({ name: n, ...typed })),
    });
    return names.length === 1 ? names[0] : names;
  }

  /** The encoded ModelProto (a Uint8Array). */
  encode() {
    const model = onnx.ModelProto.fromObject({
      // IR version 8 goes with opset 17, 9 with 19..20.
      irVersion: this.opset >= 19 ? 9 : 8,
      producerName: 'webnn-node tests',
      opsetImport: [
        { domain: '', version: this.opset },
        ...[...this.domains].map(([domain, version]) => ({ domain, version })),
      ],
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

module.exports = { OnnxWriter, attr };

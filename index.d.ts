// Type definitions for webnn-node: the W3C Web Neural Network API
// (webmachinelearning/webnn) for Node.js, plus the extensions documented in
// README.md (compute, computeSync, numThreads).

export type MLDeviceType = 'cpu' | 'gpu';
export type MLPowerPreference = 'default' | 'high-performance' | 'low-power';
export type MLOperandDataType =
  | 'float32'
  | 'float16'
  | 'int32'
  | 'uint32'
  | 'int64'
  | 'uint64'
  | 'int8'
  | 'uint8'
  | 'int4'
  | 'uint4';
export type MLInputOperandLayout = 'nchw' | 'nhwc';
export type MLConv2dFilterOperandLayout = 'oihw' | 'hwio' | 'ohwi' | 'ihwo';
export type MLRoundingType = 'floor' | 'ceil';
/** A number, or a BigInt for 64-bit integer values. */
export type MLNumber = number | bigint;

export interface MLContextOptions {
  /** Default 'cpu'. 'gpu' rejects with NotSupportedError when no adapter exists. */
  deviceType?: MLDeviceType;
  powerPreference?: MLPowerPreference;
  /** `true` without a deviceType picks the GPU when one exists, else the CPU. */
  accelerated?: boolean;
  /**
   * Extension: threads used by the CPU backend's kernels (default: all cores,
   * shared). At least 1; clamped to the cores this process may run on.
   */
  numThreads?: number;
  /**
   * Extension (CPU): the most bytes of tensors and intermediates the context
   * may hold at once. Beyond it createTensor rejects with UnknownError and a
   * dispatch errors its output tensors, instead of exhausting the machine.
   */
  memoryLimit?: number;
  /** Extension: named in the `lost` message and in errors. */
  label?: string;
}

/** Extension: options of dispatch(), writeTensor() and build(). */
export interface MLTimelineOptions {
  /** Named in the errors of the operation and of those it propagates to. */
  label?: string;
}

export interface MLOperandDescriptor {
  dataType: MLOperandDataType;
  shape: readonly number[];
}

export interface MLTensorDescriptor extends MLOperandDescriptor {
  readable?: boolean;
  writable?: boolean;
  /** Extension: named in timeline errors; `tensor.label`. */
  label?: string;
}

declare global {
  /**
   * WebGPU's device and buffer. With `@webgpu/types` in the program these
   * merge with its full declarations; without them they stand for any
   * WebGPU's objects (webnn-node reads them at run time, lib/interop.js).
   */
  interface GPUDevice {}
  interface GPUBuffer {}
}

/** WebGPU's GPUBufferUsageFlags: GPUBufferUsage bits. */
export type MLGPUBufferUsageFlags = number;

/** The descriptor of `createExportableTensor()`. */
export interface MLExportableTensorDescriptor extends MLTensorDescriptor {
  /**
   * The usage of the GPUBuffer that `exportToGPU()` gives (COPY_SRC and
   * COPY_DST are always added); default STORAGE | COPY_SRC | COPY_DST.
   * MAP_READ and MAP_WRITE are refused.
   */
  usage?: MLGPUBufferUsageFlags;
}

export interface MLContextLostInfo {
  message: string;
}

export interface MLRankRange {
  min: number;
  max: number;
}

/** The data types and ranks one operand of an operator supports. */
export interface MLTensorLimits {
  dataTypes: MLOperandDataType[];
  rankRange: MLRankRange;
}

/** Operators with one input and one output. */
export interface MLSingleInputSupportLimits {
  input: MLTensorLimits;
  output: MLTensorLimits;
}

/** Element-wise binary operators, comparisons, logicalAnd/Or/Xor, matmul. */
export interface MLBinarySupportLimits {
  a: MLTensorLimits;
  b: MLTensorLimits;
  output: MLTensorLimits;
}

export interface MLLogicalNotSupportLimits {
  a: MLTensorLimits;
  output: MLTensorLimits;
}

export interface MLBatchNormalizationSupportLimits {
  input: MLTensorLimits;
  mean: MLTensorLimits;
  variance: MLTensorLimits;
  scale: MLTensorLimits;
  bias: MLTensorLimits;
  output: MLTensorLimits;
}

export interface MLConcatSupportLimits {
  inputs: MLTensorLimits;
  output: MLTensorLimits;
}

/** conv2d and convTranspose2d. */
export interface MLConv2dSupportLimits {
  input: MLTensorLimits;
  filter: MLTensorLimits;
  bias: MLTensorLimits;
  output: MLTensorLimits;
}

/** gather, gatherElements, gatherND. */
export interface MLGatherSupportLimits {
  input: MLTensorLimits;
  indices: MLTensorLimits;
  output: MLTensorLimits;
}

/** scatterElements, scatterND. */
export interface MLScatterSupportLimits {
  input: MLTensorLimits;
  indices: MLTensorLimits;
  updates: MLTensorLimits;
  output: MLTensorLimits;
}

export interface MLGemmSupportLimits {
  a: MLTensorLimits;
  b: MLTensorLimits;
  c: MLTensorLimits;
  output: MLTensorLimits;
}

/** gru: output0 is the last hidden state, output1 the sequence (returnSequence). */
export interface MLGruSupportLimits {
  input: MLTensorLimits;
  weight: MLTensorLimits;
  recurrentWeight: MLTensorLimits;
  bias: MLTensorLimits;
  recurrentBias: MLTensorLimits;
  initialHiddenState: MLTensorLimits;
  output0: MLTensorLimits;
  output1: MLTensorLimits;
}

export interface MLGruCellSupportLimits {
  input: MLTensorLimits;
  weight: MLTensorLimits;
  recurrentWeight: MLTensorLimits;
  hiddenState: MLTensorLimits;
  bias: MLTensorLimits;
  recurrentBias: MLTensorLimits;
  output: MLTensorLimits;
}

/** lstm: output0/output1 are the last hidden and cell states, output2 the sequence. */
export interface MLLstmSupportLimits {
  input: MLTensorLimits;
  weight: MLTensorLimits;
  recurrentWeight: MLTensorLimits;
  bias: MLTensorLimits;
  recurrentBias: MLTensorLimits;
  peepholeWeight: MLTensorLimits;
  initialHiddenState: MLTensorLimits;
  initialCellState: MLTensorLimits;
  output0: MLTensorLimits;
  output1: MLTensorLimits;
  output2: MLTensorLimits;
}

/** lstmCell: output0 is the new hidden state, output1 the new cell state. */
export interface MLLstmCellSupportLimits {
  input: MLTensorLimits;
  weight: MLTensorLimits;
  recurrentWeight: MLTensorLimits;
  hiddenState: MLTensorLimits;
  cellState: MLTensorLimits;
  bias: MLTensorLimits;
  recurrentBias: MLTensorLimits;
  peepholeWeight: MLTensorLimits;
  output0: MLTensorLimits;
  output1: MLTensorLimits;
}

/** instanceNormalization, layerNormalization. */
export interface MLNormalizationSupportLimits {
  input: MLTensorLimits;
  scale: MLTensorLimits;
  bias: MLTensorLimits;
  output: MLTensorLimits;
}

export interface MLPreluSupportLimits {
  input: MLTensorLimits;
  slope: MLTensorLimits;
  output: MLTensorLimits;
}

export interface MLQuantizeDequantizeLinearSupportLimits {
  input: MLTensorLimits;
  scale: MLTensorLimits;
  zeroPoint: MLTensorLimits;
  output: MLTensorLimits;
}

export interface MLSplitSupportLimits {
  input: MLTensorLimits;
  outputs: MLTensorLimits;
}

export interface MLWhereSupportLimits {
  condition: MLTensorLimits;
  trueValue: MLTensorLimits;
  falseValue: MLTensorLimits;
  output: MLTensorLimits;
}

export interface MLOpSupportLimits {
  preferredInputLayout: MLInputOperandLayout;
  maxTensorByteLength: number;
  input: MLTensorLimits;
  constant: MLTensorLimits;
  output: MLTensorLimits;

  argMin: MLSingleInputSupportLimits;
  argMax: MLSingleInputSupportLimits;
  batchNormalization: MLBatchNormalizationSupportLimits;
  cast: MLSingleInputSupportLimits;
  clamp: MLSingleInputSupportLimits;
  concat: MLConcatSupportLimits;
  conv2d: MLConv2dSupportLimits;
  convTranspose2d: MLConv2dSupportLimits;
  cumulativeSum: MLSingleInputSupportLimits;
  add: MLBinarySupportLimits;
  sub: MLBinarySupportLimits;
  mul: MLBinarySupportLimits;
  div: MLBinarySupportLimits;
  max: MLBinarySupportLimits;
  min: MLBinarySupportLimits;
  pow: MLBinarySupportLimits;
  equal: MLBinarySupportLimits;
  notEqual: MLBinarySupportLimits;
  greater: MLBinarySupportLimits;
  greaterOrEqual: MLBinarySupportLimits;
  lesser: MLBinarySupportLimits;
  lesserOrEqual: MLBinarySupportLimits;
  logicalNot: MLLogicalNotSupportLimits;
  logicalAnd: MLBinarySupportLimits;
  logicalOr: MLBinarySupportLimits;
  logicalXor: MLBinarySupportLimits;
  isNaN: MLSingleInputSupportLimits;
  isInfinite: MLSingleInputSupportLimits;
  abs: MLSingleInputSupportLimits;
  ceil: MLSingleInputSupportLimits;
  cos: MLSingleInputSupportLimits;
  erf: MLSingleInputSupportLimits;
  exp: MLSingleInputSupportLimits;
  floor: MLSingleInputSupportLimits;
  identity: MLSingleInputSupportLimits;
  log: MLSingleInputSupportLimits;
  neg: MLSingleInputSupportLimits;
  reciprocal: MLSingleInputSupportLimits;
  roundEven: MLSingleInputSupportLimits;
  sin: MLSingleInputSupportLimits;
  sign: MLSingleInputSupportLimits;
  sqrt: MLSingleInputSupportLimits;
  tan: MLSingleInputSupportLimits;
  dequantizeLinear: MLQuantizeDequantizeLinearSupportLimits;
  quantizeLinear: MLQuantizeDequantizeLinearSupportLimits;
  elu: MLSingleInputSupportLimits;
  expand: MLSingleInputSupportLimits;
  gather: MLGatherSupportLimits;
  gatherElements: MLGatherSupportLimits;
  gatherND: MLGatherSupportLimits;
  gelu: MLSingleInputSupportLimits;
  gemm: MLGemmSupportLimits;
  gru: MLGruSupportLimits;
  gruCell: MLGruCellSupportLimits;
  hardSigmoid: MLSingleInputSupportLimits;
  hardSwish: MLSingleInputSupportLimits;
  instanceNormalization: MLNormalizationSupportLimits;
  layerNormalization: MLNormalizationSupportLimits;
  leakyRelu: MLSingleInputSupportLimits;
  linear: MLSingleInputSupportLimits;
  lstm: MLLstmSupportLimits;
  lstmCell: MLLstmCellSupportLimits;
  matmul: MLBinarySupportLimits;
  pad: MLSingleInputSupportLimits;
  averagePool2d: MLSingleInputSupportLimits;
  l2Pool2d: MLSingleInputSupportLimits;
  maxPool2d: MLSingleInputSupportLimits;
  prelu: MLPreluSupportLimits;
  reduceL1: MLSingleInputSupportLimits;
  reduceL2: MLSingleInputSupportLimits;
  reduceLogSum: MLSingleInputSupportLimits;
  reduceLogSumExp: MLSingleInputSupportLimits;
  reduceMax: MLSingleInputSupportLimits;
  reduceMean: MLSingleInputSupportLimits;
  reduceMin: MLSingleInputSupportLimits;
  reduceProduct: MLSingleInputSupportLimits;
  reduceSum: MLSingleInputSupportLimits;
  reduceSumSquare: MLSingleInputSupportLimits;
  relu: MLSingleInputSupportLimits;
  resample2d: MLSingleInputSupportLimits;
  reshape: MLSingleInputSupportLimits;
  reverse: MLSingleInputSupportLimits;
  scatterElements: MLScatterSupportLimits;
  scatterND: MLScatterSupportLimits;
  sigmoid: MLSingleInputSupportLimits;
  slice: MLSingleInputSupportLimits;
  softmax: MLSingleInputSupportLimits;
  softplus: MLSingleInputSupportLimits;
  softsign: MLSingleInputSupportLimits;
  split: MLSplitSupportLimits;
  tanh: MLSingleInputSupportLimits;
  tile: MLSingleInputSupportLimits;
  transpose: MLSingleInputSupportLimits;
  triangular: MLSingleInputSupportLimits;
  where: MLWhereSupportLimits;
}

export type MLNamedTensors = Record<string, MLTensor>;
export type MLNamedOperands = Record<string, MLOperand>;
export type MLNamedArrayBufferViews = Record<string, ArrayBufferView>;

export interface MLComputeResult {
  inputs: MLNamedArrayBufferViews;
  outputs: MLNamedArrayBufferViews;
}

export class ML {
  createContext(options?: MLContextOptions): Promise<MLContext>;
  /**
   * A context of the device: accelerated, running graphs on the GPU
   * backend on the same adapter where it can be matched (else the default
   * one). TypeError for what is not a GPUDevice, InvalidStateError for a
   * lost one; the context is lost when the device is.
   */
  createContext(gpuDevice: GPUDevice): Promise<MLContext>;
}

export class MLContext {
  private constructor();
  readonly accelerated: boolean;
  readonly lost: Promise<MLContextLostInfo>;
  /** Extension: the `label` given to createContext. */
  readonly label: string;
  destroy(): void;
  /** `using context = await ml.createContext()` destroys it at the block's end. */
  [Symbol.dispose](): void;
  /**
   * Queues the graph. A dispatch that fails on the timeline, or reads an
   * errored tensor, puts its outputs in an errored state: readTensor of them
   * rejects with OperationError naming the labels involved, until a
   * successful write or dispatch clears them.
   */
  dispatch(graph: MLGraph, inputs: MLNamedTensors, outputs: MLNamedTensors, options?: MLTimelineOptions): void;
  createTensor(descriptor: MLTensorDescriptor): Promise<MLTensor>;
  createConstantTensor(
    descriptor: MLOperandDescriptor,
    data: ArrayBuffer | SharedArrayBuffer | ArrayBufferView,
  ): Promise<MLTensor>;
  readTensor(tensor: MLTensor): Promise<ArrayBuffer>;
  readTensor(tensor: MLTensor, outputData: ArrayBuffer | SharedArrayBuffer | ArrayBufferView): Promise<undefined>;
  writeTensor(
    tensor: MLTensor,
    data: ArrayBuffer | SharedArrayBuffer | ArrayBufferView,
    options?: MLTimelineOptions,
  ): void;
  opSupportLimits(): MLOpSupportLimits;
  /** A tensor that `exportToGPU()` may rent out to `device`. */
  createExportableTensor(descriptor: MLExportableTensorDescriptor, device: GPUDevice): Promise<MLTensor>;
  /**
   * After the WebNN work queued on the tensor, a GPUBuffer of its device
   * holding the tensor's packed bytes (its size padded to a multiple of 4;
   * WGSL reads it as `array<T>`). Until the buffer is destroyed the tensor
   * is rented to the device: dispatch, readTensor and writeTensor of it
   * fail, and exporting it again gives the same buffer. `buffer.destroy()`
   * gives it back with what the GPU last wrote. A copy, not zero-copy.
   */
  exportToGPU(tensor: MLTensor): Promise<GPUBuffer>;
  /**
   * Extension: runs a graph on the caller's views. The input and output
   * ArrayBuffers are detached (transferred) before this returns and handed
   * back, as views of the same types and lengths over new buffers, in the
   * result. Throws TypeError (detaching nothing) for views over a
   * SharedArrayBuffer, views that do not span their whole ArrayBuffer,
   * detached buffers, and buffers shared between arguments.
   */
  compute(graph: MLGraph, inputs: MLNamedArrayBufferViews, outputs: MLNamedArrayBufferViews): Promise<MLComputeResult>;
  /**
   * Extension: blocks the calling thread until the results are written into
   * `outputs` in place (for worker_threads and scripts). Returns `outputs`.
   */
  computeSync(
    graph: MLGraph,
    inputs: MLNamedArrayBufferViews,
    outputs: MLNamedArrayBufferViews,
  ): MLNamedArrayBufferViews;
}

export class MLTensor {
  private constructor();
  readonly dataType: MLOperandDataType;
  readonly shape: number[];
  readonly readable: boolean;
  readonly writable: boolean;
  readonly constant: boolean;
  /** Made by `createExportableTensor()`. */
  readonly exportableToGPU: boolean;
  /** Extension: the descriptor's `label`. */
  readonly label: string;
  destroy(): void;
  [Symbol.dispose](): void;
}

export class MLGraph {
  private constructor();
  destroy(): void;
  [Symbol.dispose](): void;
}

export class MLOperand {
  private constructor();
  readonly dataType: MLOperandDataType;
  readonly shape: number[];
}

export interface MLOperatorOptions {
  label?: string;
}

export interface MLClampOptions extends MLOperatorOptions {
  minValue?: MLNumber;
  maxValue?: MLNumber;
}

export interface MLGemmOptions extends MLOperatorOptions {
  c?: MLOperand;
  alpha?: number;
  beta?: number;
  aTranspose?: boolean;
  bTranspose?: boolean;
}

export interface MLConv2dOptions extends MLOperatorOptions {
  /** [beginning height, ending height, beginning width, ending width] */
  padding?: number[];
  strides?: number[];
  dilations?: number[];
  groups?: number;
  inputLayout?: MLInputOperandLayout;
  filterLayout?: MLConv2dFilterOperandLayout;
  bias?: MLOperand;
}

export interface MLPool2dOptions extends MLOperatorOptions {
  windowDimensions?: number[];
  padding?: number[];
  strides?: number[];
  dilations?: number[];
  layout?: MLInputOperandLayout;
  /** The spec's name since #770; wins over `roundingType` when both are given. */
  outputShapeRounding?: MLRoundingType;
  /** The former name of `outputShapeRounding`, still accepted (clients pass both). */
  roundingType?: MLRoundingType;
  outputSizes?: number[];
}

export interface MLTransposeOptions extends MLOperatorOptions {
  permutation?: number[];
}

export interface MLSliceOptions extends MLOperatorOptions {
  strides?: number[];
}

export class MLGraphBuilder {
  constructor(context: MLContext);
  input(name: string, descriptor: MLOperandDescriptor): MLOperand;
  constant(descriptor: MLOperandDescriptor, buffer: ArrayBuffer | SharedArrayBuffer | ArrayBufferView): MLOperand;
  constant(type: MLOperandDataType, value: MLNumber): MLOperand;
  constant(tensor: MLTensor): MLOperand;
  build(outputs: MLNamedOperands, options?: MLTimelineOptions): Promise<MLGraph>;

  add(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  sub(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  mul(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  div(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  max(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  min(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  pow(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;

  abs(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  neg(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  exp(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  log(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  sqrt(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  relu(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  sigmoid(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  tanh(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  ceil(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  cos(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  erf(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  floor(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  identity(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  reciprocal(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  roundEven(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  sin(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  sign(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  tan(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  clamp(input: MLOperand, options?: MLClampOptions): MLOperand;
  /** `axis` may be omitted: the last axis (the earlier spec's form). */
  softmax(input: MLOperand, axis?: number, options?: MLOperatorOptions): MLOperand;

  matmul(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  gemm(a: MLOperand, b: MLOperand, options?: MLGemmOptions): MLOperand;
  conv2d(input: MLOperand, filter: MLOperand, options?: MLConv2dOptions): MLOperand;
  averagePool2d(input: MLOperand, options?: MLPool2dOptions): MLOperand;
  maxPool2d(input: MLOperand, options?: MLPool2dOptions): MLOperand;

  reshape(input: MLOperand, newShape: number[], options?: MLOperatorOptions): MLOperand;
  transpose(input: MLOperand, options?: MLTransposeOptions): MLOperand;
  concat(inputs: MLOperand[], axis: number, options?: MLOperatorOptions): MLOperand;
  slice(input: MLOperand, starts: number[], sizes: number[], options?: MLSliceOptions): MLOperand;
  cast(input: MLOperand, type: MLOperandDataType, options?: MLOperatorOptions): MLOperand;

  // --- logical operators ---
  equal(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  notEqual(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  greater(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  greaterOrEqual(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  lesser(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  lesserOrEqual(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  logicalNot(a: MLOperand, options?: MLOperatorOptions): MLOperand;
  logicalAnd(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  logicalOr(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  logicalXor(a: MLOperand, b: MLOperand, options?: MLOperatorOptions): MLOperand;
  isNaN(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  isInfinite(input: MLOperand, options?: MLOperatorOptions): MLOperand;

  // --- activation operators ---
  elu(input: MLOperand, options?: MLEluOptions): MLOperand;
  gelu(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  hardSigmoid(input: MLOperand, options?: MLHardSigmoidOptions): MLOperand;
  hardSwish(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  leakyRelu(input: MLOperand, options?: MLLeakyReluOptions): MLOperand;
  linear(input: MLOperand, options?: MLLinearOptions): MLOperand;
  softplus(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  softsign(input: MLOperand, options?: MLOperatorOptions): MLOperand;
  prelu(input: MLOperand, slope: MLOperand, options?: MLOperatorOptions): MLOperand;
  where(condition: MLOperand, trueValue: MLOperand, falseValue: MLOperand, options?: MLOperatorOptions): MLOperand;

  // --- reduce operators ---
  reduceL1(input: MLOperand, options?: MLReduceOptions): MLOperand;
  reduceL2(input: MLOperand, options?: MLReduceOptions): MLOperand;
  reduceLogSum(input: MLOperand, options?: MLReduceOptions): MLOperand;
  reduceLogSumExp(input: MLOperand, options?: MLReduceOptions): MLOperand;
  reduceMax(input: MLOperand, options?: MLReduceOptions): MLOperand;
  reduceMean(input: MLOperand, options?: MLReduceOptions): MLOperand;
  reduceMin(input: MLOperand, options?: MLReduceOptions): MLOperand;
  reduceProduct(input: MLOperand, options?: MLReduceOptions): MLOperand;
  reduceSum(input: MLOperand, options?: MLReduceOptions): MLOperand;
  reduceSumSquare(input: MLOperand, options?: MLReduceOptions): MLOperand;
  argMin(input: MLOperand, axis: number, options?: MLArgMinMaxOptions): MLOperand;
  argMax(input: MLOperand, axis: number, options?: MLArgMinMaxOptions): MLOperand;
  cumulativeSum(input: MLOperand, axis: number, options?: MLCumulativeSumOptions): MLOperand;

  // --- gather operators ---
  gather(input: MLOperand, indices: MLOperand, options?: MLGatherOptions): MLOperand;
  gatherElements(input: MLOperand, indices: MLOperand, options?: MLGatherOptions): MLOperand;
  gatherND(input: MLOperand, indices: MLOperand, options?: MLOperatorOptions): MLOperand;
  scatterElements(input: MLOperand, indices: MLOperand, updates: MLOperand, options?: MLScatterOptions): MLOperand;
  scatterND(input: MLOperand, indices: MLOperand, updates: MLOperand, options?: MLOperatorOptions): MLOperand;

  // --- movement operators ---
  expand(input: MLOperand, newShape: number[], options?: MLOperatorOptions): MLOperand;
  pad(input: MLOperand, beginningPadding: number[], endingPadding: number[], options?: MLPadOptions): MLOperand;
  reverse(input: MLOperand, options?: MLReverseOptions): MLOperand;
  /** `splits`: the number of equal pieces, or the size of each piece. */
  split(input: MLOperand, splits: number | number[], options?: MLSplitOptions): MLOperand[];
  tile(input: MLOperand, repetitions: number[], options?: MLOperatorOptions): MLOperand;
  triangular(input: MLOperand, options?: MLTriangularOptions): MLOperand;
  resample2d(input: MLOperand, options?: MLResample2dOptions): MLOperand;

  // --- quantize operators ---
  quantizeLinear(input: MLOperand, scale: MLOperand, zeroPoint: MLOperand, options?: MLOperatorOptions): MLOperand;
  dequantizeLinear(input: MLOperand, scale: MLOperand, zeroPoint: MLOperand, options?: MLOperatorOptions): MLOperand;

  // --- conv-transpose-norm operators ---
  convTranspose2d(input: MLOperand, filter: MLOperand, options?: MLConvTranspose2dOptions): MLOperand;
  l2Pool2d(input: MLOperand, options?: MLPool2dOptions): MLOperand;
  batchNormalization(input: MLOperand, mean: MLOperand, variance: MLOperand, options?: MLBatchNormalizationOptions): MLOperand;
  instanceNormalization(input: MLOperand, options?: MLInstanceNormalizationOptions): MLOperand;
  layerNormalization(input: MLOperand, options?: MLLayerNormalizationOptions): MLOperand;

  // --- recurrent operators ---
  gru(input: MLOperand, weight: MLOperand, recurrentWeight: MLOperand, steps: number, hiddenSize: number, options?: MLGruOptions): MLOperand[];
  gruCell(input: MLOperand, weight: MLOperand, recurrentWeight: MLOperand, hiddenState: MLOperand, hiddenSize: number, options?: MLGruCellOptions): MLOperand;
  lstm(input: MLOperand, weight: MLOperand, recurrentWeight: MLOperand, steps: number, hiddenSize: number, options?: MLLstmOptions): MLOperand[];
  lstmCell(input: MLOperand, weight: MLOperand, recurrentWeight: MLOperand, hiddenState: MLOperand, cellState: MLOperand, hiddenSize: number, options?: MLLstmCellOptions): MLOperand[];
}

export type MLRecurrentNetworkActivation = 'relu' | 'sigmoid' | 'tanh';
export type MLRecurrentNetworkDirection = 'forward' | 'backward' | 'both';
export type MLGruWeightLayout = 'zrn' | 'rzn';
export type MLLstmWeightLayout = 'iofg' | 'ifgo';

export interface MLGruCellOptions extends MLOperatorOptions {
  /** [3 * hiddenSize], gates ordered by `layout`. */
  bias?: MLOperand;
  recurrentBias?: MLOperand;
  /** Default true. */
  resetAfter?: boolean;
  /** Default 'zrn'. */
  layout?: MLGruWeightLayout;
  /** [gates, new gate]; default ['sigmoid', 'tanh']. */
  activations?: MLRecurrentNetworkActivation[];
}

export interface MLGruOptions extends MLOperatorOptions {
  /** [numDirections, 3 * hiddenSize]. */
  bias?: MLOperand;
  recurrentBias?: MLOperand;
  /** [numDirections, batchSize, hiddenSize]; zeros when omitted. */
  initialHiddenState?: MLOperand;
  resetAfter?: boolean;
  /** Also return [steps, numDirections, batchSize, hiddenSize]. */
  returnSequence?: boolean;
  direction?: MLRecurrentNetworkDirection;
  layout?: MLGruWeightLayout;
  activations?: MLRecurrentNetworkActivation[];
}

export interface MLLstmCellOptions extends MLOperatorOptions {
  /** [4 * hiddenSize], gates ordered by `layout`. */
  bias?: MLOperand;
  recurrentBias?: MLOperand;
  /** [3 * hiddenSize], ordered i, o, f. */
  peepholeWeight?: MLOperand;
  /** Default 'iofg'. */
  layout?: MLLstmWeightLayout;
  /** [i/f/o gates, cell gate, output filter]; default ['sigmoid', 'tanh', 'tanh']. */
  activations?: MLRecurrentNetworkActivation[];
}

export interface MLLstmOptions extends MLOperatorOptions {
  bias?: MLOperand;
  recurrentBias?: MLOperand;
  peepholeWeight?: MLOperand;
  initialHiddenState?: MLOperand;
  initialCellState?: MLOperand;
  returnSequence?: boolean;
  direction?: MLRecurrentNetworkDirection;
  layout?: MLLstmWeightLayout;
  activations?: MLRecurrentNetworkActivation[];
}

/** Options of gather() and gatherElements(). */
export interface MLGatherOptions extends MLOperatorOptions {
  /** The axis to gather along, in [0, input rank); default 0. */
  axis?: number;
}

/** Options of scatterElements(). */
export interface MLScatterOptions extends MLOperatorOptions {
  /** The axis to scatter along, in [0, input rank); default 0. */
  axis?: number;
}

export type MLPaddingMode = 'constant' | 'edge' | 'reflection';

export interface MLPadOptions extends MLOperatorOptions {
  mode?: MLPaddingMode;
  /** The padding value of mode 'constant', cast to the input's data type. */
  value?: MLNumber;
}

export interface MLReverseOptions extends MLOperatorOptions {
  /** Default: every axis. */
  axes?: number[];
}

export interface MLSplitOptions extends MLOperatorOptions {
  axis?: number;
}

export interface MLTriangularOptions extends MLOperatorOptions {
  upper?: boolean;
  diagonal?: number;
}

export type MLInterpolationMode = 'nearest-neighbor' | 'linear';

export interface MLResample2dOptions extends MLOperatorOptions {
  mode?: MLInterpolationMode;
  scales?: number[];
  sizes?: number[];
  axes?: number[];
}

export interface MLReduceOptions extends MLOperatorOptions {
  /** Axes to reduce; all when absent, none (element-wise) when empty. */
  axes?: number[];
  keepDimensions?: boolean;
}

export interface MLArgMinMaxOptions extends MLOperatorOptions {
  keepDimensions?: boolean;
  /** 'int32' (default) or 'int64'. */
  outputDataType?: MLOperandDataType;
}

export interface MLCumulativeSumOptions extends MLOperatorOptions {
  exclusive?: boolean;
  reversed?: boolean;
}

export interface MLEluOptions extends MLOperatorOptions {
  alpha?: number;
}

export interface MLHardSigmoidOptions extends MLOperatorOptions {
  alpha?: number;
  beta?: number;
}

export interface MLLeakyReluOptions extends MLOperatorOptions {
  alpha?: number;
}

export interface MLLinearOptions extends MLOperatorOptions {
  alpha?: number;
  beta?: number;
}

export type MLConvTranspose2dFilterOperandLayout = 'iohw' | 'hwoi' | 'ohwi';

export interface MLConvTranspose2dOptions extends MLOperatorOptions {
  /** [beginning height, ending height, beginning width, ending width] */
  padding?: number[];
  strides?: number[];
  dilations?: number[];
  /** Added to the computed output size; each must be below its stride. */
  outputPadding?: number[];
  /** [height, width]; overrides outputPadding. */
  outputSizes?: number[];
  groups?: number;
  inputLayout?: MLInputOperandLayout;
  filterLayout?: MLConvTranspose2dFilterOperandLayout;
  bias?: MLOperand;
}

export interface MLBatchNormalizationOptions extends MLOperatorOptions {
  scale?: MLOperand;
  bias?: MLOperand;
  /** Default 1. */
  axis?: number;
  /** Default 1e-5. */
  epsilon?: number;
}

export interface MLInstanceNormalizationOptions extends MLOperatorOptions {
  scale?: MLOperand;
  bias?: MLOperand;
  epsilon?: number;
  layout?: MLInputOperandLayout;
}

export interface MLLayerNormalizationOptions extends MLOperatorOptions {
  scale?: MLOperand;
  bias?: MLOperand;
  /** Default: every dimension but the first. */
  axes?: number[];
  epsilon?: number;
}

// --- option dictionaries of the operator families ---

export const ml: ML;

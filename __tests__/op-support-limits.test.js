'use strict';
// opSupportLimits() tells the truth: every operator the builder exposes is
// listed with dataTypes and rankRange for every operand (with the spec's
// operand names), every data type advertised for an operator's first
// operand builds and runs, and on the CPU every other data type is refused
// with a TypeError. The GPU part runs where a GPU context can be created.

const path = require('path');
const { spawnSync } = require('child_process');
const { ml, MLGraphBuilder } = require('..');
const native = require('../webnn-node.node');

const { SAMPLES } = require('./fixtures/op-samples');

const TOP_LEVEL = new Set(['preferredInputLayout', 'maxTensorByteLength', 'input', 'constant', 'output']);
const ALL_TYPES = ['float32', 'float16', 'int32', 'uint32', 'int64', 'uint64', 'int8', 'uint8', 'int4', 'uint4'];

// The operand that holds an operator's (first) output.
function outputLimit(entry) {
  return entry.output || entry.outputs || entry.output0;
}

// Whether a GPU context can be created, probed in a child process so that
// the decision is known when the describe blocks are declared.
const gpuProbe = (() => {
  const root = path.resolve(__dirname, '..');
  const code = `require(${JSON.stringify(root)}).ml.createContext({ deviceType: 'gpu' }).then(
      (c) => { console.log('OK'); c.destroy(); }, (e) => console.log('ERR ' + e.name + ': ' + e.message));`;
  const r = spawnSync(process.execPath, ['-e', code], { encoding: 'utf8', timeout: 60000 });
  return (r.stdout || '').trim().split('\n').pop() || `status ${r.status}`;
})();
const gpuAvailable = gpuProbe === 'OK';
if (!gpuAvailable) console.log(`opSupportLimits GPU tests skipped: ${gpuProbe}`);

async function buildAndRun(context, name, t) {
  const b = new MLGraphBuilder(context);
  let out = SAMPLES[name](b, t);
  if (Array.isArray(out)) out = out[0];
  const graph = await b.build({ out });
  const tensor = await context.createTensor({ dataType: out.dataType, shape: out.shape, readable: true });
  context.dispatch(graph, {}, { out: tensor });
  const bytes = await context.readTensor(tensor);
  return { out, bytes };
}

async function advertisedRun(context, limits) {
  const failures = [];
  let runs = 0;
  for (const name of native.operatorNames()) {
    if (!SAMPLES[name]) {
      failures.push(`${name}: no sample invocation in this test`);
      continue;
    }
    const [first] = Object.entries(limits[name]);
    for (const t of first[1].dataTypes) {
      try {
        const { out, bytes } = await buildAndRun(context, name, t);
        if (!outputLimit(limits[name]).dataTypes.includes(out.dataType)) {
          failures.push(`${name}(${t}): output ${out.dataType} is not advertised`);
        }
        if (bytes.byteLength === 0) failures.push(`${name}(${t}): empty result`);
        runs++;
      } catch (e) {
        failures.push(`${name}(${t}): ${e.name}: ${e.message}`);
      }
    }
  }
  return { failures, runs };
}

describe('opSupportLimits() on the CPU', () => {
  let context;
  let limits;
  beforeAll(async () => {
    context = await ml.createContext();
    limits = context.opSupportLimits();
  });

  test('lists every builder operator, each operand with dataTypes and rankRange', () => {
    const names = native.operatorNames();
    expect(names.length).toBeGreaterThan(0);
    for (const name of names) {
      expect(typeof MLGraphBuilder.prototype[name]).toBe('function');
      const entry = limits[name];
      expect(entry).toBeDefined();
      const operands = Object.entries(entry);
      expect(operands.length).toBeGreaterThan(0);
      for (const [, l] of operands) {
        expect(Array.isArray(l.dataTypes)).toBe(true);
        expect(l.dataTypes.length).toBeGreaterThan(0);
        expect(l.rankRange.min).toBeLessThanOrEqual(l.rankRange.max);
      }
    }
    for (const key of Object.keys(limits)) {
      if (!TOP_LEVEL.has(key)) expect(names).toContain(key);
    }
    expect(limits.preferredInputLayout).toBe('nchw');
    for (const k of ['input', 'constant', 'output']) expect(limits[k].dataTypes.length).toBeGreaterThan(0);
  });

  test('every advertised data type of each operator builds and runs', async () => {
    const { failures, runs } = await advertisedRun(context, limits);
    expect(failures).toEqual([]);
    expect(runs).toBeGreaterThan(native.operatorNames().length);
  });

  test('every data type not advertised for the first operand is refused with a TypeError', () => {
    const failures = [];
    let refused = 0;
    for (const name of native.operatorNames()) {
      const [first] = Object.entries(limits[name]);
      for (const t of ALL_TYPES.filter((x) => !first[1].dataTypes.includes(x))) {
        try {
          SAMPLES[name](new MLGraphBuilder(context), t);
          failures.push(`${name}(${t}) built, but ${t} is not advertised for ${first[0]}`);
        } catch (e) {
          if (e.name !== 'TypeError') failures.push(`${name}(${t}): ${e.name}: ${e.message}`);
          else refused++;
        }
      }
    }
    expect(failures).toEqual([]);
    expect(refused).toBeGreaterThan(0);
  });

  test('recurrent operators name their outputs output0, output1, output2 as the spec does', () => {
    expect(Object.keys(limits.gru)).toEqual(expect.arrayContaining(['output0', 'output1']));
    expect(Object.keys(limits.lstm)).toEqual(expect.arrayContaining(['output0', 'output1', 'output2']));
    expect(Object.keys(limits.lstmCell)).toEqual(expect.arrayContaining(['output0', 'output1']));
    expect(Object.keys(limits.gruCell)).toContain('output');
    for (const op of ['gru', 'lstm', 'lstmCell', 'gruCell']) expect(limits[op].outputs).toBeUndefined();
    // gru/lstm's sequence output has one more dimension than the states.
    expect(limits.gru.output1.rankRange).toEqual({ min: 4, max: 4 });
    expect(limits.lstm.output2.rankRange).toEqual({ min: 4, max: 4 });
    expect(limits.lstm.output0.rankRange).toEqual({ min: 3, max: 3 });
  });
});

(gpuAvailable ? describe : describe.skip)('opSupportLimits() on the GPU', () => {
  let context;
  let limits;
  beforeAll(async () => {
    context = await ml.createContext({ deviceType: 'gpu' });
    limits = context.opSupportLimits();
  });
  afterAll(() => context && context.destroy());

  test('every operator is listed, each operand with dataTypes and rankRange', () => {
    for (const name of native.operatorNames()) {
      for (const [, l] of Object.entries(limits[name])) {
        expect(Array.isArray(l.dataTypes)).toBe(true);
        expect(l.rankRange.min).toBeLessThanOrEqual(l.rankRange.max);
      }
    }
  });

  test(
    'every advertised data type of each operator builds and runs',
    async () => {
      const { failures, runs } = await advertisedRun(context, limits);
      expect(failures).toEqual([]);
      expect(runs).toBeGreaterThan(native.operatorNames().length);
    },
    600000,
  );
});

'use strict';
// Hostile shapes (issue 44): graphs that pass build() with a one-element
// input and one huge intermediate (up to 2^31 - 1 elements). Computing
// them must never abort the process (an infallible allocation that fails
// aborts Node with SIGABRT): the result is either right or an
// OperationError whose message names the bytes that could not be had.
//
// Each graph runs in a child process under `prlimit --as=<limit>`, small
// enough that the huge allocations fail fast: the point is surviving, not
// computing 8 GiB.

const path = require('path');
const { spawnSync } = require('child_process');
const { childJson } = require('./helpers');

const ROOT = path.resolve(__dirname, '..');
// Two sizes: 2^31 - 1 elements, whose first huge allocation fails; and
// 2^28 (1 GiB of float32), where the intermediate fits the limit and the
// operator under test is the one whose allocation fails (or the graph
// computes).
const SIZES = [
  { label: '2^31 - 1', n: 2 ** 31 - 1, limit: 3 * 2 ** 30 },
  { label: '2^28', n: 2 ** 28, limit: 2.5 * 2 ** 30 },
];
const X = 3.5; // the value of the one-element input

const havePrlimit = spawnSync('prlimit', ['--version'], { encoding: 'utf8' }).status === 0;
if (!havePrlimit) {
  // eslint-disable-next-line no-console
  console.log('hostile-shapes: `prlimit` is missing, so these tests are skipped');
}
const maybe = havePrlimit ? test : test.skip;

// Each graph: the source of `(b, x) => MLOperand`, its output a scalar
// that is X when computed. `x` is float32 [1].
const graphs = (N) => {
  const HALF = Math.floor(N / 2); // two of them: at most 2^31 - 2 elements
  return {
    expand: `(b, x) => b.reduceMax(b.expand(x, [${N}]))`,
    'pad constant': `(b, x) => b.reduceMax(b.pad(x, [0], [${N - 1}], { mode: 'constant', value: ${X} }))`,
    'pad edge': `(b, x) => b.reduceMax(b.pad(x, [${N - 1}], [0], { mode: 'edge' }))`,
    'pad reflection': `(b, x) => b.reduceMax(b.pad(b.expand(x, [${N - 4}]), [2], [2], { mode: 'reflection' }))`,
    tile: `(b, x) => b.reduceMax(b.tile(x, [${N}]))`,
    reverse: `(b, x) => b.reduceMax(b.reverse(b.expand(x, [${N}])))`,
    gather: `(b, x) => b.reduceMax(b.gather(x, b.expand(b.constant({ dataType: 'int32', shape: [1] }, new Int32Array([0])), [${N}])))`,
    gatherElements: `(b, x) => b.reduceMax(b.gatherElements(x, b.expand(b.constant({ dataType: 'int32', shape: [1] }, new Int32Array([0])), [${N}])))`,
    where: `(b, x) => b.reduceMax(b.where(b.expand(b.constant({ dataType: 'uint8', shape: [1] }, new Uint8Array([1])), [${N}]), x, x))`,
    cumulativeSum: `(b, x) => b.reduceMax(b.cumulativeSum(b.expand(b.mul(x, b.constant('float32', 0)), [${N}]), 0))`,
    concat: `(b, x) => b.reduceMax(b.concat([b.expand(x, [${HALF}]), b.expand(x, [${HALF}])], 0))`,
    'slice of expand': `(b, x) => b.reduceMax(b.slice(b.expand(x, [${N}]), [1], [${N - 1}]))`,
    transpose: `(b, x) => b.reduceMax(b.transpose(b.expand(x, [2, ${HALF}])))`,
    layerNormalization: `(b, x) => b.reduceMax(b.add(b.layerNormalization(b.expand(x, [2, ${HALF}]), { axes: [0] }), x))`,
    'binary broadcast': `(b, x) => b.reduceMax(b.add(b.expand(x, [2, ${HALF}]), b.reshape(x, [1, 1])))`,
  };
};
const NAMES = Object.keys(graphs(1));

// The expected scalar per graph when it does compute.
const EXPECT = {
  cumulativeSum: 0,
  layerNormalization: X, // normalized rows are 0 (all equal), plus x
  'binary broadcast': 2 * X,
};

/**
 * Builds and computes graph `name` on `deviceType` in a child process
 * under the address-space limit; returns its exit and what it printed.
 */
function runChild(name, deviceType, { n, limit }) {
  const code = `
    const webnn = require(${JSON.stringify(ROOT)});
    const report = (o) => console.log(JSON.stringify(o));
    (async () => {
      let ctx;
      try {
        ctx = await webnn.ml.createContext({ deviceType: ${JSON.stringify(deviceType)} });
      } catch (e) {
        return report({ noContext: e.name + ': ' + e.message });
      }
      const b = new webnn.MLGraphBuilder(ctx);
      const x = b.input('x', { dataType: 'float32', shape: [1] });
      let graph;
      try {
        graph = await b.build({ y: (${graphs(n)[name]})(b, x) });
      } catch (e) {
        return report({ stage: 'build', error: e.name, message: e.message });
      }
      try {
        const xt = await ctx.createTensor({ dataType: 'float32', shape: [1], writable: true });
        const yt = await ctx.createTensor({ dataType: 'float32', shape: [], readable: true });
        ctx.writeTensor(xt, new Float32Array([${X}]));
        ctx.dispatch(graph, { x: xt }, { y: yt });
        const y = new Float32Array(await ctx.readTensor(yt))[0];
        report({ stage: 'compute', value: y });
      } catch (e) {
        report({ stage: 'compute', error: e.name, message: e.message });
      }
      ctx.destroy();
    })();`;
  const r = childJson('prlimit', [`--as=${limit}`, process.execPath, '-e', code], { timeout: 60000 });
  if (process.env.HOSTILE_SHAPES_VERBOSE) {
    // eslint-disable-next-line no-console
    console.log(deviceType, name, n, r.status, r.signal, JSON.stringify(r.result));
  }
  return r;
}

describe.each(SIZES)('hostile shapes of $label elements on the CPU backend: no aborts', (size) => {
  for (const name of NAMES) {
    maybe(name, () => {
      const r = runChild(name, 'cpu', size);
      // The child survived: no signal (SIGABRT before), status 0.
      expect({ name, signal: r.signal, status: r.status }).toEqual({ name, signal: null, status: 0 });
      const res = r.result;
      expect(res.noContext).toBeUndefined();
      if (res.value !== undefined) {
        expect(res.value).toBe(name in EXPECT ? EXPECT[name] : X);
      } else {
        // A rejected compute (or build): an OperationError that names the
        // bytes it could not allocate.
        expect({ name, error: res.error }).toEqual({ name, error: 'OperationError' });
        expect(res.message).toMatch(/\d+ bytes/);
      }
    });
  }
});

describe('hostile shapes on the GPU backend: the child never dies', () => {
  let gpu = false;
  if (havePrlimit) {
    const probe = spawnSync(
      process.execPath,
      [
        '-e',
        `require(${JSON.stringify(ROOT)}).ml.createContext({ deviceType: 'gpu' })` +
          `.then((c) => { console.log('ok'); c.destroy(); }, () => console.log('no'))`,
      ],
      { encoding: 'utf8', timeout: 60000 },
    );
    gpu = probe.status === 0 && (probe.stdout || '').includes('ok');
    if (!gpu) {
      // eslint-disable-next-line no-console
      console.log('hostile-shapes: no GPU context can be created here, so the GPU cases are skipped');
    }
  }
  const maybeGpu = gpu ? test : test.skip;
  for (const name of NAMES) {
    maybeGpu(name, () => {
      const r = runChild(name, 'gpu', SIZES[0]);
      expect({ name, signal: r.signal, status: r.status }).toEqual({ name, signal: null, status: 0 });
      const res = r.result;
      if (res.value === undefined) {
        expect(typeof res.error).toBe('string');
      }
    });
  }
});

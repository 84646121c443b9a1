'use strict';
// convTranspose2d and l2Pool2d (no WPT vector file for convTranspose2d;
// l2Pool2d cases beyond pooling.json), with hand-worked expected values.

const { expectThrow, expectClose, run, f32, constF32, cpuContext } = require('./helpers');

let context;
beforeAll(async () => {
  context = await cpuContext();
});
afterAll(() => {
  context.destroy();
});

const X4 = [1, 2, 3, 4]; // a 2x2 input

describe('convTranspose2d', () => {
  test('default options: each input element stamps the 2x2 ones filter', async () => {
    // Output 3x3 = (2-1)*1 + 2: out[y][x] = sum of x[iy][ix] with y-iy, x-ix in {0,1}.
    // row0: 1, 1+2, 2 ; row1: 1+3, 1+2+3+4, 2+4 ; row2: 3, 3+4, 4
    const { results, outputs } = await run(context, { x: f32([1, 1, 2, 2], X4) }, (b, { x }) => ({
      y: b.convTranspose2d(x, constF32(b, [1, 1, 2, 2], [1, 1, 1, 1])),
    }));
    expect(outputs.y.shape).toEqual([1, 1, 3, 3]);
    expectClose(results.y, [1, 3, 2, 4, 10, 6, 3, 7, 4]);
  });

  test('strides 2 place the stamps side by side; outputPadding adds a row and column', async () => {
    // (2-1)*2 + 2 = 4: each input value fills its own 2x2 block.
    // With outputPadding [1, 1] the output is 5x5 and the extra row/column
    // hold only the bias (0.5); everything else is value + 0.5.
    const { results, outputs } = await run(context, { x: f32([1, 1, 2, 2], X4) }, (b, { x }) => ({
      plain: b.convTranspose2d(x, constF32(b, [1, 1, 2, 2], [1, 1, 1, 1]), { strides: [2, 2] }),
      padded: b.convTranspose2d(x, constF32(b, [1, 1, 2, 2], [1, 1, 1, 1]), {
        strides: [2, 2], outputPadding: [1, 1], bias: constF32(b, [1], [0.5]),
      }),
      sized: b.convTranspose2d(x, constF32(b, [1, 1, 2, 2], [1, 1, 1, 1]), {
        strides: [2, 2], outputSizes: [5, 4], outputPadding: [7, 7],
      }),
    }));
    expect(outputs.plain.shape).toEqual([1, 1, 4, 4]);
    expectClose(results.plain, [1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4]);
    expect(outputs.padded.shape).toEqual([1, 1, 5, 5]);
    expectClose(results.padded, [
      1.5, 1.5, 2.5, 2.5, 0.5,
      1.5, 1.5, 2.5, 2.5, 0.5,
      3.5, 3.5, 4.5, 4.5, 0.5,
      3.5, 3.5, 4.5, 4.5, 0.5,
      0.5, 0.5, 0.5, 0.5, 0.5,
    ]);
    // outputSizes wins over outputPadding (which is then not checked).
    expect(outputs.sized.shape).toEqual([1, 1, 5, 4]);
    expectClose(results.sized, [1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4, 0, 0, 0, 0]);
  });

  test('outputPadding or outputSizes may make a calculated size of zero or less valid', async () => {
    // A 1x1 input and filter, strides 2, padding 1 at the top and the
    // left: the calculated size is 0, made 1x1 by outputPadding 1. The
    // one tap falls in the padding, so only the bias remains.
    const { results, outputs } = await run(context, { x: f32([1, 1, 1, 1], [5]) }, (b, { x }) => ({
      padded: b.convTranspose2d(x, constF32(b, [1, 1, 1, 1], [2]), {
        strides: [2, 2], padding: [1, 0, 1, 0], outputPadding: [1, 1], bias: constF32(b, [1], [0.25]),
      }),
      sized: b.convTranspose2d(x, constF32(b, [1, 1, 1, 1], [2]), {
        strides: [3, 3], padding: [0, 1, 0, 0], outputSizes: [1, 2], bias: constF32(b, [1], [0.5]),
      }),
    }));
    expect(outputs.padded.shape).toEqual([1, 1, 1, 1]);
    expectClose(results.padded, [0.25]);
    // Height: 1 - 0 - 1 = 0, so 1 is in [0, 3); width: 1, so 2 is in
    // [1, 4). The one tap lands at (0, 0).
    expect(outputs.sized.shape).toEqual([1, 1, 1, 2]);
    expectClose(results.sized, [10.5, 0.5]);
    // Still nothing when the final size is not positive.
    const { MLGraphBuilder } = require('..');
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [1, 1, 1, 1] });
    const w = constF32(b, [1, 1, 1, 1], [2]);
    expectThrow(() => b.convTranspose2d(x, w, { strides: [2, 2], padding: [1, 0, 0, 0] }), 'TypeError', 'not a valid dimension');
    expectThrow(() => b.convTranspose2d(x, w, { strides: [3, 3], padding: [1, 1, 0, 0], outputSizes: [0, 1] }), 'TypeError', 'not a valid dimension');
  });

  test('padding crops the full output', async () => {
    // The 4x4 strided output above minus one row/column on each side:
    // rows 1..2, cols 1..2 -> [1, 2, 3, 4]; size (2-1)*2 + 2 - 1 - 1 = 2.
    const { results, outputs } = await run(context, { x: f32([1, 1, 2, 2], X4) }, (b, { x }) => ({
      y: b.convTranspose2d(x, constF32(b, [1, 1, 2, 2], [1, 1, 1, 1]), {
        strides: [2, 2], padding: [1, 1, 1, 1],
      }),
    }));
    expect(outputs.y.shape).toEqual([1, 1, 2, 2]);
    expectClose(results.y, [1, 2, 3, 4]);
  });

  test('dilations spread the filter taps', async () => {
    // One input 2, filter [[1,2],[3,4]] dilated by 2 -> 3x3 with zeros between.
    const { results } = await run(context, { x: f32([1, 1, 1, 1], [2]) }, (b, { x }) => ({
      y: b.convTranspose2d(x, constF32(b, [1, 1, 2, 2], [1, 2, 3, 4]), { dilations: [2, 2] }),
    }));
    expectClose(results.y, [2, 0, 4, 0, 0, 0, 6, 0, 8]);
  });

  test('groups keep channels apart', async () => {
    // Input channels [1, 2]; iohw filter [2, 1, 1, 1] = [3, 5].
    // groups 1: one output channel, 1*3 + 2*5 = 13.
    // groups 2: two output channels (1 per group): [1*3, 2*5] = [3, 10].
    const { results, outputs } = await run(context, { x: f32([1, 2, 1, 1], [1, 2]) }, (b, { x }) => ({
      one: b.convTranspose2d(x, constF32(b, [2, 1, 1, 1], [3, 5])),
      two: b.convTranspose2d(x, constF32(b, [2, 1, 1, 1], [3, 5]), { groups: 2 }),
    }));
    expect(outputs.one.shape).toEqual([1, 1, 1, 1]);
    expectClose(results.one, [13]);
    expect(outputs.two.shape).toEqual([1, 2, 1, 1]);
    expectClose(results.two, [3, 10]);
  });

  test('nhwc input with hwoi and ohwi filters', async () => {
    // Single pixel, channels [1, 2]; filter f[o][c] = [[1, 10], [100, 1000]].
    // out[o] = sum_c x[c] * f[o][c] = [1 + 20, 100 + 2000] = [21, 2100].
    // ohwi [2,1,1,2]: f[o][c] in order; hwoi [1,1,2,2]: index o*2+c too
    // (its last two dimensions are o, i).
    const { results, outputs } = await run(context, { x: f32([1, 1, 1, 2], [1, 2]) }, (b, { x }) => ({
      ohwi: b.convTranspose2d(x, constF32(b, [2, 1, 1, 2], [1, 10, 100, 1000]), {
        inputLayout: 'nhwc', filterLayout: 'ohwi',
      }),
      hwoi: b.convTranspose2d(x, constF32(b, [1, 1, 2, 2], [1, 10, 100, 1000]), {
        inputLayout: 'nhwc', filterLayout: 'hwoi',
      }),
    }));
    expect(outputs.ohwi.shape).toEqual([1, 1, 1, 2]);
    expectClose(results.ohwi, [21, 2100]);
    expectClose(results.hwoi, [21, 2100]);
  });

  test('nhwc 2x2 input gives the nchw result transposed', async () => {
    // The default-options case above in nhwc with one channel is the same data.
    const { results, outputs } = await run(context, { x: f32([1, 2, 2, 1], X4) }, (b, { x }) => ({
      y: b.convTranspose2d(x, constF32(b, [2, 2, 1, 1], [1, 1, 1, 1]), {
        inputLayout: 'nhwc', filterLayout: 'hwoi',
      }),
    }));
    expect(outputs.y.shape).toEqual([1, 3, 3, 1]);
    expectClose(results.y, [1, 3, 2, 4, 10, 6, 3, 7, 4]);
  });

  test('validation errors', async () => {
    const { MLGraphBuilder } = require('..');
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [1, 2, 2, 2] });
    const w = constF32(b, [2, 1, 2, 2], Array(8).fill(1));
    expectThrow(() => b.convTranspose2d(x, w, { strides: [2, 2], outputPadding: [2, 0] }), 'TypeError', 'outputPadding');
    expectThrow(() => b.convTranspose2d(x, w, { outputPadding: [1, 0] }), 'TypeError', 'outputPadding');
    expectThrow(() => b.convTranspose2d(x, w, { strides: [2, 2], outputSizes: [6, 4] }), 'TypeError', 'outputSizes');
    expectThrow(() => b.convTranspose2d(x, w, { strides: [2, 2], outputSizes: [3, 4] }), 'TypeError', 'outputSizes');
    expectThrow(() => b.convTranspose2d(x, w, { groups: 0 }), 'TypeError', 'groups');
    expectThrow(() => b.convTranspose2d(x, w, { strides: [0, 1] }), 'TypeError', 'strides');
    expectThrow(() => b.convTranspose2d(x, w, { padding: [1, 1] }), 'TypeError', 'padding');
    expectThrow(() => b.convTranspose2d(x, w, { filterLayout: 'oihw' }), 'TypeError', 'filterLayout');
    expectThrow(() => b.convTranspose2d(x, w, { bias: constF32(b, [2], [0, 0]) }), 'TypeError', 'bias');
    expectThrow(() => b.convTranspose2d(x, constF32(b, [3, 1, 2, 2], Array(12).fill(1))), 'TypeError', 'channels');
    // Padding larger than the full output leaves nothing.
    expectThrow(() => b.convTranspose2d(x, w, { padding: [2, 1, 0, 0] }), 'TypeError', 'padding');
    const h = b.input('h', { dataType: 'float16', shape: [1, 2, 2, 2] });
    expectThrow(() => b.convTranspose2d(h, w), 'TypeError', 'data type');
    // The bias has the output channels (filter's output channels x groups).
    const y = b.convTranspose2d(x, w, { groups: 2, bias: constF32(b, [2], [0, 0]) });
    expect(Array.from(y.shape)).toEqual([1, 2, 3, 3]);
    const limits = context.opSupportLimits();
    expect(Object.keys(limits.convTranspose2d).sort()).toEqual(['bias', 'filter', 'input', 'output']);
    expect(limits.convTranspose2d.input.rankRange).toEqual({ min: 4, max: 4 });
  });
});

describe('l2Pool2d', () => {
  test('global pooling, windows, padding and nhwc', async () => {
    // Global: sqrt(3^2 + 4^2 + 0 + 0) = 5. Window [1, 2]: rows [3,4] -> 5, [0,0] -> 0.
    // Padding never enters the sum: window 2x2, padding [1,0,1,0] on a
    // single element 3 -> sqrt(9) = 3.
    const { results, outputs } = await run(context, {
      x: f32([1, 1, 2, 2], [3, 4, 0, 0]),
      one: f32([1, 1, 1, 1], [3]),
      n: f32([1, 1, 2, 2], [3, 1, 4, 1]),
    }, (b, { x, one, n }) => ({
      global: b.l2Pool2d(x),
      rows: b.l2Pool2d(x, { windowDimensions: [1, 2] }),
      padded: b.l2Pool2d(one, { windowDimensions: [2, 2], padding: [1, 0, 1, 0] }),
      // nhwc: pixels (3, 1) and (4, 1): channel 0 -> 5, channel 1 -> sqrt(2).
      nhwc: b.l2Pool2d(n, { layout: 'nhwc', windowDimensions: [1, 2] }),
    }));
    expectClose(results.global, [5]);
    expect(outputs.rows.shape).toEqual([1, 1, 2, 1]);
    expectClose(results.rows, [5, 0]);
    expect(outputs.padded.shape).toEqual([1, 1, 1, 1]);
    expectClose(results.padded, [3]);
    expect(outputs.nhwc.shape).toEqual([1, 1, 1, 2]);
    expectClose(results.nhwc, [5, Math.SQRT2]);
  });

  test('ceil rounding: the last window holds only real elements', async () => {
    // Width 3, window 2, stride 2: floor gives 1 output, ceil 2.
    // Windows {1, 2} -> sqrt(5) and {3} -> 3 (the part past the input adds nothing).
    const { results, outputs } = await run(context, { x: f32([1, 1, 1, 3], [1, 2, 3]) }, (b, { x }) => ({
      y: b.l2Pool2d(x, { windowDimensions: [1, 2], strides: [1, 2], roundingType: 'ceil' }),
      sized: b.l2Pool2d(x, { windowDimensions: [1, 2], strides: [1, 2], outputSizes: [1, 2] }),
    }));
    expect(outputs.y.shape).toEqual([1, 1, 1, 2]);
    expectClose(results.y, [Math.sqrt(5), 3]);
    expectClose(results.sized, [Math.sqrt(5), 3]);
  });

  test('float16 and validation', async () => {
    // float16 [3, 4] -> 5 = 0x4500.
    const { results } = await run(context, {
      h: { dataType: 'float16', shape: [1, 1, 1, 2], data: Uint16Array.from([0x4200, 0x4400]) },
    }, (b, { h }) => ({ y: b.l2Pool2d(h) }));
    expect(Array.from(results.y)).toEqual([0x4500]);
    const { MLGraphBuilder } = require('..');
    const b = new MLGraphBuilder(context);
    const i = b.input('i', { dataType: 'int32', shape: [1, 1, 2, 2] });
    expectThrow(() => b.l2Pool2d(i), 'TypeError', 'l2Pool2d');
    const x = b.input('x', { dataType: 'float32', shape: [1, 1, 2, 2] });
    expectThrow(() => b.l2Pool2d(x, { windowDimensions: [3, 3] }), 'TypeError');
    expectThrow(() => b.l2Pool2d(x, { layout: 'hwcn' }), 'TypeError', 'layout');
    const r3 = b.input('r3', { dataType: 'float32', shape: [1, 2, 2] });
    expectThrow(() => b.l2Pool2d(r3), 'TypeError', 'rank');
    const limits = context.opSupportLimits();
    expect(limits.l2Pool2d.input.dataTypes.sort()).toEqual(['float16', 'float32']);
  });
});

'use strict';
// Conformance against the WebNN test vectors extracted from web-platform-tests
// (shared/wpt-vectors, or $WEBNN_WPT_VECTORS). See scripts/conformance.js.
//
// CPU: every case must pass, except the cases listed in vector-errata.json:
// vectors whose expected values are wrong. Each erratum is asserted to fail
// against the vector and to match an independent reference computed here.
// GPU: every case must pass, except those listed with a reason in
// expected-failures-gpu.json (a list that only shrinks: an entry that passes
// fails the test), and at least 98% of all cases pass.

const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');

const {
  runConformance,
  formatReport,
  notFoundMessage,
  DEFAULT_DIR,
} = require('../scripts/conformance');

const ROOT = path.join(__dirname, '..');
const RUN_TIMEOUT_MS = 15 * 60 * 1000;

const vectorsAvailable = fs.existsSync(DEFAULT_DIR) && fs.statSync(DEFAULT_DIR).isDirectory();

// WEBNN_CONFORMANCE_FILES=add,matmul,pooling runs a slice: only those
// vector files (their names without .json). For runs where the whole set
// takes too long, e.g. an arm64 Node under an emulator
// (scripts/test-arm64-package.sh). Unset, every file runs. The errata
// checks then cover the errata of the cases in the slice; a name that
// matches no file fails.
const SLICE = (process.env.WEBNN_CONFORMANCE_FILES || '')
  .split(',')
  .map((f) => f.trim().replace(/\.json$/, ''))
  .filter(Boolean);
const files = SLICE.length ? SLICE : undefined;
/** The names of the cases in the slice's files; null: no slice. */
function sliceCaseNames() {
  if (!files) return null;
  const names = new Set();
  for (const f of files) {
    const file = path.join(DEFAULT_DIR, `${f}.json`);
    if (!fs.existsSync(file)) continue;
    for (const c of JSON.parse(fs.readFileSync(file, 'utf8')).cases) names.add(c.name);
  }
  return names;
}

function print(text) {
  process.stdout.write(`${text}\n`);
}

function describeFailures(list) {
  return list.map((c) => `${c.file} | ${c.name} | ${c.reason}`);
}

if (!vectorsAvailable) {
  print(`[conformance] skipped: ${notFoundMessage(DEFAULT_DIR)}`);
  test.skip(`WebNN conformance skipped: ${notFoundMessage(DEFAULT_DIR)}`, () => {});
} else {
  if (files) {
    print(`[conformance] a slice: WEBNN_CONFORMANCE_FILES=${files.join(',')}`);
    test('every vector file of the slice exists', () => {
      expect(files.filter((f) => !fs.existsSync(path.join(DEFAULT_DIR, `${f}.json`)))).toEqual([]);
    });
  }
  const inSlice = sliceCaseNames();

  describe('WebNN conformance (cpu)', () => {
    const allErrata = JSON.parse(fs.readFileSync(path.join(__dirname, 'vector-errata.json'), 'utf8'));
    const errata = Object.fromEntries(
      Object.entries(allErrata).filter(([name]) => !inSlice || inSlice.has(name)),
    );
    const cases = [];

    test(
      'every case passes, except the listed vector errata',
      async () => {
        const report = await runConformance({ deviceType: 'cpu', files, onCase: (c) => cases.push(c) });
        expect(report.available).toBe(true);
        print(`\n${formatReport(report)}`);
        const failing = cases.filter((c) => !c.passed && !(c.name in errata));
        const errataSeen = cases.filter((c) => !c.passed && c.name in errata);
        print(
          `[conformance cpu] ${report.passed} of ${report.total} cases passed; ` +
            `${errataSeen.length} failures are listed vector errata (checked below against a reference)`,
        );
        for (const c of errataSeen) print(`[conformance cpu] vector erratum: ${c.name}: ${c.reason}`);
        if (failing.length) {
          print(`[conformance cpu] failures:\n  ${describeFailures(failing).join('\n  ')}`);
        }
        expect(describeFailures(failing)).toEqual([]);
        // An erratum that passes means the vector was fixed: drop it from the list.
        expect(cases.filter((c) => c.passed && c.name in errata).map((c) => c.name)).toEqual([]);
      },
      RUN_TIMEOUT_MS,
    );

    // Errata of two kinds: vectors whose values are wrong (l2Pool2d, checked
    // against a reference below), and cases that a later spec rule forbids
    // (their reason starts "Changed rule:"), which must fail by being
    // refused with a TypeError.
    const changedRules = Object.values(errata).filter((r) => r.startsWith('Changed rule:')).length;
    const testChanged = inSlice && !changedRules ? test.skip : test;
    if (testChanged === test.skip) print('[conformance cpu] skipped: the changed-rule errata check (none in the slice)');
    testChanged('the errata for changed spec rules are refused with a TypeError', () => {
      const changed = cases.filter((c) => String(errata[c.name] || '').startsWith('Changed rule:'));
      expect(changed.length).toBe(changedRules);
      for (const c of changed) expect(`${c.name}: ${c.reason}`).toMatch(/TypeError/);
    });

    // The l2Pool2d errata: our results must equal the square root
    // of the sum of squares over each window's input elements (padding and
    // the ceil-rounding overhang excluded), computed independently here.
    const l2Errata = Object.keys(errata).filter((n) => n.startsWith('l2Pool2d'));
    const testL2 = inSlice && !l2Errata.length ? test.skip : test;
    if (testL2 === test.skip) print('[conformance cpu] skipped: the l2Pool2d errata check (pooling is not in the slice)');
    testL2('the l2Pool2d errata match an independent reference', async () => {
      const { ml, MLGraphBuilder } = require(ROOT);
      const pooling = JSON.parse(fs.readFileSync(path.join(DEFAULT_DIR, 'pooling.json'), 'utf8'));
      const context = await ml.createContext();
      for (const name of l2Errata) {
        const c = pooling.cases.find((x) => x.name === name);
        expect(c).toBeDefined();
        const input = Object.values(c.graph.inputs)[0];
        const opts = c.graph.operators[0].arguments[1].options;
        const [n, ch, h, w] = input.descriptor.shape;
        const [kh, kw] = opts.windowDimensions;
        const [pt, , pl] = opts.padding;
        const [sh, sw] = opts.strides;
        const expected = Object.values(c.graph.expectedOutputs)[0];
        const [, , oh, ow] = expected.descriptor.shape;
        const ref = [];
        for (let b = 0; b < n; b++)
          for (let cc = 0; cc < ch; cc++)
            for (let y = 0; y < oh; y++)
              for (let x = 0; x < ow; x++) {
                let sum = 0;
                for (let i = 0; i < kh; i++)
                  for (let j = 0; j < kw; j++) {
                    const iy = y * sh - pt + i;
                    const ix = x * sw - pl + j;
                    if (iy >= 0 && iy < h && ix >= 0 && ix < w) {
                      const v = input.data[((b * ch + cc) * h + iy) * w + ix];
                      sum += v * v;
                    }
                  }
                ref.push(Math.sqrt(sum));
              }
        const builder = new MLGraphBuilder(context);
        const x = builder.input('x', input.descriptor);
        const graph = await builder.build({ y: builder.l2Pool2d(x, opts) });
        const out = new Float32Array(ref.length);
        context.computeSync(graph, { x: new Float32Array(input.data) }, { y: out });
        for (let i = 0; i < ref.length; i++) {
          expect(Math.abs(out[i] - ref[i])).toBeLessThanOrEqual(1e-5 * Math.max(1, ref[i]));
        }
        // And the vector really disagrees with the reference somewhere.
        expect(ref.some((r, i) => Math.abs(r - expected.data[i]) > 1)).toBe(true);
      }
    });
  });

  // Whether a GPU context can be created, decided before the tests are
  // collected (a child process, so that the probe cannot disturb this one).
  // Only NotSupportedError means "no GPU"; any other outcome runs the tests,
  // so a broken GPU backend is reported, not skipped.
  const probe = spawnSync(
    process.execPath,
    [
      '-e',
      `require(${JSON.stringify(ROOT)}).ml.createContext({deviceType: 'gpu'}).then(
         () => { process.stdout.write('OK'); process.exit(0); },
         (e) => { process.stdout.write('ERR ' + (e && e.name) + ': ' + (e && e.message)); process.exit(0); })`,
    ],
    { encoding: 'utf8', timeout: 120000 },
  );
  const probeOut = (probe.stdout || '').trim();
  const gpuUnsupported = probeOut.startsWith('ERR NotSupportedError');
  const describeGpu = gpuUnsupported ? describe.skip : describe;
  if (gpuUnsupported) {
    print(`[conformance gpu] skipped: createContext({deviceType: 'gpu'}) rejected with ${probeOut.slice(4)}`);
  }

  describeGpu('WebNN conformance (gpu)', () => {
    test(
      'every case the GPU context advertises passes (except expected failures)',
      async () => {
        const { ml } = require(ROOT);
        let context;
        try {
          context = await ml.createContext({ deviceType: 'gpu' });
        } catch (e) {
          if (e && e.name === 'NotSupportedError') {
            print(`[conformance gpu] skipped: ${e.name}: ${e.message}`);
            return;
          }
          throw e;
        }
        expect(context).toBeTruthy();

        const expectedFailures = JSON.parse(
          fs.readFileSync(path.join(__dirname, 'expected-failures-gpu.json'), 'utf8'),
        );
        const advertised = [];
        const all = [];
        let notAdvertised = 0;
        const report = await runConformance({
          deviceType: 'gpu',
          files,
          onCase: (c) => {
            // `advertised`: the GPU limits cover the case's operators and
            // data types (castToSupportedType cases included).
            all.push(c);
            if (!c.advertised) notAdvertised++;
            else advertised.push(c);
          },
        });
        expect(report.available).toBe(true);

        print(`\n${formatReport(report)}`);
        // Every case counts, advertised or not: a case the GPU refuses is a
        // failure unless expected-failures-gpu.json lists it with a reason.
        const failing = all.filter((c) => !c.passed && !(c.name in expectedFailures));
        const expectedSeen = all.filter((c) => !c.passed && c.name in expectedFailures);
        const nowPassing = all.filter((c) => c.passed && c.name in expectedFailures);
        print(
          `[conformance gpu] ${advertised.length} cases advertised by opSupportLimits() ` +
            `(${advertised.filter((c) => c.passed).length} passed, ${expectedSeen.length} expected failures); ` +
            `${notAdvertised} cases not advertised`,
        );
        for (const c of expectedSeen) {
          print(`[conformance gpu] expected failure: ${c.name}: ${c.reason}`);
        }
        for (const c of nowPassing) {
          print(`[conformance gpu] listed in expected-failures-gpu.json but passes now: ${c.name}`);
        }
        if (failing.length) {
          print(`[conformance gpu] unexpected failures:\n  ${describeFailures(failing).join('\n  ')}`);
        }
        expect(describeFailures(failing)).toEqual([]);
        // The list only shrinks: an entry that passes now must be removed.
        expect(nowPassing.map((c) => c.name)).toEqual([]);
        expect(report.passed / report.total).toBeGreaterThanOrEqual(0.98);
      },
      RUN_TIMEOUT_MS,
    );
  });
}

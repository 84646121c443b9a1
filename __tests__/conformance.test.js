'use strict';
// Conformance against the WebNN test vectors extracted from web-platform-tests
// (shared/wpt-vectors, or $WEBNN_WPT_VECTORS). See scripts/conformance.js.
//
// CPU: every case whose operators are all implemented (operatorNames()) must
// pass; cases using operators not implemented yet are counted, not asserted.
// GPU: every case that the GPU context's opSupportLimits() accepts must pass,
// except those listed in expected-failures-gpu.json.

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
  describe('WebNN conformance (cpu)', () => {
    test(
      'every case whose operators are all implemented passes',
      async () => {
        const implemented = new Set(require(path.join(ROOT, 'webnn-node.node')).operatorNames());
        const asserted = [];
        const notImplemented = [];
        const report = await runConformance({
          deviceType: 'cpu',
          onCase: (c) => {
            if (c.operators.every((op) => implemented.has(op))) asserted.push(c);
            else notImplemented.push(c);
          },
        });
        expect(report.available).toBe(true);

        print(`\n${formatReport(report)}`);
        const failing = asserted.filter((c) => !c.passed);
        const notImplementedPassed = notImplemented.filter((c) => c.passed).length;
        print(
          `[conformance cpu] ${asserted.length} cases use only implemented operators ` +
            `(${asserted.length - failing.length} passed); ${notImplemented.length} cases use an ` +
            `operator not implemented yet (not asserted; ${notImplementedPassed} of them passed)`,
        );
        if (failing.length) {
          print(`[conformance cpu] failures among implemented operators:\n  ${describeFailures(failing).join('\n  ')}`);
        }
        expect(describeFailures(failing)).toEqual([]);
      },
      RUN_TIMEOUT_MS,
    );
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
        let notAdvertised = 0;
        const report = await runConformance({
          deviceType: 'gpu',
          onCase: (c) => {
            // `advertised`: the GPU limits cover the case's operators and
            // data types (castToSupportedType cases included).
            if (!c.advertised) notAdvertised++;
            else advertised.push(c);
          },
        });
        expect(report.available).toBe(true);

        print(`\n${formatReport(report)}`);
        const failing = advertised.filter((c) => !c.passed && !(c.name in expectedFailures));
        const expectedSeen = advertised.filter((c) => !c.passed && c.name in expectedFailures);
        const nowPassing = advertised.filter((c) => c.passed && c.name in expectedFailures);
        print(
          `[conformance gpu] ${advertised.length} cases advertised by opSupportLimits() ` +
            `(${advertised.filter((c) => c.passed).length} passed, ${expectedSeen.length} expected failures); ` +
            `${notAdvertised} cases not advertised (not asserted)`,
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
      },
      RUN_TIMEOUT_MS,
    );
  });
}

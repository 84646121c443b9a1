'use strict';
// opSupportLimits() against the spec's tensor limit tables, transcribed once
// into fixtures/spec-limits-c515210.json (the commit is in the file).
//
// On the CPU the limits must equal the tables in both directions: every data
// type the spec allows is advertised (and so, by op-support-limits.test.js,
// builds and runs), and nothing the spec does not allow is advertised (and
// so is refused with a TypeError). Ranks: the spec's minimum exactly; "N"
// (any rank) is this implementation's maximum rank, the one it reports for
// graph inputs. On the GPU, what it advertises must be allowed by the spec
// with the same ranks (a context may support fewer data types).
//
// The 4-bit types are not in the spec's MLOperandDataType; where we accept
// them (an extension, see docs/spec.md) they are left out of the comparison.

const { ml } = require('..');
const { gpuProbe } = require('./helpers');

const FIXTURE = require('./fixtures/spec-limits-c515210.json');
const TOP_LEVEL = new Set(['preferredInputLayout', 'maxTensorByteLength', 'input', 'constant', 'output']);
const SPEC_TYPES = new Set(FIXTURE.anyDataType);

function allowedTypes(l) {
  return l.dataTypes === 'any' ? [...FIXTURE.anyDataType] : l.dataTypes;
}

function specOnly(types) {
  return types.filter((t) => SPEC_TYPES.has(t));
}

// Compares the limits of one context with the fixture; `exact` asks for
// equal data type sets, otherwise the advertised ones must be a subset.
function compare(limits, exact) {
  const problems = [];
  const maxRank = limits.input.rankRange.max;
  const ops = Object.keys(limits).filter((k) => !TOP_LEVEL.has(k));
  for (const op of ops) {
    if (!(op in FIXTURE.operators)) problems.push(`${op}: advertised, but no such operator in the spec`);
  }
  for (const [op, operands] of Object.entries(FIXTURE.operators)) {
    const entry = limits[op];
    if (!entry) {
      problems.push(`${op}: in the spec, missing from opSupportLimits()`);
      continue;
    }
    for (const name of Object.keys(entry)) {
      if (!(name in operands)) problems.push(`${op}.${name}: advertised, but the spec has no such operand`);
    }
    for (const [name, spec] of Object.entries(operands)) {
      const l = entry[name];
      if (!l || !Array.isArray(l.dataTypes) || !l.rankRange) {
        problems.push(`${op}.${name}: missing, or without dataTypes and rankRange`);
        continue;
      }
      const want = new Set(allowedTypes(spec));
      const got = specOnly(l.dataTypes);
      for (const t of got) if (!want.has(t)) problems.push(`${op}.${name}: advertises ${t}, which the spec does not allow`);
      if (exact) {
        for (const t of want) if (!got.includes(t)) problems.push(`${op}.${name}: the spec allows ${t}, not advertised`);
      }
      const [min, max] = spec.rankRange;
      if (l.rankRange.min !== min) problems.push(`${op}.${name}: minimum rank ${l.rankRange.min}, the spec's is ${min}`);
      const wantMax = max === 'N' ? maxRank : max;
      if (l.rankRange.max !== wantMax) {
        problems.push(`${op}.${name}: maximum rank ${l.rankRange.max}, expected ${wantMax} (spec: ${max})`);
      }
    }
  }
  return problems;
}

describe('the spec fixture', () => {
  test('names its source commit and covers every operator with every operand', () => {
    expect(FIXTURE.commit).toBe('c515210');
    expect(Object.keys(FIXTURE.operators).length).toBeGreaterThan(90);
    for (const [op, operands] of Object.entries(FIXTURE.operators)) {
      expect(Object.keys(operands).length).toBeGreaterThanOrEqual(2);
      for (const [name, l] of Object.entries(operands)) {
        const types = allowedTypes(l);
        expect(types.length).toBeGreaterThan(0);
        for (const t of types) expect(SPEC_TYPES.has(t)).toBe(true);
        expect(l.rankRange).toHaveLength(2);
        expect(`${op}.${name}`).toBeTruthy();
      }
    }
  });
});

describe('opSupportLimits() follows the spec tables (cpu)', () => {
  let limits;
  beforeAll(async () => {
    const context = await ml.createContext();
    limits = context.opSupportLimits();
    context.destroy();
  });

  test('allowed and advertised data types and ranks agree for every operator and operand', () => {
    expect(compare(limits, true)).toEqual([]);
  });

  test('the implementation-wide limits are MLTensorLimits with a byte-length cap', () => {
    for (const k of ['input', 'constant', 'output']) {
      expect(specOnly(limits[k].dataTypes).sort()).toEqual([...SPEC_TYPES].sort());
      expect(limits[k].rankRange.min).toBe(0);
      expect(limits[k].rankRange.max).toBeGreaterThanOrEqual(4);
    }
    expect(Number.isSafeInteger(limits.maxTensorByteLength)).toBe(true);
    expect(limits.maxTensorByteLength).toBeGreaterThan(0);
  });
});

const gpu = gpuProbe();
if (!gpu.ok) console.log(`spec limits GPU tests skipped: ${gpu.why}`);

(gpu.ok ? describe : describe.skip)('opSupportLimits() follows the spec tables (gpu)', () => {
  test('what the GPU advertises is allowed by the spec, with the spec ranks', async () => {
    const context = await ml.createContext({ deviceType: 'gpu' });
    const limits = context.opSupportLimits();
    context.destroy();
    expect(compare(limits, false)).toEqual([]);
  });
});

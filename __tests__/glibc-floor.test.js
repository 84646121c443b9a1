'use strict';
// The glibc floor of the Linux gnu packages: the prebuilt addons (built
// against glibc 2.17 through zig by scripts/prebuild.js) must load on glibc
// 2.28 or older, read from the versions their ELF says they need. A parser
// check runs on the addon built here with the system toolchain, which needs
// this machine's recent glibc, so the parser is seen to find real versions.
const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const {
  versionNeeds,
  glibcVersion,
  compareVersions,
  glibcVersionsNeeded,
  glibcFloor,
  MAX_GLIBC: FLOOR,
} = require('../scripts/glibc-floor.js');

const root = path.resolve(__dirname, '..');
const prebuilt = ['linux-x64-gnu', 'linux-arm64-gnu']
  .map((p) => path.join(root, 'npm', p, `webnn-node.${p}.node`))
  .filter((f) => fs.existsSync(f));
const local = path.join(root, 'webnn-node.node');
const isElf = (f) => fs.existsSync(f) && fs.readFileSync(f).subarray(0, 4).equals(Buffer.from([0x7f, 0x45, 0x4c, 0x46]));

describe('glibc versions', () => {
  test('versions compare numerically, not as text', () => {
    expect(glibcVersion('GLIBC_2.2.5')).toEqual([2, 2, 5]);
    expect(glibcVersion('GLIBC_PRIVATE')).toBeNull();
    expect(glibcVersion('GCC_3.0')).toBeNull();
    expect(compareVersions([2, 28], [2, 3, 4])).toBeGreaterThan(0);
    expect(compareVersions([2, 17], [2, 17, 0])).toBe(0);
    expect(() => versionNeeds(Buffer.alloc(64))).toThrow('not an ELF file');
  });

  if (!prebuilt.length) {
    const reason =
      'no prebuilt linux-gnu addon under npm/linux-x64-gnu or npm/linux-arm64-gnu to check ' +
      '(make one with `npm run prebuild` or scripts/cross.sh)';
    console.warn(`glibc-floor.test.js: skipping the floor check: ${reason}`);
    test.skip(`prebuilt linux-gnu addons need glibc ${FLOOR} or older: SKIPPED, ${reason}`, () => {});
  }
  for (const file of prebuilt) {
    test(`${path.basename(file)} needs glibc ${FLOOR} or older`, () => {
      // It needs glibc (libc.so.6's base version at least), and nothing past the floor.
      expect(glibcFloor(file)).not.toBeNull();
      const tooNew = glibcVersionsNeeded(file).filter(
        (v) => compareVersions(glibcVersion(v), glibcVersion(`GLIBC_${FLOOR}`)) > 0,
      );
      expect(tooNew).toEqual([]);
    });
  }

  const onGlibc = process.platform === 'linux' && Boolean(process.report.getReport().header.glibcVersionRuntime);
  const localReason = !onGlibc
    ? 'this Node does not run on glibc, so the addon built here needs none'
    : isElf(local)
      ? null
      : 'no webnn-node.node built here (npm run build:addon)';
  if (localReason) console.warn(`glibc-floor.test.js: skipping the parser check: ${localReason}`);
  (localReason ? test.skip : test)(
    localReason
      ? `the parser on the locally built addon: SKIPPED, ${localReason}`
      : 'the parser reads the versions the locally built addon needs',
    () => {
      const needs = versionNeeds(fs.readFileSync(local));
      const files = needs.map((n) => n.file);
      expect(files).toContain('libc.so.6');
      const all = glibcVersionsNeeded(local);
      for (const v of all) expect(v).toMatch(/^GLIBC_\d+(\.\d+)+$/);
      // Each architecture's first glibc symbol version is always there.
      expect(all).toContain(process.arch === 'arm64' ? 'GLIBC_2.17' : 'GLIBC_2.2.5');
      // Built with this machine's toolchain, it needs a glibc past the
      // floor the prebuilt packages keep (2.34 and 2.35 with a recent one).
      const floor = glibcFloor(local);
      expect(compareVersions(glibcVersion(`GLIBC_${floor}`), glibcVersion(`GLIBC_${FLOOR}`))).toBeGreaterThan(0);
      // It loads in this process, so this glibc is at least as new.
      const runtime = process.report.getReport().header.glibcVersionRuntime;
      expect(compareVersions(glibcVersion(`GLIBC_${floor}`), glibcVersion(`GLIBC_${runtime}`))).toBeLessThanOrEqual(0);
      // The same set as the version references objdump lists, where it is installed.
      let objdump = null;
      try {
        objdump = execFileSync('objdump', ['-p', local], { encoding: 'utf8', maxBuffer: 1 << 26 });
      } catch {
        console.warn('glibc-floor.test.js: objdump is not installed; the parser is not compared with it');
      }
      if (objdump) {
        const refs = objdump.slice(objdump.indexOf('Version References'));
        const theirs = [...new Set(refs.match(/GLIBC_\d+(\.\d+)+/g))];
        expect([...all].sort()).toEqual(theirs.sort());
      }
    },
  );
});

'use strict';
// The platform packages: one per napi target, each with the os/cpu/libc
// that make npm install it exactly where the loader asks for it, and the
// prebuild and cross-build scripts' answers for targets they cannot build.
const { spawnSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const { platformName, linuxLibc, PREBUILT } = require('../binding.js');

const root = path.resolve(__dirname, '..');
const pkg = require('../package.json');

/** What a target triple means to npm: its os, cpu and libc fields. */
function npmFields(triple) {
  const [arch, , sys, abi] = triple.split('-');
  const cpu = { x86_64: 'x64', aarch64: 'arm64' }[arch];
  if (sys === 'linux') return { os: 'linux', cpu, libc: abi === 'musl' ? 'musl' : 'glibc' };
  if (sys === 'darwin') return { os: 'darwin', cpu };
  if (sys === 'windows') return { os: 'win32', cpu };
  throw new Error(`unexpected target ${triple}`);
}

describe('platform packages', () => {
  const expected = pkg.napi.targets.map((t) => {
    const f = npmFields(t);
    return { triple: t, ...f, platform: platformName(f.os, f.cpu, f.libc === 'musl' ? 'musl' : 'gnu') };
  });

  test('the seven platforms, in package.json, binding.js and npm/', () => {
    const names = expected.map((e) => e.platform).sort();
    expect(names).toEqual(
      [
        'darwin-arm64',
        'darwin-x64',
        'linux-arm64-gnu',
        'linux-arm64-musl',
        'linux-x64-gnu',
        'linux-x64-musl',
        'win32-x64-msvc',
      ].sort(),
    );
    expect([...PREBUILT].sort()).toEqual(names);
    expect(Object.keys(pkg.optionalDependencies).sort()).toEqual(names.map((n) => `webnn-node-${n}`));
    for (const v of Object.values(pkg.optionalDependencies)) expect(v).toBe(pkg.version);
    const dirs = fs.readdirSync(path.join(root, 'npm')).filter((d) => fs.statSync(path.join(root, 'npm', d)).isDirectory());
    expect(dirs.sort()).toEqual(names);
  });

  test.each(pkg.napi.targets)('%s: its package installs where the loader looks', (triple) => {
    const e = expected.find((x) => x.triple === triple);
    const dir = path.join(root, 'npm', e.platform);
    const p = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
    expect(p.name).toBe(`webnn-node-${e.platform}`);
    expect(p.version).toBe(pkg.version);
    expect(p.os).toEqual([e.os]);
    expect(p.cpu).toEqual([e.cpu]);
    if (e.libc) expect(p.libc).toEqual([e.libc]);
    else expect(p.libc).toBeUndefined();
    expect(p.main).toBe(`webnn-node.${e.platform}.node`);
    expect(p.files.sort()).toEqual(['LICENSE', p.main].sort());
    expect(p.license).toBe('MIT');
    expect(p.engines).toEqual(pkg.engines);
    expect(fs.readFileSync(path.join(dir, 'LICENSE'), 'utf8')).toBe(fs.readFileSync(path.join(root, 'LICENSE'), 'utf8'));
    expect(fs.readFileSync(path.join(dir, 'README.md'), 'utf8')).toContain(`**${triple}**`);
  });

  test('platform names follow napi-rs', () => {
    expect(platformName('linux', 'x64', 'gnu')).toBe('linux-x64-gnu');
    expect(platformName('linux', 'arm64', 'musl')).toBe('linux-arm64-musl');
    expect(platformName('darwin', 'arm64')).toBe('darwin-arm64');
    expect(platformName('darwin', 'x64')).toBe('darwin-x64');
    expect(platformName('win32', 'x64')).toBe('win32-x64-msvc');
  });

  (process.platform === 'linux' ? test : test.skip)('the C library is the one this Node runs on (Linux only)', () => {
    const glibc = process.report.getReport().header.glibcVersionRuntime;
    expect(linuxLibc()).toBe(glibc ? 'gnu' : 'musl');
    expect(platformName()).toBe(`linux-${process.arch}-${glibc ? 'gnu' : 'musl'}`);
  });
});

describe('build scripts, for targets they cannot build', () => {
  const prebuild = (...args) =>
    spawnSync(process.execPath, [path.join(root, 'scripts', 'prebuild.js'), ...args], { cwd: root, encoding: 'utf8' });

  test('prebuild names the unknown target and the known ones', () => {
    const r = prebuild('--target', 'riscv64gc-unknown-linux-gnu');
    expect(r.status).toBe(1);
    expect(r.stderr.trim()).toBe(
      `prebuild: unknown target riscv64gc-unknown-linux-gnu; known: x86_64-unknown-linux-gnu, ` +
        'x86_64-unknown-linux-musl, aarch64-unknown-linux-gnu, aarch64-unknown-linux-musl, ' +
        'aarch64-apple-darwin, x86_64-apple-darwin, x86_64-pc-windows-msvc, x86_64-pc-windows-gnu',
    );
  });

  test('prebuild refuses an unknown argument and a --target without a triple', () => {
    let r = prebuild('--fast');
    expect(r.status).toBe(1);
    expect(r.stderr.trim()).toBe('prebuild: unknown argument --fast (usage: node scripts/prebuild.js [--target <triple>])');
    r = prebuild('--target');
    expect(r.status).toBe(1);
    expect(r.stderr.trim()).toBe('prebuild: --target needs a triple');
  });

  (process.platform === 'win32' ? test.skip : test)('prebuild sends the MSVC target to Windows (off Windows)', () => {
    const r = prebuild('--target', 'x86_64-pc-windows-msvc');
    expect(r.status).toBe(1);
    expect(r.stderr.trim()).toBe(
      `prebuild: cannot build x86_64-pc-windows-msvc on ${platformName()}: the MSVC target builds on Windows ` +
        '(or use --target x86_64-pc-windows-gnu with mingw-w64)',
    );
  });

  const bash = process.platform === 'linux' && spawnSync('bash', ['--version']).status === 0;
  (bash ? test : test.skip)('cross.sh reports a target it does not build, and why (Linux with bash only)', () => {
    const r = spawnSync('bash', [path.join(root, 'scripts', 'cross.sh'), 'x86_64-pc-windows-msvc'], {
      cwd: root,
      encoding: 'utf8',
    });
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('x86_64-pc-windows-msvc | not built | ');
    expect(r.stdout).toMatch(/not built \| (the MSVC target is built on Windows|the Rust target is not installed)/);
  });
});

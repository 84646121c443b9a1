'use strict';
// Node conventions: Symbol.dispose and `using`, util.inspect, the package's
// exports, and what the loader and the install script say when there is no
// addon for the platform.

const { spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { inspect } = require('util');
const { linkDir } = require('./link-dir');
const { ml, MLGraphBuilder, MLContext, MLGraph, MLTensor } = require('..');

const root = path.join(__dirname, '..');

function supportsUsing() {
  try {
    // eslint-disable-next-line no-new-func
    new Function('{ using x = null; }');
    return true;
  } catch {
    return false;
  }
}

describe('Symbol.dispose', () => {
  test('MLContext, MLGraph and MLTensor dispose by destroying', async () => {
    for (const cls of [MLContext, MLGraph, MLTensor]) {
      expect(typeof cls.prototype[Symbol.dispose]).toBe('function');
    }
    const ctx = await ml.createContext();
    const t = await ctx.createTensor({ dataType: 'float32', shape: [2], readable: true });
    const b = new MLGraphBuilder(ctx);
    const g = await b.build({ y: b.relu(b.input('x', { dataType: 'float32', shape: [2] })) });
    t[Symbol.dispose]();
    g[Symbol.dispose]();
    expect(inspect(t)).toContain("state: 'destroyed'");
    expect(inspect(g)).toContain("state: 'destroyed'");
    await expect(ctx.readTensor(t)).rejects.toMatchObject({ name: 'TypeError' });
    ctx[Symbol.dispose]();
    await expect(ctx.lost).resolves.toHaveProperty('message');
  });

  (supportsUsing() ? test : test.skip)('`using` destroys at the end of the block', () => {
    const code = `
      const { ml } = require(${JSON.stringify(root)});
      (async () => {
        let kept;
        {
          using ctx = await ml.createContext();
          kept = ctx;
        }
        const info = await kept.lost;
        console.log(typeof info.message);
      })();`;
    const r = spawnSync(process.execPath, ['-e', code], { encoding: 'utf8', timeout: 30000 });
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe('string');
  });
});

describe('util.inspect', () => {
  test('shows an MLTensor, MLOperand and MLGraph', async () => {
    const ctx = await ml.createContext();
    const t = await ctx.createTensor({ dataType: 'int32', shape: [2, 3], readable: true, label: 'scores' });
    const s = inspect(t);
    expect(s).toMatch(/^MLTensor \{/);
    expect(s).toContain("dataType: 'int32'");
    expect(s).toContain('shape: [ 2, 3 ]');
    expect(s).toContain("label: 'scores'");
    expect(s).toContain("state: 'live'");

    const b = new MLGraphBuilder(ctx);
    const x = b.input('x', { dataType: 'float16', shape: [4] });
    const y = b.relu(x, { label: 'act' });
    expect(inspect(x)).toBe("MLOperand { dataType: 'float16', shape: [ 4 ], from: 'input \"x\"' }");
    expect(inspect(y)).toBe("MLOperand { dataType: 'float16', shape: [ 4 ], from: 'relu', label: 'act' }");
    const g = await b.build({ out: y });
    expect(inspect(g, { depth: 4 })).toBe(
      "MLGraph {\n  inputs: { x: { dataType: 'float16', shape: [ 4 ] } },\n" +
        "  outputs: { out: { dataType: 'float16', shape: [ 4 ] } },\n  state: 'live'\n}",
    );
    ctx.destroy();
    expect(inspect(t)).toContain("state: 'lost'");
    // The native helpers stay out of enumeration.
    expect(Object.keys(Object.getPrototypeOf(t))).not.toContain('_state');
  });
});

describe('package', () => {
  test("exports ./package.json and ships a LICENSE", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'webnn-exports-'));
    fs.mkdirSync(path.join(dir, 'node_modules'));
    linkDir(root, path.join(dir, 'node_modules', 'webnn-node'));
    const r = spawnSync(
      process.execPath,
      ['-e', "console.log(require(require.resolve('webnn-node/package.json')).name)"],
      { cwd: dir, encoding: 'utf8' },
    );
    fs.rmSync(dir, { recursive: true, force: true });
    expect(r.stdout.trim()).toBe('webnn-node');
    expect(fs.readFileSync(path.join(root, 'LICENSE'), 'utf8')).toMatch(/^MIT License/);
    const pkg = require('../package.json');
    expect(pkg.license).toBe('MIT');
    expect(pkg.engines.node).toBe('>=20');
  });

  test('without an addon, require names the platform and the two ways out', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'webnn-noaddon-'));
    for (const f of ['index.js', 'binding.js']) fs.copyFileSync(path.join(root, f), path.join(dir, f));
    const r = spawnSync(
      process.execPath,
      ['-e', 'try { require("./index.js") } catch (e) { console.log(e.code + "\\n" + e.message) }'],
      { cwd: dir, encoding: 'utf8' },
    );
    fs.rmSync(dir, { recursive: true, force: true });
    const [code, message] = r.stdout.split('\n');
    expect(code).toBe('WEBNN_NODE_NO_ADDON');
    expect(message).toContain(require('../binding.js').platformName());
    expect(message).toContain('npx webnn-node-build');
    expect(message).toContain('Rust toolchain');
  });

  test('the install script without a prebuilt addon or cargo says so, without a stack trace', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'webnn-nocargo-'));
    fs.mkdirSync(path.join(dir, 'scripts'));
    fs.copyFileSync(path.join(root, 'binding.js'), path.join(dir, 'binding.js'));
    fs.copyFileSync(path.join(root, 'scripts', 'install.js'), path.join(dir, 'scripts', 'install.js'));
    const r = spawnSync(process.execPath, [path.join(dir, 'scripts', 'install.js')], {
      cwd: dir,
      encoding: 'utf8',
      env: { ...process.env, PATH: path.dirname(process.execPath) },
    });
    fs.rmSync(dir, { recursive: true, force: true });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('no Rust toolchain');
    expect(r.stderr).toContain('npx webnn-node-build');
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});

'use strict';
// The interop typings (createContext(gpuDevice), createExportableTensor,
// exportToGPU) compile with `tsc --strict` both in a program that has
// WebGPU's types (@webgpu/types) and in one that does not, resolving
// `webnn-node` as a user's project would (as __tests__/typings.test.js
// does for examples/typed.ts).

const { spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { linkDir } = require('./link-dir');

const root = path.join(__dirname, '..');

const WITH_TYPES = `
import { ml, type MLTensor, type MLContext } from 'webnn-node';

export async function roundTrip(device: GPUDevice): Promise<number> {
  const context: MLContext = await ml.createContext(device);
  const tensor: MLTensor = await context.createExportableTensor(
    { dataType: 'float32', shape: [4], readable: true, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC },
    device,
  );
  const exportable: boolean = tensor.exportableToGPU;
  const buffer: GPUBuffer = await context.exportToGPU(tensor);
  const size: number = buffer.size;
  buffer.destroy();
  // @ts-expect-error a number is neither options nor a GPUDevice
  await ml.createContext(42);
  // @ts-expect-error exportToGPU gives a GPUBuffer, not an ArrayBuffer
  const wrong: ArrayBuffer = await context.exportToGPU(tensor);
  void wrong;
  return exportable ? size : 0;
}
`;

const WITHOUT_TYPES = `
import { ml, type MLTensor, type MLContext } from 'webnn-node';

declare const device: GPUDevice;

export async function roundTrip(): Promise<boolean> {
  const context: MLContext = await ml.createContext(device);
  const options: MLContext = await ml.createContext({ deviceType: 'cpu' });
  const tensor: MLTensor = await context.createExportableTensor({ dataType: 'int8', shape: [3], usage: 0x80 }, device);
  const buffer: GPUBuffer = await context.exportToGPU(tensor);
  // @ts-expect-error usage is a number of GPUBufferUsage bits
  await options.createExportableTensor({ dataType: 'int8', shape: [3], usage: 'storage' }, device);
  void buffer;
  return tensor.exportableToGPU;
}
`;

function compile(source, withWebGpuTypes) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'webnn-tsc-interop-'));
  try {
    fs.mkdirSync(path.join(dir, 'node_modules', '@types'), { recursive: true });
    linkDir(root, path.join(dir, 'node_modules', 'webnn-node'));
    linkDir(path.join(root, 'node_modules', '@types', 'node'), path.join(dir, 'node_modules', '@types', 'node'));
    const types = ['node'];
    const lib = ['es2022', 'esnext.disposable'];
    if (withWebGpuTypes) {
      // @webgpu/types is written against the DOM's declarations.
      lib.push('dom');
      fs.mkdirSync(path.join(dir, 'node_modules', '@webgpu'));
      linkDir(path.join(root, 'node_modules', '@webgpu', 'types'), path.join(dir, 'node_modules', '@webgpu', 'types'));
      types.push('@webgpu/types');
    }
    fs.writeFileSync(path.join(dir, 'interop.ts'), source);
    fs.writeFileSync(
      path.join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          noEmit: true,
          target: 'es2022',
          module: 'nodenext',
          moduleResolution: 'nodenext',
          lib,
          types,
        },
        files: ['interop.ts'],
      }),
    );
    const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    return spawnSync(process.execPath, [tsc, '-p', dir], { encoding: 'utf8', timeout: 120000 });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const hasWebGpuTypes = fs.existsSync(path.join(root, 'node_modules', '@webgpu', 'types', 'package.json'));
if (!hasWebGpuTypes) {
  console.log('interop typings with @webgpu/types skipped: the package is not installed (npm install --no-save @webgpu/types)');
}

(hasWebGpuTypes ? test : test.skip)('the interop typings compile under tsc --strict with @webgpu/types', () => {
  const r = compile(WITH_TYPES, true);
  expect(r.stdout + r.stderr).toBe('');
  expect(r.status).toBe(0);
});

test('the interop typings compile under tsc --strict without @webgpu/types', () => {
  const r = compile(WITHOUT_TYPES, false);
  expect(r.stdout + r.stderr).toBe('');
  expect(r.status).toBe(0);
});

// A strict TypeScript program against the typings (index.d.ts); CI
// type-checks it with `tsc --strict` (__tests__/typings.test.js). Run it
// compiled, or read it as a typed tour of the API.
import { ml, MLGraphBuilder, type MLOpSupportLimits, type MLTensor } from 'webnn-node';

async function main(): Promise<void> {
  const context = await ml.createContext({ deviceType: 'cpu', numThreads: 1 });

  const limits: MLOpSupportLimits = context.opSupportLimits();
  const convTypes: string[] = limits.conv2d.input.dataTypes;
  const maxRank: number = limits.conv2d.input.rankRange.max;
  console.log(`conv2d input: ${convTypes.join(', ')} up to rank ${maxRank}`);

  const builder = new MLGraphBuilder(context);
  const x = builder.input('x', { dataType: 'float32', shape: [1, 4] });
  const w = builder.constant({ dataType: 'float32', shape: [4, 2] }, new Float32Array(8).fill(0.5));
  const graph = await builder.build({ y: builder.softmax(builder.matmul(x, w), 1) });

  const input: MLTensor = await context.createTensor({ dataType: 'float32', shape: [1, 4], writable: true });
  const output: MLTensor = await context.createTensor({ dataType: 'float32', shape: [1, 2], readable: true });
  context.writeTensor(input, new Float32Array([1, 2, 3, 4]));
  context.dispatch(graph, { x: input }, { y: output });
  const result = new Float32Array(await context.readTensor(output));
  console.log(Array.from(result));

  graph[Symbol.dispose]();
  context.destroy();
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});

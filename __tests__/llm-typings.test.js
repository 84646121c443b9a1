'use strict';
// lib/llm is type-checked by tsc --strict through its JSDoc
// (lib/llm/tsconfig.json), and its types are precise enough for a
// TypeScript program that loads a model and chats with it.

const { spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const root = path.join(__dirname, '..');
const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');

function runTsc(project) {
  return spawnSync(process.execPath, [tsc, '-p', project], { encoding: 'utf8', timeout: 120000 });
}

test('tsc -p lib/llm: every module type-checks under strict', () => {
  const r = runTsc(path.join(root, 'lib', 'llm'));
  expect(r.stdout + r.stderr).toBe('');
  expect(r.status).toBe(0);
});

// A program of the repository's own (lib/llm is not in the package):
// it imports lib/llm by path, with lib/llm's resolution settings (see
// lib/llm/tsconfig.json). The @ts-expect-error lines hold only where the
// types are exact: were a value `any`, its line would be an unused
// directive, which tsc reports.
const CONSUMER = `
import { ml } from 'ROOT';
import { loadLlama, type LlamaModel } from 'ROOT/lib/llm/gguf';
import { ChatSession, type ChatMessage, type GenerateStats } from 'ROOT/lib/llm/session';

export async function answer(file: string, question: string): Promise<string> {
  const model: LlamaModel = await loadLlama(file);
  const context = await ml.createContext();
  const options = { maxContext: 256, numerics: 'float32', system: 'Be brief.' } as const;
  const chat = await new ChatSession(context, model, options).init();
  let text = '';
  for await (const piece of chat.ask(question, { maxTokens: 16, signal: AbortSignal.timeout(10000) })) {
    text += piece;
  }
  const stats: GenerateStats | null = chat.lastStats;
  const history: ChatMessage[] = chat.messages;
  const limit: number = chat.maxContext;
  const ids: number[] = model.tokenizer.encode(text);
  chat.reset();
  chat.destroy();
  context.destroy();
  return \`\${text} (\${stats?.cachedTokens ?? 0} cached, \${history.length} messages, \${ids.length} of \${limit})\`;
}

// @ts-expect-error numerics is 'llama.cpp' or 'float32'
void new ChatSession(null as never, null as never, { numerics: 'float16' });
// @ts-expect-error ask() takes the user's text
void ((chat: ChatSession) => chat.ask(42));
// @ts-expect-error a message's role is system, user or assistant
void ((chat: ChatSession) => chat.generate([{ role: 'tool', content: '' }]));
// @ts-expect-error the config's sizes are numbers
void ((m: LlamaModel): string => m.config.nCtx);
// @ts-expect-error a tensor's data is its bytes
void ((m: LlamaModel): Float32Array | undefined => m.tensors.get('output_norm.weight')?.read());
`;

test('a TypeScript program using loadLlama and ChatSession type-checks with tsc --strict', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'webnn-llm-tsc-'));
  try {
    const rootPath = root.split(path.sep).join('/');
    fs.writeFileSync(path.join(dir, 'consumer.ts'), CONSUMER.replace(/ROOT/g, rootPath));
    const config = {
      // lib/llm's settings (strict, its module resolution, ...), for a
      // TypeScript file.
      extends: path.join(root, 'lib', 'llm', 'tsconfig.json'),
      compilerOptions: {
        // lib/llm's JSDoc types are read, not checked again (the test
        // above checks them).
        checkJs: false,
        // @types/node from this checkout, not from above the temporary folder.
        typeRoots: [path.join(root, 'node_modules', '@types')],
      },
      files: ['consumer.ts'],
      include: [],
    };
    fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify(config));
    const r = runTsc(dir);
    expect(r.stdout + r.stderr).toBe('');
    expect(r.status).toBe(0);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

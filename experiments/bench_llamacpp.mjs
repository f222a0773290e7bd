// bench_llamacpp.mjs — llama.cpp's side of experiments/bench_llamacpp.sh: pp N and tg M through
// node-llama-cpp's API, CPU only, a fixed thread count.
//   node experiments/bench_llamacpp.mjs NODE_DIR MODEL.gguf THREADS [PROMPT=512] [GEN=32]
// Prints `llama.cpp pp=<tokens/s> tg=<tokens/s>`, as llama-bench counts them (then a line
// `llama.cpp pp_cpu=<prompt tokens per CPU second of the process>`): the
// prompt evaluated in one batch of PROMPT tokens (n_batch = n_ubatch = PROMPT) from an empty
// cache; generation timed token by token after the prompt, the median per-token time (what
// swarm bench-llm reports). Token ids are fixed pseudo-random ids below the vocabulary size.
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [nodeDir, modelPath, thr, ppArg, tgArg] = process.argv.slice(2);
const threads = Number(thr), pp = Number(ppArg || 512), tg = Number(tgArg || 32);
const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(path.join(nodeDir, 'node_modules', 'node-llama-cpp/dist/index.js')).href);
const llama = await getLlama({ gpu: false, maxThreads: threads, logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: true });
const ctx = await model.createContext({ contextSize: pp + tg + 16, batchSize: pp,
                                         threads: { ideal: threads, min: threads } });
const seq = ctx.getSequence();
let s = 12345;
const toks = [];
for (let i = 0; i < pp; i++) {
  s = (s * 1103515245 + 12345) % 2147483648;
  toks.push(100 + (s % 30000));
}
// warm-up: one small evaluation so the weights are mapped and paged in
await seq.evaluateWithoutGeneratingNewTokens(toks.slice(0, 8));
await seq.clearHistory();
let t0 = process.hrtime.bigint();
const c0 = process.cpuUsage();
await seq.evaluateWithoutGeneratingNewTokens(toks);
const ppS = Number(process.hrtime.bigint() - t0) / 1e9;
const c1 = process.cpuUsage(c0); // every thread of the process, microseconds
// generation: one token at a time, greedy (temperature 0), timed each
const times = [];
const it = seq.evaluate([toks[pp - 1]], { temperature: 0 });
t0 = process.hrtime.bigint();
for (let i = 0; i < tg; i++) {
  const r = await it.next();
  if (r.done) break;
  const t1 = process.hrtime.bigint();
  times.push(Number(t1 - t0) / 1e9);
  t0 = t1;
}
await it.return();
times.sort((a, b) => a - b);
const med = times[Math.floor(times.length / 2)];
console.log(`llama.cpp pp=${(pp / ppS).toFixed(2)} tg=${(1 / med).toFixed(2)}`);
// the prompt per CPU second (all threads): what a shared machine's neighbours disturb least
console.log(`llama.cpp pp_cpu=${(pp / ((c1.user + c1.system) / 1e6)).toFixed(2)}`);
await ctx.dispose();
await model.dispose();
process.exit(0);

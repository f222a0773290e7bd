// bench_batching.mjs — llama.cpp's side of experiments/bench_batching.sh: K sequences
// generating at once in one context (node-llama-cpp batches the sequences' pending tokens into
// one llama_decode), CPU only, a fixed thread count.
//   node experiments/bench_batching.mjs NODE_DIR MODEL.gguf THREADS SEQUENCES [GEN=32] [CTX=256]
// Prints `llama.cpp seqs=K tokens=N wall_ms=W agg=<tokens/s>`: every sequence is given the
// same 5 fixed token ids as its prompt and generates GEN tokens greedily (temperature 0); the
// wall time runs from the first prompt's submission to the last token, as swarm generate
// --sessions K counts its aggregate (prompt included).
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [nodeDir, modelPath, thr, seqArg, genArg, ctxArg] = process.argv.slice(2);
const threads = Number(thr), k = Number(seqArg || 1), gen = Number(genArg || 32);
const ctxPer = Number(ctxArg || 256);
const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(path.join(nodeDir, 'node_modules', 'node-llama-cpp/dist/index.js')).href);
// build "never": its prebuilt CPU binaries only. A prebuilt binary that fails its load test
// (it did once on this loaded 2-core VM) would otherwise start a source build of llama.cpp in
// the shared node_modules, which every other run then waits on.
const llama = await getLlama({ gpu: false, maxThreads: threads, build: 'never',
                               logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: true });
const ctx = await model.createContext({ contextSize: ctxPer * k, sequences: k, batchSize: 64,
                                         threads: { ideal: threads, min: threads } });
const prompt = [1, 9038, 2501, 263, 931]; // "<s> Once upon a time" in the llama vocabulary
const seqs = [];
for (let i = 0; i < k; i++)
  seqs.push(ctx.getSequence());
// warm-up: the weights mapped and paged in, then forgotten
await seqs[0].evaluateWithoutGeneratingNewTokens(prompt);
await seqs[0].clearHistory();
async function one(seq) {
  let n = 0;
  const it = seq.evaluate(prompt, { temperature: 0 });
  for (; n < gen; n++) {
    const r = await it.next();
    if (r.done)
      break;
  }
  await it.return();
  return n;
}
const t0 = process.hrtime.bigint();
const counts = await Promise.all(seqs.map(one));
const wall = Number(process.hrtime.bigint() - t0) / 1e9;
const total = counts.reduce((a, b) => a + b, 0);
console.error(`llama.cpp binary: ${llama.buildType}, cpu math cores ${llama.cpuMathCores}`);
console.log(`llama.cpp seqs=${k} tokens=${total} wall_ms=${(wall * 1e3).toFixed(1)} ` +
            `agg=${(total / wall).toFixed(2)}`);
await ctx.dispose();
await model.dispose();
process.exit(0);

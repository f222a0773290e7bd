// llama_load_check.mjs — does llama.cpp load a GGUF file swarm wrote and run a token through it?
//   node tests/llama_load_check.mjs NODE_DIR FILE...
// NODE_DIR holds node-llama-cpp (tests/fixtures/make_vocab_fixtures.sh installs 3.22.1 under
// build/tokjs). For each file: load the model (CPU), create a context, evaluate two tokens and
// print the tensor types llama.cpp reports and the first logits. Manual: CI does not run it.
// Files: SWARM_REQUANT_KEEP=DIR build/tests/test_requant writes one per quantization type.
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [nodeDir, ...files] = process.argv.slice(2);
const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(path.join(nodeDir, 'node_modules', 'node-llama-cpp/dist/index.js')).href);
const llama = await getLlama({ gpu: false, logLevel: process.env.LLAMA_LOG ? LlamaLogLevel.debug : LlamaLogLevel.error });
let bad = 0;
for (const f of files) {
  try {
    const model = await llama.loadModel({ modelPath: f, gpuLayers: 0 });
    const ctx = await model.createContext({ contextSize: 64 });
    const seq = ctx.getSequence();
    const it = seq.evaluate([1, 5, 7]);
    const r = await it.next();
    console.log(`${path.basename(f)}: loaded (${model.fileInfo.tensorInfo.length} tensors, ` +
                `size ${model.size} B), evaluated: next token ${r.value}`);
    await ctx.dispose();
    await model.dispose();
  } catch (e) {
    bad++;
    console.log(`${path.basename(f)}: FAILED: ${e.message}`);
  }
}
process.exit(bad ? 1 : 0);

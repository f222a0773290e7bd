// node lcpp.mjs MODEL.gguf N — llama.cpp's greedy ids (1 thread, f32 cache, flash attention off) after the
// benchmark prompt and a heldout one, with its top-2 gap at each step, as JSON lines.
import { expectations, openLlama } from '../../tests/fixtures/llama_lib.mjs';
const [model_path, n] = process.argv.slice(2);
const { getLlama } = await openLlama(process.env.NODE_DIR || '/work/tokjs');
const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' });
const model = await llama.loadModel({ modelPath: model_path });
const cases = await expectations(model, ['The history of the city begins with a small village on the river',
  'The intelligence of any discussion diminishes with'], { nGen: Number(n), nTop: 3, ctx: 256, gap: true });
for (const c of cases) console.log(JSON.stringify({ prompt: c.prompt, ids: c.prompt_ids, greedy: c.greedy, gap: c.gap }));
await model.dispose();

// serve_api.mjs — swarm serve driven by the client libraries users have: the openai SDK (v6),
// the Vercel AI SDK (ai 6 + @ai-sdk/openai-compatible) and LangChain (@langchain/openai),
// pinned in tests/js/package.json and installed under build/npm by `make deps`. tests/js/
//
// usage: node tests/js/serve_api.mjs PHASE BASE_URL KEY [ARGS...]
//   fields     issue 23 item 1: every field honoured or refused (logit_bias, seed, n, ...)
//   endpoints  item 4: /tokenize /detokenize /apply-template /props /slots /v1/models, names
//   strict     item 4: a --strict-model server refuses other names (ARGS: none)
//   cors       item 5: preflight and allow-origin (ARGS: an allowed origin)
//   grace      item 7: SIGTERM past --grace (ARGS: the server's pid)
// Prints "ok NAME" / "FAIL NAME: why" lines (tests/e2e_serve_api.sh tallies them).
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../build/npm/node_modules/"));
const OpenAI = require("openai").default ?? require("openai");
const { generateText, streamText } = require("ai");
const { createOpenAICompatible } = require("@ai-sdk/openai-compatible");
const { ChatOpenAI } = require("@langchain/openai");

const [phase, base, key, ...rest] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: key || "none", maxRetries: 0,
                            timeout: 120000 });
const check = (name, cond, why = "") =>
  console.log(cond ? `ok ${name}` : `FAIL ${name}: ${typeof why === "string" ? why
                                                   : JSON.stringify(why).slice(0, 400)}`);
const H = { "Content-Type": "application/json", ...(key ? { Authorization: "Bearer " + key } : {}) };
const post = async (p, body) => {
  const r = await fetch(base + p, { method: "POST", headers: H, body: JSON.stringify(body) });
  return [r.status, await r.json().catch(() => null)];
};
const get = async (p) => {
  const r = await fetch(base + p, { headers: H });
  return [r.status, await r.json().catch(() => null)];
};
// The status and error object a refused request gets from the SDK.
async function refused(body, api = "chat") {
  try {
    if (api === "chat") await client.chat.completions.create(body);
    else await client.completions.create(body);
    return { status: 200 };
  } catch (e) {
    return { status: e.status, param: e.param ?? e.error?.param, code: e.code ?? e.error?.code,
             message: e.message };
  }
}
const MSG = [{ role: "user", content: "Tell me a story" }];

async function fields() {
  const P = "Once upon a time";
  // the greedy text and its token ids: what a ban must remove
  const g = await client.completions.create({ prompt: P, max_tokens: 12, temperature: 0,
                                              logprobs: 0 });
  const greedyToks = g.choices[0].logprobs.tokens;
  const [, tk] = await post("/tokenize", { content: g.choices[0].text, with_pieces: true });
  const ban = {}, banned = new Set();
  for (const t of tk.tokens.slice(0, 8)) { ban[String(t.id)] = -100; banned.add(t.piece); }
  let seen = [];
  for (const temperature of [0, 1.5]) {
    const r = await client.completions.create({ prompt: P, max_tokens: 24, temperature, n: 3,
                                                logprobs: 0, logit_bias: ban, seed: 5,
                                                ignore_eos: true });
    for (const c of r.choices) seen = seen.concat(c.logprobs.tokens);
  }
  const hit = seen.filter((t) => banned.has(t));
  check("logit_bias -100: a banned token never appears (greedy and temperature 1.5, 6 choices)",
        seen.length === 144 && hit.length === 0 && banned.has(greedyToks[0]),
        { hit, banned: [...banned], first: greedyToks[0] });
  // a positive bias: that token every time
  const fav = tk.tokens[tk.tokens.length - 1];
  const pb = await client.completions.create({ prompt: P, max_tokens: 6, temperature: 1,
                                              logprobs: 0, logit_bias: { [fav.id]: 100 } });
  check("logit_bias +100: that token every time",
        pb.choices[0].logprobs.tokens.every((t) => t === fav.piece), pb.choices[0].logprobs);
  let e = await refused({ model: "x", messages: MSG, logit_bias: { 7256: "x" } });
  check("logit_bias with a string value: 400 naming logit_bias",
        e.status === 400 && e.param === "logit_bias", e);
  e = await refused({ model: "x", messages: MSG, logit_bias: { 99999999: 1 } });
  check("logit_bias with an id outside the vocabulary: 400", e.status === 400 &&
        e.param === "logit_bias" && /99999999/.test(e.message), e);
  e = await refused({ model: "x", messages: MSG, logit_bias: { abc: 1 } });
  check("logit_bias with a key that is not an id: 400", e.status === 400, e);

  // seed: absent = fresh, returned; the returned seed reproduces; the same seed the same text
  const a = await client.chat.completions.create({ messages: MSG, max_tokens: 16,
                                                   temperature: 1 });
  const b = await client.chat.completions.create({ messages: MSG, max_tokens: 16,
                                                   temperature: 1 });
  check("no seed: two calls differ (a fresh seed each)",
        a.choices[0].message.content !== b.choices[0].message.content &&
        typeof a.seed === "number" && a.seed !== b.seed, [a.seed, b.seed]);
  const a2 = await client.chat.completions.create({ messages: MSG, max_tokens: 16,
                                                    temperature: 1, seed: a.seed });
  check("the seed returned reproduces the reply", a2.choices[0].message.content ===
        a.choices[0].message.content && a2.seed === a.seed && a.system_fingerprint,
        [a.choices[0].message.content, a2.choices[0].message.content]);

  // n: several choices, each its own draw (choice i: seed + i), streamed and not
  const n3 = await client.chat.completions.create({ messages: MSG, max_tokens: 8, n: 3,
                                                    temperature: 1, seed: 11, ignore_eos: true });
  const texts = n3.choices.map((c) => c.message.content);
  check("n 3: three choices, indexed, different draws", n3.choices.length === 3 &&
        n3.choices.map((c) => c.index).join() === "0,1,2" && new Set(texts).size === 3 &&
        n3.usage.completion_tokens === 24, texts);
  const one = await client.chat.completions.create({ messages: MSG, max_tokens: 8, n: 1,
                                                     temperature: 1, seed: 12,
                                                     ignore_eos: true });
  check("choice 1 of seed 11 = choice 0 of seed 12", one.choices[0].message.content ===
        texts[1], [one.choices[0].message.content, texts[1]]);
  const st = await client.chat.completions.create({ messages: MSG, max_tokens: 8, n: 2,
                                                    temperature: 1, seed: 11, stream: true,
                                                    ignore_eos: true });
  const got = ["", ""], fin = [null, null];
  for await (const ch of st)
    for (const c of ch.choices) {
      got[c.index] += c.delta?.content ?? "";
      if (c.finish_reason) fin[c.index] = c.finish_reason;
    }
  check("n 2 streamed: each choice's deltas by index, each finished", got[0] === texts[0] &&
        got[1] === texts[1] && fin.every((f) => f === "length"), { got, texts, fin });
  e = await refused({ messages: MSG, n: 17 });
  check("n 17: 400 naming n", e.status === 400 && e.param === "n", e);

  // max_tokens 3 with max_completion_tokens null (the LangChain / AI SDK shape)
  const m3 = await client.chat.completions.create({ messages: MSG, max_tokens: 3,
                                                    max_completion_tokens: null,
                                                    temperature: 0, ignore_eos: true });
  check("max_tokens 3, max_completion_tokens null: 3 tokens", m3.usage.completion_tokens === 3 &&
        m3.choices[0].finish_reason === "length", m3.usage);
  const mc = await client.chat.completions.create({ messages: MSG, max_completion_tokens: 2,
                                                    temperature: 0, ignore_eos: true });
  check("max_completion_tokens 2: 2 tokens", mc.usage.completion_tokens === 2, mc.usage);

  // top_k 1 and min_p 1 at temperature 1: the greedy text; a penalty changes a repeating one
  const greedy = (await client.completions.create({ prompt: P, max_tokens: 24,
                                                    temperature: 0 })).choices[0].text;
  for (const [k, v] of [["top_k", 1], ["min_p", 1]]) {
    const r = await client.completions.create({ prompt: P, max_tokens: 24, temperature: 1,
                                                seed: 3, [k]: v });
    check(`${k} ${v} at temperature 1 = greedy`, r.choices[0].text === greedy,
          [r.choices[0].text, greedy]);
  }
  // Penalties over 200 greedy tokens: the damping side (repeat_penalty > 1, positive
  // presence / frequency) leaves fewer repeats than greedy (the committed model's greedy text
  // repeats 2 tokens here; where a machine's greedy text repeats none, no more than none), the
  // boosting side (repeat_penalty < 1, negative penalties) makes the text loop.
  const lp = await client.completions.create({ prompt: P, max_tokens: 200, temperature: 0,
                                              logprobs: 0, ignore_eos: true });
  const toks = lp.choices[0].logprobs.tokens;
  const repeats = toks.length - new Set(toks).size;
  const rep = async (k, v) => {
    const r = await client.completions.create({ prompt: P, max_tokens: 200, temperature: 0,
                                                [k]: v, logprobs: 0, ignore_eos: true });
    const t2 = r.choices[0].logprobs.tokens;
    return t2.length - new Set(t2).size;
  };
  for (const [k, damp, boost] of [["repeat_penalty", 1.5, 0.5], ["presence_penalty", 2, -2],
                                  ["frequency_penalty", 2, -2]]) {
    const d = await rep(k, damp), b = await rep(k, boost);
    check(`${k} ${damp}: fewer repeats than greedy's ${repeats}; ${k} ${boost}: a loop`,
          (repeats > 0 ? d < repeats : d === 0) && b > 100, { repeats, damp: d, boost: b });
  }
  const rl = await client.completions.create({ prompt: P, max_tokens: 24, temperature: 0,
                                              repeat_penalty: 1.5, repeat_last_n: 0 });
  check("repeat_last_n 0 turns the penalty off", rl.choices[0].text === greedy,
        [rl.choices[0].text, greedy]);

  // stop, logprobs / top_logprobs, the developer role, stream_options
  const cut = greedy.slice(6, 9);
  const sr = await client.completions.create({ prompt: P, max_tokens: 24, temperature: 0,
                                              stop: [cut] });
  check("stop: the text ends before it", sr.choices[0].text === greedy.slice(0,
        greedy.indexOf(cut)) && sr.choices[0].finish_reason === "stop", [sr.choices[0], cut]);
  const lr = await client.chat.completions.create({ messages: MSG, max_tokens: 4,
                                                    temperature: 0, logprobs: true,
                                                    top_logprobs: 4 });
  const lc = lr.choices[0].logprobs?.content ?? [];
  check("logprobs and top_logprobs 4", lc.length === 4 && lc.every((x) =>
        x.top_logprobs.length === 4 && x.logprob <= 0 && x.top_logprobs[0].logprob >= x.logprob),
        lc[0]);
  const dv = await client.chat.completions.create({
    messages: [{ role: "developer", content: "Be brief." }, ...MSG], max_tokens: 6,
    temperature: 0 });
  const sy = await client.chat.completions.create({
    messages: [{ role: "system", content: "Be brief." }, ...MSG], max_tokens: 6,
    temperature: 0 });
  check("developer role = system", dv.choices[0].message.content ===
        sy.choices[0].message.content && dv.usage.prompt_tokens === sy.usage.prompt_tokens,
        [dv.usage, sy.usage]);
  const us = await client.chat.completions.create({ messages: MSG, max_tokens: 5,
                                                    stream: true, temperature: 0,
                                                    stream_options: { include_usage: true } });
  let usage = null;
  for await (const ch of us) if (ch.usage) usage = ch.usage;
  check("stream_options include_usage: usage chunk", usage && usage.completion_tokens <= 5 &&
        usage.prompt_tokens > 0, usage);

  // refused: unknown and unsupported fields name themselves; no-effect ones are taken
  e = await refused({ messages: MSG, max_tokens: 2, frobnicate: 1 });
  check("an unknown field: 400 naming it", e.status === 400 && e.param === "frobnicate" &&
        e.code === "unknown_parameter", e);
  e = await refused({ prompt: "x", max_tokens: 2, echo: true }, "cmpl");
  check("echo true: 400 naming echo", e.status === 400 && e.param === "echo", e);
  e = await refused({ prompt: "x", max_tokens: 2, suffix: "end" }, "cmpl");
  check("suffix: 400 naming suffix", e.status === 400 && e.param === "suffix", e);
  e = await refused({ messages: MSG, max_tokens: 2, mirostat: 2 });
  check("mirostat 2: 400 naming it", e.status === 400 && e.param === "mirostat", e);
  e = await refused({ messages: MSG, max_tokens: 2, top_k: 1.5 });
  check("top_k 1.5: 400 naming top_k", e.status === 400 && e.param === "top_k", e);
  const ne = await client.chat.completions.create({ messages: MSG, max_tokens: 2, user: "u1",
                                                    store: false, metadata: { a: "b" },
                                                    mirostat: 0 });
  check("user, store, metadata, mirostat 0: accepted", ne.choices.length === 1, ne);

  // the AI SDK: its fields arrive (its openai-compatible provider drops topK with a warning;
  // extra fields go through providerOptions, by the provider's name)
  const prov = createOpenAICompatible({ name: "swarm", baseURL: base + "/v1", apiKey: key,
                                        includeUsage: true });
  const ai1 = await generateText({ model: prov.chatModel("whatever"), prompt: "Hello",
                                   maxOutputTokens: 3, temperature: 1, seed: 9,
                                   providerOptions: { swarm: { top_k: 1 } }, maxRetries: 0 });
  const ai2 = await generateText({ model: prov.chatModel("whatever"), prompt: "Hello",
                                   maxOutputTokens: 3, temperature: 0, maxRetries: 0 });
  check("AI SDK generateText: maxOutputTokens 3, top_k 1 = greedy",
        ai1.usage.outputTokens <= 3 && ai1.text === ai2.text, [ai1.text, ai2.text, ai1.usage]);
  const ais = streamText({ model: prov.chatModel("whatever"), prompt: "Hello",
                           maxOutputTokens: 4, temperature: 0, maxRetries: 0 });
  let aitext = "";
  for await (const t of ais.textStream) aitext += t;
  check("AI SDK streamText = generateText (greedy)", aitext.startsWith(ai2.text.slice(0, 3)) &&
        (await ais.usage).outputTokens <= 4, [aitext, ai2.text]);

  // LangChain: its default request shape is accepted, n and stop honoured
  const lc1 = new ChatOpenAI({ apiKey: key || "none", configuration: { baseURL: base + "/v1" },
                               temperature: 0, maxTokens: 5, maxRetries: 0 });
  const lr1 = await lc1.invoke("Hello");
  const lc2 = new ChatOpenAI({ apiKey: key || "none", configuration: { baseURL: base + "/v1" },
                               temperature: 0, maxTokens: 5, maxRetries: 0, streaming: true });
  let ls = "";
  for await (const c of await lc2.stream("Hello")) ls += c.content;
  check("LangChain invoke = stream (greedy), 5 tokens at most",
        typeof lr1.content === "string" && lr1.content === ls &&
        (lr1.usage_metadata?.output_tokens ?? 0) <= 5, [lr1.content, ls, lr1.usage_metadata]);
  const lc3 = new ChatOpenAI({ apiKey: key || "none", configuration: { baseURL: base + "/v1" },
                               temperature: 1, maxTokens: 4, maxRetries: 0, n: 2 });
  const gen = await lc3.generate([["Hello"]]);
  check("LangChain n 2: two generations", gen.generations[0].length === 2, gen.generations[0]);
}

async function endpoints() {
  const [s1, t1] = await post("/tokenize", { content: "Hello world" });
  const [s2, t2] = await post("/tokenize", { content: "Hello world", add_special: true,
                                             with_pieces: true });
  check("/tokenize: ids; add_special puts BOS first; with_pieces pairs id and piece",
        s1 === 200 && t1.tokens.every(Number.isInteger) && s2 === 200 &&
        t2.tokens.length === t1.tokens.length + 1 && t2.tokens[1].id === t1.tokens[0] &&
        t2.tokens.slice(1).map((x) => x.piece).join("") === " Hello world", [t1, t2]);
  const [s3, d] = await post("/detokenize", { tokens: t1.tokens });
  check("/detokenize inverts /tokenize", s3 === 200 && d.content.trim() === "Hello world", d);
  const [s4, bad] = await post("/detokenize", { tokens: [1, -5] });
  check("/detokenize of a bad id: 400", s4 === 400 && bad.error.param === "tokens", bad);
  const msgs = [{ role: "system", content: "S" }, { role: "user", content: "Hi" }];
  const [s5, at] = await post("/apply-template", { messages: msgs });
  const [, tp] = await post("/tokenize", { content: at.prompt, add_special: true });
  const r = await client.chat.completions.create({ messages: msgs, max_tokens: 1 });
  check("/apply-template: the prompt a chat request tokenizes to", s5 === 200 &&
        at.prompt.includes("Hi") && tp.tokens.length === r.usage.prompt_tokens,
        [at, tp.tokens.length, r.usage]);
  const [s6, pr] = await get("/props");
  check("/props: llama-server's fields (n_ctx, total_slots, model_path, chat template)",
        s6 === 200 && pr.default_generation_settings.n_ctx === 256 && pr.total_slots === 4 &&
        pr.model_path.endsWith(".gguf") && typeof pr.chat_template === "string" &&
        pr.default_generation_settings.params.top_k === 0 && pr.arm === "reference" &&
        pr.meta.n_params > 0, pr);
  const [s7, sl] = await get("/slots");
  check("/slots: one entry per slot with its state", s7 === 200 && sl.length === 4 &&
        sl.every((x, i) => x.id === i && x.n_ctx === 256 && x.is_processing === false &&
                 x.params && x.next_token), sl);
  // a slot seen busy while a long stream runs
  const long = await client.completions.create({ prompt: "The", max_tokens: 200,
                                                 temperature: 0, stream: true,
                                                 ignore_eos: true });
  let busy = null, n = 0;
  for await (const c of long) {
    if (++n === 3) busy = (await get("/slots"))[1].filter((x) => x.is_processing);
  }
  check("/slots: the running request's slot is_processing with its tokens",
        busy && busy.length === 1 && busy[0].next_token.n_decoded >= 2 &&
        busy[0].n_cached_tokens === busy[0].n_prompt_tokens + busy[0].next_token.n_decoded &&
        busy[0].params.n_predict === 200, busy);
  const models = await client.models.list();
  const m = models.data[0];
  check("/v1/models: context length, parameters, tensor types, arm, workers",
        m.id === "tiny" && m.meta.n_ctx === 256 && m.context_length === 256 &&
        m.meta.n_params > 1e6 && m.meta.tensor_types.q8_0 > 0 && m.meta.arm === "reference" &&
        m.meta.workers === 0, m);
  check("/v1/models lists each --alias", models.data.map((x) => x.id).join() ===
        "tiny,gpt-4o-mini,my-alias", models.data.map((x) => x.id));
  const any = await client.chat.completions.create({ model: "some-other-model", messages: MSG,
                                                     max_tokens: 1 });
  check("one model served: any model name accepted and echoed", any.model ===
        "some-other-model", any.model);
  const lc = new ChatOpenAI({ apiKey: key || "none", configuration: { baseURL: base + "/v1" },
                              maxTokens: 2, maxRetries: 0 });
  const lr = await lc.invoke("Hi");
  check("LangChain's default model name works", typeof lr.content === "string" &&
        lr.response_metadata?.model_name !== undefined, lr.response_metadata);
}

async function strict() {
  let e = await refused({ model: "gpt-4o-mini", messages: MSG, max_tokens: 1 });
  check("--strict-model: another name is a 404 naming model", e.status === 404 &&
        e.param === "model" && e.code === "model_not_found", e);
  const a = await client.chat.completions.create({ model: "my-alias", messages: MSG,
                                                   max_tokens: 1 });
  const f = await client.chat.completions.create({ model: "tiny", messages: MSG,
                                                   max_tokens: 1 });
  check("--strict-model: the alias and the file's name are taken", a.model === "my-alias" &&
        f.model === "tiny", [a.model, f.model]);
}

async function cors() {
  const origin = rest[0];
  let r = await fetch(base + "/v1/chat/completions", { method: "OPTIONS", headers: {
    Origin: origin, "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type" } });
  const allowH = (r.headers.get("access-control-allow-headers") || "").toLowerCase();
  check("preflight: 204, the origin allowed, POST and Authorization allowed", r.status === 204 &&
        r.headers.get("access-control-allow-origin") === origin &&
        /POST/.test(r.headers.get("access-control-allow-methods") || "") &&
        allowH.includes("authorization") && allowH.includes("content-type"),
        [r.status, [...r.headers]]);
  r = await fetch(base + "/v1/chat/completions", { method: "POST", headers: { ...H, Origin: origin },
    body: JSON.stringify({ messages: MSG, max_tokens: 2, stream: true }) });
  const body = await r.text();
  check("a streamed reply carries Access-Control-Allow-Origin", r.status === 200 &&
        r.headers.get("access-control-allow-origin") === origin && body.includes("[DONE]"),
        [...r.headers]);
  r = await fetch(base + "/v1/models", { headers: { ...H, Origin: "http://evil.example" } });
  check("another origin gets no allow-origin", r.status === 200 &&
        r.headers.get("access-control-allow-origin") === null, [...r.headers]);
  r = await fetch(base + "/v1/models", { headers: { Origin: origin } });
  check("CORS does not bypass the key: 401 (with allow-origin, so the page can read it)",
        r.status === 401 && r.headers.get("access-control-allow-origin") === origin,
        [r.status, [...r.headers]]);
}

async function grace() {
  const pid = Number(rest[0]);
  // two long requests in flight (streamed and whole), then SIGTERM with --grace 0
  const streamP = (async () => {
    let text = "", err = null;
    try {
      const s = await client.chat.completions.create({ messages: MSG, max_tokens: 1900,
                                                       stream: true, ignore_eos: true });
      for await (const c of s) text += c.choices[0]?.delta?.content ?? "";
    } catch (e) { err = e; }
    return { text, err };
  })();
  const wholeP = client.completions.create({ prompt: "The", max_tokens: 1900,
                                             ignore_eos: true }).then(
    (r) => ({ r }), (e) => ({ err: e }));
  const raw = fetch(base + "/v1/completions", { method: "POST", headers: H,
    body: JSON.stringify({ prompt: "The", max_tokens: 1900, stream: true, ignore_eos: true }) })
    .then((r) => r.text());
  for (let i = 0; i < 2000; i++) {
    const [, sl] = await get("/slots");
    if (sl && sl.filter((x) => x.is_processing && x.next_token.n_decoded > 0).length === 3) break;
    await new Promise((res) => setTimeout(res, 5));
  }
  process.kill(pid, "SIGTERM");
  const s = await streamP, w = await wholeP, rawText = await raw;
  check("past --grace: the SDK's stream ends with the server's error",
        s.err && /grace|stopped/.test(s.err.message) && s.text.length > 0,
        [s.err?.message, s.text.length]);
  check("past --grace: a whole reply is a 503 error object", w.err && w.err.status === 503 &&
        (w.err.code ?? w.err.error?.code) === "shutting_down", [w.err?.status, w.err?.message]);
  const evs = rawText.split("\n\n").filter((x) => x.startsWith("data: "));
  check("past --grace: the raw stream's last events are an error and [DONE]",
        evs.length >= 3 && evs[evs.length - 1] === "data: [DONE]" &&
        JSON.parse(evs[evs.length - 2].slice(6)).error?.code === "shutting_down",
        evs.slice(-2));
}

const phases = { fields, endpoints, strict, cors, grace };
try {
  await phases[phase]();
} catch (e) {
  check(`${phase}: ran to the end`, false, e.stack || String(e));
}

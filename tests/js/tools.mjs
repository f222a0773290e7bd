// tools.mjs — structured output and tool calls through the real clients (openai 6, the AI SDK 6
// with @ai-sdk/openai-compatible, LangChain's ChatOpenAI) against `swarm serve` on a random-weight
// model: the weights are noise, the grammar makes every reply valid. tests/
// Usage: node tests/js/tools.mjs PORT MODEL [full|forced]   (full: every check; forced: the
// forced-call checks only, for the other template families). Prints "ok NAME" / "FAIL NAME: why".
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(path.resolve('build/npm/node_modules') + '/');
const OpenAI = require('openai').default ?? require('openai');
const { z } = require('zod');

const [port, model, mode = 'full'] = process.argv.slice(2);
const baseURL = `http://127.0.0.1:${port}/v1`;
const client = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0 });
let failed = 0;

async function check(name, fn) {
    try {
        await fn();
        console.log(`ok ${name}`);
    } catch (e) {
        failed++;
        console.log(`FAIL ${name}: ${(e && e.stack) || e}`.split('\n').slice(0, 6).join('\n'));
    }
}
function assert(cond, msg) {
    if (!cond) throw new Error(msg);
}

const Person = z.object({
    name: z.string(),
    age: z.number().int(),
    email: z.string().optional(),
    tags: z.array(z.enum(['red', 'green'])).max(2),
    born: z.string().regex(/^\d{4}-\d{2}-\d{2}$/),
});
const personSchema = {
    type: 'object',
    properties: {
        name: { type: 'string', maxLength: 12 },
        age: { type: 'integer', minimum: 0, maximum: 150 },
        email: { type: 'string', maxLength: 12 },
        tags: { type: 'array', items: { enum: ['red', 'green'] }, maxItems: 2 },
        born: { type: 'string', format: 'date' },
    },
    required: ['name', 'age', 'tags', 'born'],
    additionalProperties: false,
};
const Weather = z.object({ city: z.string(), unit: z.enum(['c', 'f']) }).strict();
const weatherTool = {
    type: 'function',
    function: {
        name: 'get_weather',
        description: 'The weather in a city',
        parameters: {
            type: 'object',
            properties: { city: { type: 'string', maxLength: 16 }, unit: { enum: ['c', 'f'] } },
            required: ['city', 'unit'],
            additionalProperties: false,
        },
    },
};
const timeTool = {
    type: 'function',
    function: { name: 'get_time', parameters: { type: 'object', properties: { tz: { type: 'string', maxLength: 8 } }, required: ['tz'] } },
};
const user = [{ role: 'user', content: 'Tell me.' }];

// ---- openai SDK ----
async function forcedChecks() {
    await check('openai: tool_choice a function: arguments validate', async () => {
        const r = await client.chat.completions.create({
            model, messages: user, max_tokens: 80, temperature: 1, seed: 3,
            tools: [weatherTool, timeTool],
            tool_choice: { type: 'function', function: { name: 'get_weather' } },
        });
        const c = r.choices[0];
        assert(c.finish_reason === 'tool_calls', `finish_reason ${c.finish_reason}`);
        assert(c.message.tool_calls.length === 1, `${c.message.tool_calls.length} calls`);
        const tc = c.message.tool_calls[0];
        assert(tc.type === 'function' && tc.function.name === 'get_weather', JSON.stringify(tc));
        assert(typeof tc.id === 'string' && tc.id.length > 0, 'no id');
        Weather.parse(JSON.parse(tc.function.arguments));
    });
    await check('openai: tool_choice required, streamed: deltas join into valid calls', async () => {
        const s = await client.chat.completions.create({
            model, messages: user, max_tokens: 120, seed: 5, stream: true,
            tools: [weatherTool, timeTool], tool_choice: 'required',
        });
        const calls = [];
        let finish = null, content = '';
        for await (const ch of s) {
            const d = ch.choices[0]?.delta ?? {};
            if (d.content) content += d.content;
            for (const t of d.tool_calls ?? []) {
                calls[t.index] ??= { id: '', name: '', arguments: '' };
                if (t.id) calls[t.index].id = t.id;
                if (t.function?.name) calls[t.index].name += t.function.name;
                if (t.function?.arguments) calls[t.index].arguments += t.function.arguments;
            }
            if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
        }
        assert(finish === 'tool_calls', `finish ${finish}`);
        assert(content === '', `content streamed: ${content}`);
        assert(calls.length >= 1, 'no calls');
        for (const c of calls) {
            assert(c.id, 'a call without id');
            const a = JSON.parse(c.arguments);
            if (c.name === 'get_weather') Weather.parse(a);
            else assert(c.name === 'get_time' && typeof a.tz === 'string', JSON.stringify(c));
        }
    });
    await check('openai: n 2 with a forced call: each choice has its own valid call', async () => {
        const r = await client.chat.completions.create({
            model, messages: user, max_tokens: 80, seed: 13, n: 2,
            tools: [weatherTool, timeTool],
            tool_choice: { type: 'function', function: { name: 'get_weather' } },
        });
        assert(r.choices.length === 2, `${r.choices.length} choices`);
        const ids = new Set();
        r.choices.forEach((c, i) => {
            assert(c.index === i, `index ${c.index}`);
            assert(c.finish_reason === 'tool_calls', `choice ${i}: finish_reason ${c.finish_reason}`);
            assert(c.message.tool_calls?.length === 1, `choice ${i}: ${JSON.stringify(c.message)}`);
            const tc = c.message.tool_calls[0];
            assert(tc.function.name === 'get_weather', JSON.stringify(tc));
            Weather.parse(JSON.parse(tc.function.arguments));
            ids.add(tc.id);
        });
        assert(ids.size === 2, 'the two choices share a call id');
    });
    await check('openai: n 2 with tool_choice required, streamed: calls per choice index', async () => {
        const s = await client.chat.completions.create({
            model, messages: user, max_tokens: 120, seed: 15, stream: true, n: 2,
            tools: [weatherTool, timeTool], tool_choice: 'required',
        });
        const calls = [[], []], finish = [null, null];
        for await (const ch of s) {
            const c = ch.choices[0];
            if (!c) continue;
            assert(c.index === 0 || c.index === 1, `index ${c.index}`);
            assert(!c.delta?.content, `content streamed: ${c.delta?.content}`);
            for (const t of c.delta?.tool_calls ?? []) {
                calls[c.index][t.index] ??= { id: '', name: '', arguments: '' };
                const k = calls[c.index][t.index];
                if (t.id) k.id = t.id;
                if (t.function?.name) k.name += t.function.name;
                if (t.function?.arguments) k.arguments += t.function.arguments;
            }
            if (c.finish_reason) finish[c.index] = c.finish_reason;
        }
        for (const i of [0, 1]) {
            assert(finish[i] === 'tool_calls', `choice ${i}: finish ${finish[i]}`);
            assert(calls[i].length >= 1, `choice ${i}: no calls`);
            for (const c of calls[i]) {
                const a = JSON.parse(c.arguments);
                if (c.name === 'get_weather') Weather.parse(a);
                else assert(c.name === 'get_time' && typeof a.tz === 'string', JSON.stringify(c));
            }
        }
    });
    await check('openai: parallel_tool_calls false: exactly one call', async () => {
        const r = await client.chat.completions.create({
            model, messages: user, max_tokens: 80, seed: 9,
            tools: [weatherTool, timeTool], tool_choice: 'required', parallel_tool_calls: false,
        });
        assert(r.choices[0].message.tool_calls.length === 1, JSON.stringify(r.choices[0].message));
    });
    await check('openai: the call history (content null + tool_calls, role tool) renders', async () => {
        const r = await client.chat.completions.create({
            model, max_tokens: 4, tools: [weatherTool],
            messages: [
                ...user,
                { role: 'assistant', content: null, tool_calls: [{ id: 'abcdefghi', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo","unit":"c"}' } }] },
                { role: 'tool', tool_call_id: 'abcdefghi', content: '{"temp": -3}' },
            ],
        });
        assert(r.choices[0].message.role === 'assistant', JSON.stringify(r));
        assert(r.usage.prompt_tokens > 30, `prompt ${r.usage.prompt_tokens}`);
    });
}

async function structuredChecks() {
    await check('openai: response_format json_schema: the reply validates', async () => {
        for (const seed of [1, 2]) {
            const r = await client.chat.completions.create({
                model, messages: user, max_tokens: 120, seed,
                response_format: { type: 'json_schema', json_schema: { name: 'person', schema: personSchema, strict: true } },
            });
            Person.strict().parse(JSON.parse(r.choices[0].message.content));
        }
    });
    await check('openai: n 2 with a json_schema response_format: each choice validates', async () => {
        const rf = { type: 'json_schema', json_schema: { name: 'person', schema: personSchema, strict: true } };
        const r = await client.chat.completions.create({
            model, messages: user, max_tokens: 120, seed: 6, n: 2, response_format: rf,
        });
        assert(r.choices.length === 2, `${r.choices.length} choices`);
        r.choices.forEach((c, i) => {
            assert(c.index === i && c.finish_reason === 'stop', `choice ${i}: ${c.finish_reason}`);
            Person.strict().parse(JSON.parse(c.message.content));
        });
        assert(r.timings.grammar_ms > 0, JSON.stringify(r.timings));
        const s = await client.chat.completions.create({
            model, messages: user, max_tokens: 120, seed: 6, n: 2, response_format: rf, stream: true,
        });
        const text = ['', ''];
        for await (const ch of s) {
            const c = ch.choices[0];
            if (c?.delta?.content) text[c.index] += c.delta.content;
        }
        text.forEach((t) => Person.strict().parse(JSON.parse(t)));
    });
    await check('openai: response_format json_object with a small max_tokens still closes', async () => {
        const r = await client.chat.completions.create({
            model, messages: user, max_tokens: 12, seed: 4, response_format: { type: 'json_object' },
        });
        const o = JSON.parse(r.choices[0].message.content);
        assert(o && typeof o === 'object' && !Array.isArray(o), r.choices[0].message.content);
        assert(r.usage.completion_tokens <= 12, `${r.usage.completion_tokens} tokens`);
    });
    await check('openai: llama.cpp grammar field on /v1/completions', async () => {
        const r = await client.completions.create({
            model, prompt: 'Answer:', max_tokens: 10, seed: 2,
            grammar: 'root ::= ("yes" | "no") " " [0-9]{2}',
        });
        assert(/^(yes|no) [0-9]{2}$/.test(r.choices[0].text), JSON.stringify(r.choices[0].text));
    });
    await check('openai: llama.cpp json_schema field on /v1/completions', async () => {
        const r = await client.completions.create({
            model, prompt: 'JSON:', max_tokens: 40, seed: 2,
            json_schema: { type: 'array', items: { type: 'boolean' }, minItems: 2, maxItems: 3 },
        });
        const a = JSON.parse(r.choices[0].text);
        assert(Array.isArray(a) && a.length >= 2 && a.length <= 3 && a.every((x) => typeof x === 'boolean'), r.choices[0].text);
    });
    await check('openai: llama.cpp grammar_lazy: free text until the trigger, then the grammar', async () => {
        const r = await client.completions.create({
            model, prompt: 'Once', max_tokens: 60, seed: 3,
            grammar: 'root ::= "e" [0-9]{3} "!"', grammar_lazy: true,
            grammar_triggers: [{ type: 1, value: 'e' }],
        });
        const t = r.choices[0].text, at = t.indexOf('e');
        assert(at >= 0 && /^e[0-9]{3}!$/.test(t.slice(at)), JSON.stringify(t));
        assert(r.choices[0].finish_reason === 'stop', r.choices[0].finish_reason);
    });
    await check('openai: an unsupported schema keyword is a 400 naming it', async () => {
        try {
            await client.chat.completions.create({
                model, messages: user, max_tokens: 5,
                response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '^a$' } } },
            });
            throw new Error('no error');
        } catch (e) {
            assert(e.status === 400 && /'pattern'/.test(e.message), `${e.status} ${e.message}`);
        }
    });
    await check('openai: bad GBNF is a 400 with the position', async () => {
        try {
            await client.completions.create({ model, prompt: 'x', max_tokens: 5, grammar: 'root ::= "a' });
            throw new Error('no error');
        } catch (e) {
            assert(e.status === 400 && /line 1, column/.test(e.message), `${e.status} ${e.message}`);
        }
    });
    await check('openai: tools: [] is plain chat', async () => {
        const r = await client.chat.completions.create({ model, messages: user, max_tokens: 3, tools: [] });
        assert(r.choices[0].message.tool_calls === undefined, JSON.stringify(r.choices[0].message));
    });
}

// ---- AI SDK: the tool loop ----
async function aiSdkChecks() {
    const { generateText, generateObject, tool, stepCountIs } = require('ai');
    const { createOpenAICompatible } = require('@ai-sdk/openai-compatible');
    const provider = createOpenAICompatible({ name: 'swarm', baseURL, apiKey: 'none', supportsStructuredOutputs: true });
    await check('ai sdk: generateText tool loop completes with the tool result in the history', async () => {
        const seen = [];
        const r = await generateText({
            model: provider(model), prompt: 'What is the weather in Oslo?', maxOutputTokens: 60, seed: 1,
            tools: {
                get_weather: tool({
                    description: 'The weather in a city',
                    inputSchema: z.object({ city: z.string().max(16), unit: z.enum(['c', 'f']) }),
                    execute: async (input) => { seen.push(input); return { temp: 21, city: input.city }; },
                }),
            },
            // the first step must call (the weights are noise), the second must answer
            prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? 'required' : 'none' }),
            stopWhen: stepCountIs(3),
        });
        assert(r.steps.length === 2, `${r.steps.length} steps`);
        assert(seen.length >= 1, 'execute never ran');
        Weather.parse(seen[0]);
        const s0 = r.steps[0];
        assert(s0.finishReason === 'tool-calls', `step 0 finish ${s0.finishReason}`);
        assert(s0.toolResults.length >= 1 && s0.toolResults[0].output.temp === 21, JSON.stringify(s0.toolResults));
        let body = r.steps[1].request.body;
        if (typeof body === 'string') body = JSON.parse(body);
        const toolMsg = body.messages.find((m) => m.role === 'tool');
        assert(toolMsg && /"temp":21/.test(toolMsg.content) && toolMsg.tool_call_id === s0.toolCalls[0].toolCallId,
            `step 1 request lacks the tool result: ${JSON.stringify(body).slice(0, 400)}`);
        assert(r.response.messages.some((m) => m.role === 'tool'), 'no tool message in the response history');
    });
    await check('ai sdk: generateObject with a zod schema validates', async () => {
        const r = await generateObject({
            model: provider(model), prompt: 'A person', maxOutputTokens: 120, seed: 3,
            schema: z.object({ name: z.string().max(10), ok: z.boolean(), n: z.number().int().min(0).max(9) }),
        });
        assert(typeof r.object.ok === 'boolean' && r.object.n >= 0 && r.object.n <= 9, JSON.stringify(r.object));
    });
}

// ---- LangChain ----
async function langchainChecks() {
    const { ChatOpenAI } = require('@langchain/openai');
    const { tool } = require('@langchain/core/tools');
    const llm = new ChatOpenAI({ model, apiKey: 'none', configuration: { baseURL }, maxTokens: 80, temperature: 1, maxRetries: 0 });
    await check('langchain: bindTools with a forced tool: tool_calls args validate', async () => {
        const weather = tool(async (a) => JSON.stringify(a), {
            name: 'get_weather', description: 'The weather in a city',
            schema: z.object({ city: z.string().max(16), unit: z.enum(['c', 'f']) }),
        });
        const r = await llm.bindTools([weather], { tool_choice: 'get_weather' }).invoke('Weather in Oslo?');
        assert(r.tool_calls.length >= 1 && r.tool_calls[0].name === 'get_weather', JSON.stringify(r.tool_calls));
        Weather.parse(r.tool_calls[0].args);
    });
    for (const method of ['jsonSchema', 'functionCalling']) {
        await check(`langchain: withStructuredOutput (${method}) validates`, async () => {
            const S = z.object({ title: z.string().max(10), score: z.number().int().min(1).max(5), done: z.boolean() });
            const r = await llm.withStructuredOutput(S, { method }).invoke('Rate it.');
            S.parse(r);
        });
    }
}

if (mode === 'forced') {
    await forcedChecks();
} else {
    await forcedChecks();
    await structuredChecks();
    await aiSdkChecks();
    await langchainChecks();
}
process.exit(failed ? 1 : 0);

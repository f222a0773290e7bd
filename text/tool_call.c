/* tool_call.c — the Hermes/Qwen, Llama 3.1 and Mistral tool-call formats: prompts with tools
 * and call history, call grammars, replies parsed into calls. text/ */
#include "text/tool_call.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/json_schema.h"

tool_format tool_format_of(const char *t)
{
    if (!t)
        return TOOL_FMT_NONE;
    if (!strcmp(t, "chatml"))
        return TOOL_FMT_HERMES;
    if (!strcmp(t, "llama3"))
        return TOOL_FMT_LLAMA3;
    /* mistral-v7 is left out: Mistral Small 3.2's template writes calls another way
     * ([TOOL_CALLS]name[CALL_ID]id[ARGS]{...}), not checked here yet */
    if (!strcmp(t, "mistral-v3") || !strcmp(t, "mistral-v3-tekken"))
        return TOOL_FMT_MISTRAL;
    return TOOL_FMT_NONE;
}

const char *tool_format_name(tool_format f)
{
    switch (f) {
    case TOOL_FMT_HERMES: return "hermes";
    case TOOL_FMT_LLAMA3: return "llama3";
    case TOOL_FMT_MISTRAL: return "mistral";
    default: return "none";
    }
}

const char *tool_trigger(tool_format f)
{
    switch (f) {
    case TOOL_FMT_HERMES: return "<tool_call>";
    case TOOL_FMT_LLAMA3: return "{\"name\": \"";
    case TOOL_FMT_MISTRAL: return "[TOOL_CALLS]";
    default: return "";
    }
}

/* ---- text building ---- */

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} s_buf;

static void s_put(s_buf *b, const char *p, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void s_puts(s_buf *b, const char *s)
{
    s_put(b, s, strlen(s));
}

static void s_trimmed(s_buf *b, const char *s)
{
    size_t a = 0, z = strlen(s);
    while (a < z && isspace((unsigned char)s[a]))
        a++;
    while (z > a && isspace((unsigned char)s[z - 1]))
        z--;
    s_put(b, s + a, z - a);
}

/* Jinja's tojson (Python's json.dumps: ", " and ": " separators, UTF-8 kept). */
static void s_json(s_buf *b, const json_t *v, int indent)
{
    char *t = json_dumps(v, JSON_ENCODE_ANY | (indent ? JSON_INDENT(indent) : 0));
    if (!t) {
        b->oom = 1;
        return;
    }
    s_puts(b, t);
    free(t);
}

static void s_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void s_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- checks ---- */

static int s_name_ok(const char *n)
{
    size_t l = strlen(n);
    if (l < 1 || l > 64)
        return 0;
    for (size_t i = 0; i < l; i++)
        if (!isalnum((unsigned char)n[i]) && n[i] != '_' && n[i] != '-')
            return 0;
    return 1;
}

int tool_check(const json_t *tools, char *err, size_t errlen)
{
    if (!json_is_array(tools)) {
        s_fail(err, errlen, "tools: must be an array");
        return -1;
    }
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *f = json_object_get(t, "function");
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || !type || strcmp(type, "function") || !json_is_object(f)) {
            s_fail(err, errlen, "tools[%zu]: each tool must be {\"type\": \"function\", "
                   "\"function\": {...}}", i);
            return -1;
        }
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || !s_name_ok(name)) {
            s_fail(err, errlen, "tools[%zu].function.name: 1..64 characters of a-z, A-Z, 0-9, "
                   "_ and -", i);
            return -1;
        }
        json_t *p = json_object_get(f, "parameters");
        if (p && !json_is_object(p)) {
            s_fail(err, errlen, "tools[%zu].function.parameters: must be a JSON Schema object", i);
            return -1;
        }
        for (size_t k = 0; k < i; k++)
            if (!strcmp(name, json_string_value(json_object_get(
                                  json_object_get(json_array_get(tools, k), "function"), "name")))) {
                s_fail(err, errlen, "tools[%zu].function.name: '%s' is defined twice", i, name);
                return -1;
            }
    }
    return 0;
}

/* ---- messages ---- */

/* A message's text: a string, an array of {"type":"text"} parts joined, or "" for null. NULL
 * when it is something else. malloc'd. */
static char *s_text(const json_t *c)
{
    if (!c || json_is_null(c))
        return strdup("");
    if (json_is_string(c))
        return strdup(json_string_value(c));
    if (!json_is_array(c))
        return NULL;
    s_buf b = { 0 };
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        const char *ty = json_string_value(json_object_get(part, "type"));
        json_t *t = json_object_get(part, "text");
        if (!ty || strcmp(ty, "text") || !json_is_string(t)) {
            free(b.s);
            return NULL;
        }
        s_put(&b, json_string_value(t), json_string_length(t));
    }
    if (!b.s)
        return strdup("");
    return b.oom ? NULL : b.s;
}

typedef struct {
    const char *role;             /* system, user, assistant, tool */
    char *text;
    const json_t *calls;          /* assistant: tool_calls (array) or NULL */
    const char *call_id;          /* tool */
} s_msg;

static void s_msgs_free(s_msg *m, size_t n)
{
    for (size_t i = 0; m && i < n; i++)
        free(m[i].text);
    free(m);
}

static s_msg *s_msgs(const json_t *msgs, size_t *n, char *err, size_t errlen)
{
    *n = json_array_size(msgs);
    s_msg *m = calloc(*n ? *n : 1, sizeof *m);
    if (!m) {
        s_fail(err, errlen, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < *n; i++) {
        const json_t *e = json_array_get(msgs, i);
        const char *r = json_string_value(json_object_get(e, "role"));
        if (!r) {
            s_fail(err, errlen, "messages[%zu]: no role", i);
            goto err;
        }
        if (!strcmp(r, "developer"))
            r = "system";
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool")) {
            s_fail(err, errlen, "messages[%zu]: role '%s' is not system, developer, user, "
                   "assistant or tool", i, r);
            goto err;
        }
        m[i].role = r;
        json_t *c = json_object_get(e, "content");
        if (!(m[i].text = s_text(c))) {
            s_fail(err, errlen, "messages[%zu].content: a string, null, or an array of "
                   "{\"type\":\"text\"} parts", i);
            goto err;
        }
        json_t *calls = json_object_get(e, "tool_calls");
        if (calls && !json_is_null(calls)) {
            if (strcmp(r, "assistant") || !json_is_array(calls)) {
                s_fail(err, errlen, "messages[%zu].tool_calls: only an assistant message has "
                       "tool_calls, an array", i);
                goto err;
            }
            size_t k;
            json_t *tc;
            json_array_foreach(calls, k, tc) {
                json_t *f = json_object_get(tc, "function");
                if (!json_is_string(json_object_get(f, "name")) ||
                    !json_is_string(json_object_get(f, "arguments"))) {
                    s_fail(err, errlen, "messages[%zu].tool_calls[%zu]: function.name and "
                           "function.arguments must be strings", i, k);
                    goto err;
                }
            }
            if (json_array_size(calls))
                m[i].calls = calls;
        } else if (!c || json_is_null(c)) {
            if (strcmp(r, "assistant")) {
                s_fail(err, errlen, "messages[%zu]: content is null (only an assistant message "
                       "with tool_calls may have none)", i);
                goto err;
            }
        }
        if (!strcmp(r, "tool")) {
            m[i].call_id = json_string_value(json_object_get(e, "tool_call_id"));
            if (!m[i].call_id) {
                s_fail(err, errlen, "messages[%zu]: a tool message needs its tool_call_id", i);
                goto err;
            }
        }
    }
    return m;
err:
    s_msgs_free(m, *n);
    return NULL;
}

/* A call's arguments as JSON (parsed from the string the client sends back; kept as a string
 * if it does not parse). New reference. */
static json_t *s_args(const json_t *call)
{
    const char *a = json_string_value(json_object_get(json_object_get(call, "function"), "arguments"));
    json_t *j = a ? json_loads(a, JSON_DECODE_ANY, NULL) : NULL;
    return j ? j : json_string(a ? a : "");
}

static const char *s_call_name(const json_t *call)
{
    return json_string_value(json_object_get(json_object_get(call, "function"), "name"));
}

#define S_QWEN_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

const char *tool_default_system(const char *jinja)
{
    return jinja && strstr(jinja, S_QWEN_SYSTEM) ? S_QWEN_SYSTEM : NULL;
}

/* Qwen2.5's template. */
static void s_hermes(s_buf *b, const s_msg *m, size_t n, const json_t *tools, int gen,
                     const char *dflt)
{
    size_t i = 0;
    if (json_array_size(tools)) {
        s_puts(b, "<|im_start|>system\n");
        if (n && !strcmp(m[0].role, "system"))
            s_puts(b, m[i++].text);
        else if (dflt)
            s_puts(b, dflt);
        s_puts(b, "\n\n# Tools\n\nYou may call one or more functions to assist with the user "
                  "query.\n\nYou are provided with function signatures within <tools></tools> "
                  "XML tags:\n<tools>");
        size_t k;
        json_t *t;
        json_array_foreach(tools, k, t) {
            s_puts(b, "\n");
            s_json(b, t, 0);
        }
        s_puts(b, "\n</tools>\n\nFor each function call, return a json object with function "
                  "name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                  "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
                  "</tool_call><|im_end|>\n");
    }
    for (; i < n; i++) {
        if (!strcmp(m[i].role, "tool")) {
            if (i == 0 || strcmp(m[i - 1].role, "tool"))
                s_puts(b, "<|im_start|>user");
            s_puts(b, "\n<tool_response>\n");
            s_puts(b, m[i].text);
            s_puts(b, "\n</tool_response>");
            if (i + 1 == n || strcmp(m[i + 1].role, "tool"))
                s_puts(b, "<|im_end|>\n");
        } else if (m[i].calls) {
            s_puts(b, "<|im_start|>assistant");
            if (m[i].text[0]) {
                s_puts(b, "\n");
                s_puts(b, m[i].text);
            }
            size_t k;
            json_t *c;
            json_array_foreach(m[i].calls, k, c) {
                s_puts(b, "\n<tool_call>\n{\"name\": \"");
                s_puts(b, s_call_name(c));
                s_puts(b, "\", \"arguments\": ");
                json_t *a = s_args(c);
                s_json(b, a, 0);
                json_decref(a);
                s_puts(b, "}\n</tool_call>");
            }
            s_puts(b, "<|im_end|>\n");
        } else {
            s_puts(b, "<|im_start|>");
            s_puts(b, m[i].role);
            s_puts(b, "\n");
            s_puts(b, m[i].text);
            s_puts(b, "<|im_end|>\n");
        }
    }
    if (gen)
        s_puts(b, "<|im_start|>assistant\n");
}

/* Llama 3.1's template (tools in the first user message, its default). */
static int s_llama3(s_buf *b, const s_msg *m, size_t n, const json_t *tools, int gen, char *err,
                    size_t errlen)
{
    size_t i = 0;
    int has_tools = json_array_size(tools) > 0;
    s_puts(b, "<|start_header_id|>system<|end_header_id|>\n\n");
    if (has_tools)
        s_puts(b, "Environment: ipython\n");
    s_puts(b, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
    if (n && !strcmp(m[0].role, "system"))
        s_trimmed(b, m[i++].text);
    s_puts(b, "<|eot_id|>");
    if (has_tools) {
        if (i == n) {
            s_fail(err, errlen, "messages: Llama 3's template puts the tools in the first user "
                   "message, and there is none");
            return -1;
        }
        s_puts(b, "<|start_header_id|>user<|end_header_id|>\n\n"
                  "Given the following functions, please respond with a JSON for a function "
                  "call with its proper arguments that best answers the given prompt.\n\n"
                  "Respond in the format {\"name\": function name, \"parameters\": dictionary of "
                  "argument name and its value}.Do not use variables.\n\n");
        size_t k;
        json_t *t;
        json_array_foreach(tools, k, t) {
            s_json(b, t, 4);
            s_puts(b, "\n\n");
        }
        s_trimmed(b, m[i++].text);
        s_puts(b, "<|eot_id|>");
    }
    for (; i < n; i++) {
        if (m[i].calls) {
            if (json_array_size(m[i].calls) != 1) {
                s_fail(err, errlen, "messages[%zu]: Llama 3's template takes one tool call per "
                       "assistant message", i);
                return -1;
            }
            const json_t *c = json_array_get(m[i].calls, 0);
            s_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"");
            s_puts(b, s_call_name(c));
            s_puts(b, "\", \"parameters\": ");
            json_t *a = s_args(c);
            s_json(b, a, 0);
            json_decref(a);
            s_puts(b, "}<|eot_id|>");
        } else if (!strcmp(m[i].role, "tool")) {
            /* the template's "content is iterable" holds for a string too: it is JSON-quoted */
            s_puts(b, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            json_t *s = json_string(m[i].text);
            s_json(b, s, 0);
            json_decref(s);
            s_puts(b, "<|eot_id|>");
        } else {
            s_puts(b, "<|start_header_id|>");
            s_puts(b, m[i].role);
            s_puts(b, "<|end_header_id|>\n\n");
            s_trimmed(b, m[i].text);
            s_puts(b, "<|eot_id|>");
        }
    }
    if (gen)
        s_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

/* Mistral's v3 template (Mistral-7B-Instruct-v0.3); Tekken (Mistral Nemo) drops the spaces
 * after the tags and writes an answer untrimmed. */
static void s_mistral(s_buf *b, const char *tmpl, const s_msg *m, size_t n, const json_t *tools)
{
    int sp = !strcmp(tmpl, "mistral-v3");
    const char *gap = sp ? " " : "";
    size_t last_user = n, i;
    const char *sys = NULL;
    for (i = 0; i < n; i++)
        if (!strcmp(m[i].role, "user"))
            last_user = i;
    for (i = 0; i < n; i++) {
        if (!strcmp(m[i].role, "system")) {
            sys = m[i].text;
        } else if (!strcmp(m[i].role, "user")) {
            if (i == last_user && json_array_size(tools)) {
                s_puts(b, "[AVAILABLE_TOOLS]");
                s_puts(b, gap);
                s_puts(b, "[");
                size_t k;
                json_t *t;
                json_array_foreach(tools, k, t) {
                    /* {"type": "function", "function": {...}}, the function's keys in order */
                    json_t *f = json_object_get(t, "function");
                    s_puts(b, k ? ", " : "");
                    s_puts(b, "{\"type\": \"function\", \"function\": {");
                    const char *key;
                    json_t *v;
                    int first = 1;
                    json_object_foreach(f, key, v) {
                        if (!strcmp(key, "return"))
                            continue;
                        s_puts(b, first ? "\"" : ", \"");
                        first = 0;
                        s_puts(b, key);
                        s_puts(b, "\": ");
                        if (json_is_string(v)) {
                            s_puts(b, "\"");
                            s_puts(b, json_string_value(v));
                            s_puts(b, "\"");
                        } else {
                            s_json(b, v, 0);
                        }
                    }
                    s_puts(b, "}}");
                }
                s_puts(b, "][/AVAILABLE_TOOLS]");
            }
            s_puts(b, "[INST]");
            s_puts(b, gap);
            if (i + 1 == n && sys) { /* the template's loop.last: only a final user turn */
                s_puts(b, sys);
                s_puts(b, "\n\n");
            }
            s_puts(b, m[i].text);
            s_puts(b, "[/INST]");
        } else if (m[i].calls) {
            s_puts(b, "[TOOL_CALLS]");
            s_puts(b, gap);
            s_puts(b, "[");
            size_t k;
            json_t *c;
            json_array_foreach(m[i].calls, k, c) {
                json_t *f = json_pack("{s:s,s:o}", "name", s_call_name(c), "arguments", s_args(c));
                char *t = f ? json_dumps(f, 0) : NULL;
                json_decref(f);
                if (!t) {
                    b->oom = 1;
                    return;
                }
                t[strlen(t) - 1] = 0; /* out[:-1]: the id goes inside */
                s_puts(b, k ? ", " : "");
                s_puts(b, t);
                free(t);
                s_puts(b, ", \"id\": \"");
                const char *id = json_string_value(json_object_get(c, "id"));
                s_puts(b, id ? id : "");
                s_puts(b, "\"}");
            }
            s_puts(b, "]</s>");
        } else if (!strcmp(m[i].role, "assistant")) {
            if (sp) { /* v3: " " + content|trim; Tekken: the content as it is */
                s_puts(b, " ");
                s_trimmed(b, m[i].text);
            } else {
                s_puts(b, m[i].text);
            }
            s_puts(b, "</s>");
        } else {
            s_puts(b, "[TOOL_RESULTS]");
            s_puts(b, gap);
            s_puts(b, "{\"content\": ");
            s_puts(b, m[i].text);
            s_puts(b, ", \"call_id\": \"");
            s_puts(b, m[i].call_id);
            s_puts(b, "\"}[/TOOL_RESULTS]");
        }
    }
}

char *tool_render(const char *tmpl, const char *dflt, const json_t *messages,
                  const json_t *tools, int gen, char *err, size_t errlen)
{
    tool_format f = tool_format_of(tmpl);
    if (f == TOOL_FMT_NONE) {
        s_fail(err, errlen, "the chat template '%s' has no tool-call format swarm knows "
               "(chatml, llama3, mistral-v3 and mistral-v3-tekken have)", tmpl ? tmpl : "");
        return NULL;
    }
    if (!json_is_array(messages) || !json_array_size(messages)) {
        s_fail(err, errlen, "messages: must be a non-empty array");
        return NULL;
    }
    size_t n = 0;
    s_msg *m = s_msgs(messages, &n, err, errlen);
    if (!m)
        return NULL;
    s_buf b = { 0 };
    int rc = 0;
    if (f == TOOL_FMT_HERMES)
        s_hermes(&b, m, n, tools, gen, dflt);
    else if (f == TOOL_FMT_LLAMA3)
        rc = s_llama3(&b, m, n, tools, gen, err, errlen);
    else
        s_mistral(&b, tmpl, m, n, tools);
    s_msgs_free(m, n);
    if (rc || b.oom) {
        if (b.oom)
            s_fail(err, errlen, "out of memory");
        free(b.s);
        return NULL;
    }
    return b.s ? b.s : strdup("");
}

/* ---- grammars ---- */

char *tool_grammar(tool_format f, const json_t *tools, const char *only, int parallel,
                   char *err, size_t errlen)
{
    json_gbnf *g = json_gbnf_new();
    s_buf alts = { 0 };
    char *text = NULL;
    if (!g) {
        s_fail(err, errlen, "out of memory");
        return NULL;
    }
    const char *argkey = f == TOOL_FMT_LLAMA3 ? "parameters" : "arguments";
    size_t i;
    json_t *t;
    int any = 0;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (only && strcmp(only, name))
            continue;
        json_t *params = json_object_get(fn, "parameters");
        json_t *any_obj = params ? NULL : json_pack("{s:s}", "type", "object");
        char rn[96], e2[256];
        snprintf(rn, sizeof rn, "%s-args", name);
        const char *ar = json_gbnf_add(g, params ? params : any_obj, rn, e2, sizeof e2);
        json_decref(any_obj);
        if (!ar) {
            s_fail(err, errlen, "tools[%zu].function.parameters: %s", i, e2);
            goto out;
        }
        /* "name\", \"arguments\": " as one literal, then the arguments */
        char head[160];
        snprintf(head, sizeof head, "%s\", \"%s\": ", name, argkey);
        char *lit = json_schema_literal(head, strlen(head));
        if (!lit)
            goto oom;
        s_put(&alts, any ? " | " : "", any ? 3 : 0);
        s_puts(&alts, lit);
        s_puts(&alts, " ");
        s_puts(&alts, ar);
        free(lit);
        any = 1;
    }
    if (!any) {
        s_fail(err, errlen, "tool_choice: no function named '%s' in tools", only ? only : "");
        goto out;
    }
    if (alts.oom)
        goto oom;
    const char *call = json_gbnf_rule(g, "call", "\"{\\\"name\\\": \\\"\" fn \"}\"");
    if (!call || !json_gbnf_rule(g, "fn", alts.s))
        goto oom;
    const char *root;
    if (f == TOOL_FMT_HERMES)
        root = parallel ? "hermes-call (\"\\n\" hermes-call)*" : "hermes-call";
    else if (f == TOOL_FMT_LLAMA3)
        root = "call";
    else
        root = parallel ? "\"[TOOL_CALLS] [\" call (\", \" call)* \"]\"" : "\"[TOOL_CALLS] [\" call \"]\"";
    if (f == TOOL_FMT_HERMES &&
        !json_gbnf_rule(g, "hermes-call", "\"<tool_call>\\n\" call \"\\n</tool_call>\""))
        goto oom;
    if (!json_gbnf_rule(g, "root", root))
        goto oom;
    text = json_gbnf_text(g);
    if (!text)
        goto oom;
    goto out;
oom:
    s_fail(err, errlen, "out of memory");
out:
    free(alts.s);
    json_gbnf_free(&g);
    return text;
}

/* ---- parsing replies ---- */

/* One call object {"name", "arguments"|"parameters"} into calls; 0, or -1 if it is not one. */
static int s_add_call(json_t *calls, json_t *o)
{
    const char *name = json_string_value(json_object_get(o, "name"));
    json_t *a = json_object_get(o, "arguments");
    if (!a)
        a = json_object_get(o, "parameters");
    if (!name || !a)
        return -1;
    char *s = json_is_string(a) ? strdup(json_string_value(a)) : json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s)
        return -1;
    json_array_append_new(calls, json_pack("{s:s,s:s}", "name", name, "arguments", s));
    free(s);
    return 0;
}

/* A JSON value at the start of p (whitespace skipped); *used bytes consumed. */
static json_t *s_json_prefix(const char *p, size_t n, size_t *used)
{
    size_t k = 0;
    while (k < n && isspace((unsigned char)p[k]))
        k++;
    json_error_t je;
    json_t *j = json_loadb(p + k, n - k, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &je);
    if (j)
        *used = k + (size_t)je.position;
    return j;
}

static void s_append_trimmed(s_buf *b, const char *p, size_t n)
{
    while (n && isspace((unsigned char)*p)) {
        p++;
        n--;
    }
    while (n && isspace((unsigned char)p[n - 1]))
        n--;
    if (n && b->n)
        s_puts(b, "\n");
    s_put(b, p, n);
}

int tool_parse(tool_format f, const char *text, size_t len, json_t **calls, char **content)
{
    *calls = json_array();
    s_buf c = { 0 };
    if (!*calls)
        return -1;
    if (f == TOOL_FMT_HERMES) {
        const char *p = text, *end = text + len;
        for (;;) {
            const char *o = memmem(p, (size_t)(end - p), "<tool_call>", 11);
            if (!o) {
                s_append_trimmed(&c, p, (size_t)(end - p));
                break;
            }
            s_append_trimmed(&c, p, (size_t)(o - p));
            const char *body = o + 11;
            size_t used = 0;
            json_t *j = s_json_prefix(body, (size_t)(end - body), &used);
            if (!j || s_add_call(*calls, j)) {
                json_decref(j);
                s_append_trimmed(&c, o, (size_t)(end - o)); /* not a call: the text stays */
                break;
            }
            json_decref(j);
            p = body + used;
            while (p < end && isspace((unsigned char)*p))
                p++;
            if ((size_t)(end - p) >= 12 && !memcmp(p, "</tool_call>", 12))
                p += 12;
        }
    } else if (f == TOOL_FMT_LLAMA3) {
        const char *p = text;
        size_t n = len;
        if (n >= 13 && !memcmp(p, "<|python_tag|>", 13)) {
            p += 13;
            n -= 13;
        }
        size_t used = 0;
        json_t *j = s_json_prefix(p, n, &used);
        int ok = j && json_is_object(j) && s_add_call(*calls, j) == 0;
        json_decref(j);
        if (ok)
            s_append_trimmed(&c, p + used, n - used);
        else
            s_append_trimmed(&c, text, len);
    } else if (f == TOOL_FMT_MISTRAL) {
        const char *o = memmem(text, len, "[TOOL_CALLS]", 12);
        const char *body = o ? o + 12 : text;
        if (!o) {
            /* the control token's text is not in the reply: a leading array of calls */
            size_t k = 0;
            while (k < len && isspace((unsigned char)text[k]))
                k++;
            if (k == len || text[k] != '[')
                body = NULL;
        }
        size_t used = 0;
        json_t *j = body ? s_json_prefix(body, len - (size_t)(body - text), &used) : NULL;
        int ok = json_is_array(j) && json_array_size(j) > 0;
        for (size_t i = 0; ok && i < json_array_size(j); i++)
            ok = s_add_call(*calls, json_array_get(j, i)) == 0;
        json_decref(j);
        if (ok) {
            s_append_trimmed(&c, text, o ? (size_t)(o - text) : 0);
            s_append_trimmed(&c, body + used, len - (size_t)(body + used - text));
        } else {
            json_array_clear(*calls);
            s_append_trimmed(&c, text, len);
        }
    } else {
        s_put(&c, text, len);
    }
    if (c.oom) {
        free(c.s);
        json_decref(*calls);
        *calls = NULL;
        return -1;
    }
    *content = c.s ? c.s : strdup("");
    return *content ? 0 : -1;
}

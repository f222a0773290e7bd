/* tools.c — structured output and tool calls on the API: response_format, llama.cpp's grammar
 * and json_schema fields, tools / tool_choice / parallel_tool_calls, the prompt with tools, the
 * grammar state of a job, and the reply as tool_calls (whole or as stream deltas). serve/
 *
 * The formats and grammars are text/'s (tool_call.c, json_schema.c, grammar.c); this file reads
 * the request's fields and writes OpenAI's shapes. A tool reply is generated as text, then
 * parsed into calls. Streamed, it is held from the moment it may be a call (tool_choice
 * required or a function: from the start; auto: from the family's call marker) and sent as
 * tool_calls deltas at the end, each call whole in one delta (OpenAI's clients join deltas by
 * index, so one delta per call is a valid stream).
 */
#include <stdlib.h>
#include <string.h>

#include "text/json_schema.h"
#include "serve/serve_int.h"

#define FAIL(st, msg, param, code)                                                             \
    do {                                                                                       \
        *status = (st);                                                                        \
        *errj = api_error((msg), "invalid_request_error", (param), (code));                    \
        goto err;                                                                              \
    } while (0)

static int s_present(json_t *v)
{
    return v && !json_is_null(v);
}

/* response_format: text, json_object (any object; llama.cpp's "schema" inside it honoured),
 * json_schema {name, schema, strict}. *gbnf stays NULL for text. */
static int s_response_format(json_t *rf, char **gbnf, int *status, json_t **errj)
{
    char msg[512], e2[400];
    if (!json_is_object(rf))
        FAIL(400, "'response_format' must be an object", "response_format", "invalid_type");
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!type)
        FAIL(400, "'response_format.type' must be a string", "response_format", "invalid_type");
    json_t *schema = NULL;
    if (!strcmp(type, "text"))
        return 0;
    if (!strcmp(type, "json_object")) {
        schema = json_object_get(rf, "schema");
        if (!schema) {
            *gbnf = strdup(json_schema_object_gbnf());
            return 0;
        }
    } else if (!strcmp(type, "json_schema")) {
        json_t *js = json_object_get(rf, "json_schema");
        if (!json_is_object(js))
            FAIL(400, "'response_format.json_schema' must be an object {name, schema, strict}",
                 "response_format", "invalid_type");
        schema = json_object_get(js, "schema");
        if (!schema)
            FAIL(400, "'response_format.json_schema.schema' is missing", "response_format",
                 "invalid_value");
    } else {
        snprintf(msg, sizeof msg, "'response_format.type' '%.60s': text, json_object or "
                 "json_schema", type);
        FAIL(400, msg, "response_format", "invalid_value");
    }
    if (!(*gbnf = json_schema_to_gbnf(schema, e2, sizeof e2))) {
        snprintf(msg, sizeof msg, "response_format: %s", e2);
        FAIL(400, msg, "response_format", "unsupported_schema");
    }
    return 0;
err:
    return -1;
}

/* The one constraint among response_format, grammar and json_schema (two at once is a 400). */
static int s_constraint(json_t *root, char **gbnf, const char **param, int *status, json_t **errj)
{
    char msg[512], e2[400];
    json_t *rf = json_object_get(root, "response_format"), *gr = json_object_get(root, "grammar");
    json_t *js = json_object_get(root, "json_schema");
    int n = s_present(gr) + s_present(js) + (s_present(rf) &&
        !(json_is_string(json_object_get(rf, "type")) &&
          !strcmp(json_string_value(json_object_get(rf, "type")), "text")));
    if (n > 1)
        FAIL(400, "use one of 'response_format' (json), 'grammar' and 'json_schema'",
             s_present(gr) ? "grammar" : "json_schema", "invalid_value");
    if (s_present(rf)) {
        *param = "response_format";
        return s_response_format(rf, gbnf, status, errj);
    }
    if (s_present(gr)) {
        *param = "grammar";
        if (!json_is_string(gr))
            FAIL(400, "'grammar' must be a string of GBNF", "grammar", "invalid_type");
        *gbnf = strdup(json_string_value(gr));
    } else if (s_present(js)) {
        *param = "json_schema";
        if (!(*gbnf = json_schema_to_gbnf(js, e2, sizeof e2))) {
            snprintf(msg, sizeof msg, "json_schema: %s", e2);
            FAIL(400, msg, "json_schema", "unsupported_schema");
        }
    }
    return 0;
err:
    return -1;
}

/* tool_choice: 0 none, 1 auto, 2 required; *name for a named function. */
static int s_choice(json_t *tc, int *choice, const char **name, int *status, json_t **errj)
{
    *choice = 1;
    *name = NULL;
    if (!s_present(tc))
        return 0;
    const char *s = json_string_value(tc);
    if (s && !strcmp(s, "none"))
        *choice = 0;
    else if (s && !strcmp(s, "auto"))
        *choice = 1;
    else if (s && !strcmp(s, "required"))
        *choice = 2;
    else if (json_is_object(tc) &&
             (*name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"))))
        *choice = 2;
    else
        FAIL(400, "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                  "\"function\", \"function\": {\"name\": ...}}", "tool_choice", "invalid_value");
    return 0;
err:
    return -1;
}

/* tools, tool_choice, parallel_tool_calls into r->tl and *gbnf. */
static int s_tools(serve *srv, json_t *root, serve_req *r, char **gbnf, int *status,
                   json_t **errj)
{
    char msg[512], e2[400];
    json_t *tools = json_object_get(root, "tools"), *tc = json_object_get(root, "tool_choice");
    int choice, parallel = 1;
    const char *name;
    if (!s_present(tools)) {
        if (s_present(tc) && !(json_is_string(tc) && (!strcmp(json_string_value(tc), "none") ||
                                                      !strcmp(json_string_value(tc), "auto"))))
            FAIL(400, "'tool_choice' needs 'tools'", "tool_choice", "invalid_value");
        return 0;
    }
    if (!r->chat)
        FAIL(400, "'tools' are for /v1/chat/completions", "tools", "invalid_value");
    if (tool_check(tools, e2, sizeof e2))
        FAIL(400, e2, "tools", "invalid_value");
    if (s_choice(tc, &choice, &name, status, errj))
        return -1;
    json_t *ptc = json_object_get(root, "parallel_tool_calls");
    if (s_present(ptc) && !json_is_boolean(ptc))
        FAIL(400, "'parallel_tool_calls' must be a boolean", "parallel_tool_calls", "invalid_type");
    if (s_present(ptc))
        parallel = json_is_true(ptc);
    if (name)
        parallel = 0; /* a named function: that one call */
    if (!json_array_size(tools) || choice == 0)
        return 0;
    tool_format f = tool_format_of(srv->chat_template);
    if (f == TOOL_FMT_NONE) {
        snprintf(msg, sizeof msg, "this model's chat template ('%s') has no tool-call format "
                 "swarm knows (chatml, llama3, mistral-v3 and mistral-v3-tekken have)",
                 srv->chat_template[0] ? srv->chat_template : "none");
        FAIL(400, msg, "tools", "unsupported_parameter");
    }
    if (*gbnf)
        FAIL(400, "'tools' with a JSON 'response_format', 'grammar' or 'json_schema': use one",
             "response_format", "invalid_value");
    if (!(*gbnf = tool_grammar(f, tools, name, parallel, e2, sizeof e2)))
        FAIL(400, e2, name && strstr(e2, "no function") ? "tool_choice" : "tools",
             "unsupported_schema");
    r->tl.fmt = f;
    r->tl.forced = choice == 2;
    if (choice != 2 && !(r->tl.trig[r->tl.n_trig++] = strdup(tool_trigger(f))))
        FAIL(500, "out of memory", NULL, NULL);
    return 0;
err:
    return -1;
}

/* llama.cpp's grammar_lazy with grammar_triggers: [{"type": 1, "value": WORD}] (or plain
 * strings). Token triggers (type 0) are taken as their text; patterns (2, 3) are refused. */
static int s_lazy(json_t *root, serve_req *r, int have_grammar, int *status, json_t **errj)
{
    char msg[256];
    json_t *lazy = json_object_get(root, "grammar_lazy"), *trig = json_object_get(root, "grammar_triggers");
    if (s_present(lazy) && !json_is_boolean(lazy))
        FAIL(400, "'grammar_lazy' must be a boolean", "grammar_lazy", "invalid_type");
    if (!json_is_true(lazy))
        return 0;
    if (!have_grammar)
        FAIL(400, "'grammar_lazy' needs 'grammar' or 'json_schema'", "grammar_lazy", "invalid_value");
    if (!json_is_array(trig) || !json_array_size(trig) || json_array_size(trig) > GRAMMAR_MAX_TRIGGERS)
        FAIL(400, "'grammar_lazy' needs 'grammar_triggers': 1..8 words", "grammar_triggers",
             "invalid_value");
    size_t i;
    json_t *t;
    json_array_foreach(trig, i, t) {
        json_t *ty = json_object_get(t, "type");
        const char *w = json_is_string(t) ? json_string_value(t)
                                          : json_string_value(json_object_get(t, "value"));
        if (!w || !*w || (ty && (!json_is_integer(ty) || json_integer_value(ty) > 1))) {
            snprintf(msg, sizeof msg, "grammar_triggers[%zu]: a word ({\"type\": 1, \"value\": "
                     "\"...\"} or a string); patterns are not supported", i);
            FAIL(400, msg, "grammar_triggers", "invalid_value");
        }
        if (!(r->tl.trig[r->tl.n_trig++] = strdup(w)))
            FAIL(500, "out of memory", NULL, NULL);
    }
    return 0;
err:
    return -1;
}

int tools_parse(serve *srv, json_t *root, serve_req *r, int *status, json_t **errj)
{
    char msg[700], e2[512];
    char *gbnf = NULL;
    const char *param = NULL;
    if (s_constraint(root, &gbnf, &param, status, errj) ||
        s_lazy(root, r, gbnf != NULL, status, errj) ||
        s_tools(srv, root, r, &gbnf, status, errj))
        goto err;
    if (r->tl.fmt)
        param = "tools";
    if (gbnf && !(r->tl.g = grammar_parse(gbnf, "root", e2, sizeof e2))) {
        snprintf(msg, sizeof msg, "%s: %s", param, e2);
        FAIL(400, msg, param, "invalid_grammar");
    }
    free(gbnf);
    return 0;
err:
    free(gbnf);
    return -1;
}

void tools_req_free(serve_req *r)
{
    grammar_free(&r->tl.g);
    for (size_t i = 0; i < r->tl.n_trig; i++)
        free(r->tl.trig[i]);
    r->tl.n_trig = 0;
}

/* Tools, or a history with calls or results, need the family's tool rendering. */
static int s_toolish(json_t *root)
{
    if (json_array_size(json_object_get(root, "tools")))
        return 1;
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(root, "messages"), i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if ((role && !strcmp(role, "tool")) || s_present(json_object_get(m, "tool_calls")) ||
            (json_object_get(m, "content") && json_is_null(json_object_get(m, "content"))))
            return 1;
    }
    return 0;
}

int tools_render_chat(serve *srv, json_t *root, char **out, int *status, json_t **errj)
{
    char msg[512];
    if (!json_array_size(json_object_get(root, "messages")) || !s_toolish(root))
        return 1;
    if (!srv->chat_template[0])
        FAIL(400, "this model file has no chat template swarm recognises; start the server "
                  "with --chat-template NAME", "messages", "no_chat_template");
    /* with tool_choice "none" the tools are still shown, as OpenAI does; only calls are off */
    *out = tool_render(srv->chat_template, srv->tool_system, json_object_get(root, "messages"),
                       json_object_get(root, "tools"), 1, msg, sizeof msg);
    if (!*out) {
        /* "messages[3]: ..." names the message */
        char param[32] = "messages";
        const char *rb = strchr(msg, ']');
        if (!strncmp(msg, "messages[", 9) && rb && rb - msg < (long)sizeof param - 1)
            snprintf(param, sizeof param, "%.*s", (int)(rb - msg + 1), msg);
        FAIL(400, msg, param, "invalid_value");
    }
    return 0;
err:
    return -1;
}

int tools_prompt_chat(serve *srv, json_t *root, serve_req *r, int *status, json_t **errj)
{
    char msg[512], *text = NULL;
    int rc = tools_render_chat(srv, root, &text, status, errj);
    if (rc)
        return rc;
    size_t nt = 0;
    rc = tokenizer_encode(srv->tok, text, strlen(text),
                          TOKENIZER_ADD_SPECIAL | TOKENIZER_PARSE_SPECIAL, &r->prompt, &nt, msg,
                          sizeof msg);
    free(text);
    if (rc)
        FAIL(400, msg, "messages", "invalid_value");
    r->n_prompt = (uint32_t)nt;
    return 0;
err:
    return -1;
}

grammar_state *tools_state(serve *srv, serve_job *job, char *err, size_t errlen)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    if (!job->req.tl.g)
        return NULL;
    pthread_mutex_lock(&mu);
    if (!srv->gvocab)
        srv->gvocab = grammar_vocab_new(srv->tok, err, errlen);
    pthread_mutex_unlock(&mu);
    if (!srv->gvocab)
        return NULL;
    return grammar_state_new(job->req.tl.g, srv->gvocab, (const char *const *)job->req.tl.trig,
                             job->req.tl.n_trig, err, errlen);
}

/* Bytes of the reply that can be streamed as content now: up to the call marker, less a tail
 * that may be the marker's start. Llama 3 and Mistral replies that open with { or [ may be
 * calls as a whole (Mistral's marker is a control token, not in the text): all held. */
static size_t s_safe(tool_format fmt, const serve_choice *c)
{
    const char *t = c->text, *trig = tool_trigger(fmt);
    size_t n = c->text_len, tl = strlen(trig);
    size_t k = 0;
    while (k < n && (t[k] == ' ' || t[k] == '\n' || t[k] == '\t' || t[k] == '\r'))
        k++;
    if (fmt != TOOL_FMT_HERMES && (k == n || t[k] == '{' || t[k] == '['))
        return 0;
    const char *hit = memmem(t, n, trig, tl);
    if (hit)
        return (size_t)(hit - t);
    for (size_t h = tl - 1; h > 0; h--)
        if (h <= n && !memcmp(t + n - h, trig, h))
            return n - h;
    return n;
}

int tools_release(serve_job *job, const char *p, size_t n)
{
    serve_choice *c = &job->ch[job->cur];
    if (!job->req.tl.fmt || !job->req.stream)
        return 0;
    if (job_keep(c, p, n))
        return -1;
    if (job->req.tl.forced)
        return 1;
    size_t safe = s_safe(job->req.tl.fmt, c);
    if (safe > c->streamed) {
        if (job_emit_sse(job, api_chunk(job, c->text + c->streamed, safe - c->streamed, NULL,
                                        NULL)))
            return -1;
        c->streamed = safe;
    }
    return 1;
}

void tools_finish(serve_job *job)
{
    serve_choice *c = &job->ch[job->cur];
    if (!job->req.tl.fmt || c->finish == FINISH_ERROR || c->finish == FINISH_CANCELLED)
        return;
    json_t *calls = NULL;
    if (tool_parse(job->req.tl.fmt, c->text ? c->text : "", c->text_len, &calls, &c->content))
        return;
    if (!json_array_size(calls)) {
        json_decref(calls);
        return;
    }
    /* ids: Mistral's template wants 9 alphanumerics; OpenAI's look like call_ + 24 */
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t x = (uint64_t)(uintptr_t)c ^ ((uint64_t)job->created << 20) ^
                 (uint64_t)(serve_now() * 1e9);
    size_t i;
    json_t *cl;
    json_array_foreach(calls, i, cl) {
        char id[40];
        size_t len = job->req.tl.fmt == TOOL_FMT_MISTRAL ? 9 : 24, o = 0;
        if (job->req.tl.fmt != TOOL_FMT_MISTRAL)
            o = (size_t)snprintf(id, sizeof id, "call_");
        for (size_t k = 0; k < len; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            id[o++] = al[x % (sizeof al - 1)];
        }
        id[o] = 0;
        json_object_set_new(cl, "id", json_string(id));
    }
    c->calls = calls;
}

static json_t *s_call_json(json_t *c, int index)
{
    json_t *j = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", json_string_value(json_object_get(c, "id")),
                          "type", "function", "function", "name",
                          json_string_value(json_object_get(c, "name")), "arguments",
                          json_string_value(json_object_get(c, "arguments")));
    if (j && index >= 0)
        json_object_set_new(j, "index", json_integer(index));
    return j;
}

void tools_stream_end(serve_job *job)
{
    serve_choice *c = &job->ch[job->cur];
    if (!job->req.tl.fmt)
        return;
    if (!c->calls) {
        if (c->text_len > c->streamed)
            job_emit_sse(job, api_chunk(job, c->text + c->streamed, c->text_len - c->streamed,
                                        NULL, NULL));
        return;
    }
    /* one chunk per call: api_chunk's envelope and choice index, tool_calls as the delta */
    size_t i;
    json_t *cl;
    json_array_foreach(c->calls, i, cl) {
        json_t *j = api_chunk(job, "", 0, NULL, NULL);
        json_t *delta = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
        json_object_del(delta, "content");
        json_object_set_new(delta, "tool_calls", json_pack("[o]", s_call_json(cl, (int)i)));
        job_emit_sse(job, j);
    }
}

json_t *tools_message(serve_job *job, uint32_t i, json_t *text)
{
    const serve_choice *c = &job->ch[i];
    if (!c->calls)
        return json_pack("{s:s,s:o}", "role", "assistant", "content", text);
    json_decref(text);
    json_t *calls = json_array();
    size_t k;
    json_t *cl;
    json_array_foreach(c->calls, k, cl) json_array_append_new(calls, s_call_json(cl, -1));
    json_t *content = c->content && c->content[0] ? api_string(c->content, strlen(c->content))
                                                  : json_null();
    return json_pack("{s:s,s:o,s:o}", "role", "assistant", "content", content, "tool_calls",
                     calls);
}

const char *tools_finish_name(serve_job *job, uint32_t i)
{
    return job->ch[i].calls ? "tool_calls" : api_finish_name(job->ch[i].finish);
}

void tools_timings(serve_job *job, json_t *t)
{
    if (!job->req.tl.g || !t)
        return;
    json_object_set_new(t, "grammar_ms", json_real(job->grammar_ms));
    json_object_set_new(t, "grammar_masked", json_integer(job->n_masked));
}

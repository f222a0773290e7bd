/* api.c — the OpenAI API's shapes: request bodies checked field by field, responses, stream
 * chunks, usage, logprobs, error objects. serve/
 *
 * Every refusal names the field (the error object's "param") and says what was wanted; unknown
 * top-level fields are ignored as OpenAI's own clients send many, except those whose silent
 * loss would change the answer (tools, functions, response_format other than text, n > 1).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "serve/serve_int.h"

json_t *api_error(const char *message, const char *type, const char *param, const char *code)
{
    return json_pack("{s:{s:s,s:s,s:s?,s:s?}}", "error", "message", message, "type", type,
                     "param", param, "code", code);
}

/* Invalid UTF-8 (a random model's byte tokens, a split sequence at the end) becomes U+FFFD:
 * JSON strings are Unicode and jansson refuses anything else. */
json_t *api_string(const char *p, size_t n)
{
    json_t *j = json_stringn(p, n);
    if (j)
        return j;
    char *o = malloc(n * 3 + 1);
    if (!o)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)p[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        json_t *t = len && i + len <= n ? json_stringn(p + i, len) : NULL;
        if (t) {
            memcpy(o + k, p + i, len);
            k += len;
            i += len;
            json_decref(t);
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i++;
        }
    }
    j = json_stringn(o, k);
    free(o);
    return j;
}

const char *api_finish_name(serve_finish f)
{
    switch (f) {
    case FINISH_STOP:
    case FINISH_EOG: return "stop";
    case FINISH_LENGTH: return "length";
    case FINISH_CANCELLED: return "cancelled";
    case FINISH_ERROR: return "error";
    default: return "none";
    }
}

json_t *api_models(serve *srv)
{
    return json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id",
                     srv->model_id, "object", "model", "created", (json_int_t)0, "owned_by",
                     "swarm");
}

/* ---- parsing ---- */

#define FAIL(st, msg, param, code)                                                             \
    do {                                                                                       \
        *status = (st);                                                                        \
        *errj = api_error((msg), "invalid_request_error", (param), (code));                    \
        goto err;                                                                              \
    } while (0)

static int s_num(json_t *o, const char *key, double lo, double hi, double *out, char *msg,
                 size_t len)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v)) {
        snprintf(msg, len, "'%s' must be a number", key);
        return -1;
    }
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        snprintf(msg, len, "'%s' %g must be in [%g, %g]", key, d, lo, hi);
        return -1;
    }
    *out = d;
    return 0;
}

static int s_int(json_t *o, const char *key, long long lo, long long hi, long long *out,
                 char *msg, size_t len)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v)) {
        snprintf(msg, len, "'%s' must be an integer", key);
        return -1;
    }
    long long i = json_integer_value(v);
    if (i < lo || i > hi) {
        snprintf(msg, len, "'%s' %lld must be in %lld..%lld", key, i, lo, hi);
        return -1;
    }
    *out = i;
    return 0;
}

static int s_bool(json_t *o, const char *key, int *out, char *msg, size_t len)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v)) {
        snprintf(msg, len, "'%s' must be a boolean", key);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

/* A message's content: a string, or an array of {"type":"text","text":...} parts (joined). */
static char *s_content(json_t *c, char *msg, size_t len)
{
    if (json_is_string(c))
        return strdup(json_string_value(c));
    if (!json_is_array(c)) {
        snprintf(msg, len, "content must be a string or an array of text parts");
        return NULL;
    }
    size_t i, n = 0;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *t = json_object_get(part, "text");
        if (!json_is_string(t) || strcmp(json_string_value(json_object_get(part, "type")) ?
                                         json_string_value(json_object_get(part, "type")) : "",
                                         "text")) {
            snprintf(msg, len, "content part %zu: only {\"type\":\"text\",\"text\":...} parts", i);
            return NULL;
        }
        n += json_string_length(t);
    }
    char *s = malloc(n + 1), *p = s;
    if (!s)
        return NULL;
    json_array_foreach(c, i, part) {
        json_t *t = json_object_get(part, "text");
        memcpy(p, json_string_value(t), json_string_length(t));
        p += json_string_length(t);
    }
    *p = 0;
    return s;
}

static int s_prompt_chat(serve *srv, json_t *root, serve_req *r, int *status, json_t **errj)
{
    char msg[512], where[32];
    chat_msg *m = NULL;
    char **texts = NULL;
    char *rendered = NULL;
    size_t n = 0, len = 0;
    int rc = -1;
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        FAIL(400, "'messages' must be a non-empty array", "messages", "invalid_type");
    if (!srv->chat_template[0])
        FAIL(400, "this model file has no chat template swarm recognises; start the server "
                  "with --chat-template NAME or use /v1/completions", "messages",
             "no_chat_template");
    n = json_array_size(msgs);
    m = calloc(n, sizeof *m);
    texts = calloc(n, sizeof *texts);
    if (!m || !texts)
        FAIL(500, "out of memory", NULL, NULL);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(msgs, i);
        snprintf(where, sizeof where, "messages[%zu]", i);
        json_t *role = json_object_get(e, "role");
        if (!json_is_object(e) || !json_is_string(role))
            FAIL(400, "each message must be an object with a string 'role'", where,
                 "invalid_type");
        const char *rs = json_string_value(role);
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant")) {
            snprintf(msg, sizeof msg, "%s: role '%.40s' is not one of system, user, assistant",
                     where, rs);
            FAIL(400, msg, where, "invalid_value");
        }
        char cm[200];
        texts[i] = s_content(json_object_get(e, "content"), cm, sizeof cm);
        if (!texts[i]) {
            snprintf(msg, sizeof msg, "%s: %s", where, cm);
            FAIL(400, msg, where, "invalid_type");
        }
        m[i].role = rs;
        m[i].content = texts[i];
    }
    if (chat_render(srv->chat_template, m, n, 1, 0, NULL, 0, &len, msg, sizeof msg) ||
        !(rendered = malloc(len + 1)) ||
        chat_render(srv->chat_template, m, n, 1, 0, rendered, len + 1, &len, msg, sizeof msg))
        FAIL(400, msg, "messages", "invalid_value");
    size_t nt = 0;
    if (tokenizer_encode(srv->tok, rendered, len, TOKENIZER_ADD_SPECIAL | TOKENIZER_PARSE_SPECIAL,
                         &r->prompt, &nt, msg, sizeof msg))
        FAIL(400, msg, "messages", "invalid_value");
    r->n_prompt = (uint32_t)nt;
    rc = 0;
err:
    for (size_t i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    free(m);
    free(rendered);
    return rc;
}

static int s_prompt_text(serve *srv, json_t *root, serve_req *r, int *status, json_t **errj)
{
    char msg[256];
    json_t *p = json_object_get(root, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        size_t nt = 0;
        if (tokenizer_encode(srv->tok, json_string_value(p), json_string_length(p),
                             TOKENIZER_ADD_SPECIAL, &r->prompt, &nt, msg, sizeof msg))
            FAIL(400, msg, "prompt", "invalid_value");
        r->n_prompt = (uint32_t)nt;
        return 0;
    }
    /* Token ids, as OpenAI allows: each inside the vocabulary. */
    if (json_is_array(p) && json_array_size(p) > 0 && json_is_integer(json_array_get(p, 0))) {
        size_t n = json_array_size(p), i;
        json_t *v;
        if (!(r->prompt = malloc(n * sizeof *r->prompt)))
            FAIL(500, "out of memory", NULL, NULL);
        json_array_foreach(p, i, v) {
            json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
            if (id < 0 || id >= tokenizer_n_vocab(srv->tok)) {
                snprintf(msg, sizeof msg, "prompt[%zu]: token ids must be integers in 0..%d", i,
                         tokenizer_n_vocab(srv->tok) - 1);
                FAIL(400, msg, "prompt", "invalid_value");
            }
            r->prompt[i] = (int32_t)id;
        }
        r->n_prompt = (uint32_t)n;
        return 0;
    }
    FAIL(400, "'prompt' must be a string, an array of one string, or an array of token ids",
         "prompt", "invalid_type");
err:
    return -1;
}

/* A parameter out of its range: 400 naming it, msg saying why. */
static int s_badparam(const char *msg, const char *param, int *status, json_t **errj)
{
    *status = 400;
    *errj = api_error(msg, "invalid_request_error", param, "invalid_value");
    return -1;
}

/* The body's model (this server's, or none), and what this server does not do. */
static int s_check_scope(serve *srv, json_t *root, int *status, json_t **errj)
{
    char msg[512];
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model))
            FAIL(400, "'model' must be a string", "model", "invalid_type");
        if (strcmp(json_string_value(model), srv->model_id)) {
            snprintf(msg, sizeof msg, "the model '%.100s' does not exist (this server has '%s')",
                     json_string_value(model), srv->model_id);
            FAIL(404, msg, "model", "model_not_found");
        }
    }
    static const char *const unsupported[] = { "tools", "functions", "tool_choice",
                                               "function_call", NULL };
    for (int i = 0; unsupported[i]; i++)
        if (json_object_get(root, unsupported[i])) {
            snprintf(msg, sizeof msg, "'%s' is not supported by this server", unsupported[i]);
            FAIL(400, msg, unsupported[i], "unsupported_parameter");
        }
    json_t *rf = json_object_get(root, "response_format");
    if (rf && !json_is_null(rf) &&
        strcmp(json_string_value(json_object_get(rf, "type")) ?
                   json_string_value(json_object_get(rf, "type")) : "", "text"))
        FAIL(400, "only response_format {\"type\":\"text\"} is supported", "response_format",
             "unsupported_parameter");
    return 0;
err:
    return -1;
}

/* Sampling: OpenAI's semantics (temperature 1 and top_p 1 by default, no top_k / min_p),
 * n = 1, the seed; *maxt the tokens asked for (0: as many as fit). */
static int s_sampling(serve *srv, json_t *root, serve_req *r, long long *maxt, int *status,
                      json_t **errj)
{
    char msg[512];
    sampler_opts_default(&r->so);
    r->so.temperature = 1.0f;
    r->so.top_k = 0;
    r->so.top_p = 1.0f;
    r->so.min_p = 0.0f;
    r->so.repeat_last_n = 64;
    const struct { const char *key; double lo, hi; float *dst; } nums[] = {
        { "temperature", 0, 2, &r->so.temperature },
        { "top_p", 1e-6, 1, &r->so.top_p },
        { "frequency_penalty", -2, 2, &r->so.frequency_penalty },
        { "presence_penalty", -2, 2, &r->so.presence_penalty },
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        double d = NAN;
        if (s_num(root, nums[i].key, nums[i].lo, nums[i].hi, &d, msg, sizeof msg))
            return s_badparam(msg, nums[i].key, status, errj);
        if (!isnan(d))
            *nums[i].dst = (float)d;
    }
    long long ll = 1;
    if (s_int(root, "n", 1, 1 << 20, &ll, msg, sizeof msg))
        return s_badparam(msg, "n", status, errj);
    if (ll != 1)
        FAIL(400, "only n = 1 is supported", "n", "unsupported_parameter");
    ll = -1;
    if (s_int(root, "seed", INT64_MIN, INT64_MAX, &ll, msg, sizeof msg))
        return s_badparam(msg, "seed", status, errj);
    r->so.seed = (uint64_t)ll;
    const char *mkey = json_object_get(root, "max_completion_tokens") ? "max_completion_tokens"
                                                                      : "max_tokens";
    if (s_int(root, mkey, 1, srv->n_ctx, maxt, msg, sizeof msg))
        return s_badparam(msg, mkey, status, errj);
    return 0;
err:
    return -1;
}

static int s_stream(json_t *root, serve_req *r, int *status, json_t **errj)
{
    char msg[512];
    if (s_bool(root, "stream", &r->stream, msg, sizeof msg))
        return s_badparam(msg, "stream", status, errj);
    /* llama-server's "cache_prompt" (default true): false runs the whole prompt */
    int cache = 1;
    if (s_bool(root, "cache_prompt", &cache, msg, sizeof msg))
        return s_badparam(msg, "cache_prompt", status, errj);
    r->no_cache = !cache;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        const char *k;
        json_t *v;
        if (!json_is_object(so))
            FAIL(400, "'stream_options' must be an object", "stream_options", "invalid_type");
        json_object_foreach(so, k, v) if (strcmp(k, "include_usage")) {
            snprintf(msg, sizeof msg,
                     "stream_options: unknown field '%.60s' (known: include_usage)", k);
            FAIL(400, msg, "stream_options", "unknown_parameter");
        }
        if (s_bool(so, "include_usage", &r->include_usage, msg, sizeof msg))
            return s_badparam(msg, "stream_options", status, errj);
    }
    return 0;
err:
    return -1;
}

static int s_stop(json_t *root, serve_req *r, int *status, json_t **errj)
{
    json_t *stop = json_object_get(root, "stop");
    if (!stop || json_is_null(stop))
        return 0;
    json_t *one = json_is_string(stop) ? stop : NULL;
    size_t n = one ? 1 : json_is_array(stop) ? json_array_size(stop) : 0;
    if ((!one && !json_is_array(stop)) || n > SERVE_MAX_STOP)
        FAIL(400, "'stop' must be a string or an array of up to 4 strings", "stop",
             "invalid_type");
    for (size_t i = 0; i < n; i++) {
        json_t *s = one ? one : json_array_get(stop, i);
        if (!json_is_string(s) || json_string_length(s) < 1 ||
            json_string_length(s) > SERVE_MAX_STOP_LEN)
            FAIL(400, "each stop string must be a string of 1..256 bytes", "stop",
                 "invalid_value");
        r->stop[r->n_stop++] = strdup(json_string_value(s));
    }
    return 0;
err:
    return -1;
}

/* logprobs: chat has a boolean and top_logprobs 0..20; completions an integer 0..5. */
static int s_logprobs(json_t *root, serve_req *r, int *status, json_t **errj)
{
    char msg[512];
    long long ll;
    if (!r->chat) {
        ll = -1;
        if (s_int(root, "logprobs", 0, 5, &ll, msg, sizeof msg))
            return s_badparam(msg, "logprobs", status, errj);
        r->logprobs = ll >= 0;
        r->top_logprobs = ll > 0 ? (uint32_t)ll : 0;
        return 0;
    }
    if (s_bool(root, "logprobs", &r->logprobs, msg, sizeof msg))
        return s_badparam(msg, "logprobs", status, errj);
    ll = 0;
    if (s_int(root, "top_logprobs", 0, SAMPLER_TOP_MAX, &ll, msg, sizeof msg))
        return s_badparam(msg, "top_logprobs", status, errj);
    if (ll && !r->logprobs)
        FAIL(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value");
    r->top_logprobs = (uint32_t)ll;
    return 0;
err:
    return -1;
}

/* The prompt and the tokens asked for within the context. */
static int s_fit(serve *srv, serve_req *r, long long maxt, int *status, json_t **errj)
{
    char msg[512];
    if (r->n_prompt == 0)
        FAIL(400, "the prompt is empty", r->chat ? "messages" : "prompt", "invalid_value");
    if (r->n_prompt >= srv->n_ctx || (maxt && r->n_prompt + (uint64_t)maxt > srv->n_ctx)) {
        snprintf(msg, sizeof msg, "this model's context is %u tokens; the prompt has %u%s%lld "
                 "more were asked", srv->n_ctx, r->n_prompt, maxt ? " and " : "", maxt);
        if (!maxt)
            snprintf(msg, sizeof msg, "this model's context is %u tokens; the prompt has %u "
                     "(at least one must be left to generate)", srv->n_ctx, r->n_prompt);
        FAIL(400, msg, r->chat ? "messages" : "prompt", "context_length_exceeded");
    }
    r->max_tokens = maxt ? (uint32_t)maxt : srv->n_ctx - r->n_prompt;
    return 0;
err:
    return -1;
}

int api_parse(serve *srv, serve_endpoint ep, const char *body, size_t len, serve_req *r,
              int *status, json_t **errj)
{
    char msg[512];
    json_error_t je;
    long long maxt = 0;
    memset(r, 0, sizeof *r);
    r->chat = ep == EP_CHAT;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(msg, sizeof msg, "malformed JSON body: line %d, column %d: %s", je.line,
                 je.column, je.text);
        FAIL(400, msg, NULL, "invalid_json");
    }
    if (!json_is_object(root))
        FAIL(400, "the body must be a JSON object", NULL, "invalid_type");
    if (s_check_scope(srv, root, status, errj) ||
        s_sampling(srv, root, r, &maxt, status, errj) || s_stream(root, r, status, errj) ||
        s_stop(root, r, status, errj) || s_logprobs(root, r, status, errj) ||
        (r->chat ? s_prompt_chat : s_prompt_text)(srv, root, r, status, errj) ||
        s_fit(srv, r, maxt, status, errj))
        goto err;
    json_decref(root);
    return 0;
err:
    json_decref(root);
    api_req_free(r);
    return -1;
}
#undef FAIL

void api_req_free(serve_req *r)
{
    for (uint32_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    r->n_stop = 0;
    free(r->prompt);
    r->prompt = NULL;
}

/* ---- responses ---- */

static json_t *s_bytes(const char *p, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

json_t *api_logprob(serve *srv, const sampler_step_info *info, int32_t id, int top)
{
    size_t n = 0;
    const char *p = tokenizer_piece(srv->tok, id, 1, &n);
    json_t *e = json_pack("{s:o,s:f,s:o}", "token", api_string(p, n), "logprob",
                          (double)info->logprob, "bytes", s_bytes(p, n));
    if (top && e) {
        json_t *a = json_array();
        for (uint32_t i = 0; i < info->n_top; i++) {
            const char *q = tokenizer_piece(srv->tok, info->top[i].token, 1, &n);
            json_array_append_new(a, json_pack("{s:o,s:f,s:o}", "token", api_string(q, n),
                                               "logprob", (double)info->top[i].logprob,
                                               "bytes", s_bytes(q, n)));
        }
        json_object_set_new(e, "top_logprobs", a);
    }
    return e;
}

/* Completions' legacy logprobs shape from chat-style entries (steals lp, an array). */
static json_t *s_legacy_lp(json_t *lp)
{
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(lp, i, e) {
        json_array_append(toks, json_object_get(e, "token"));
        json_array_append(lps, json_object_get(e, "logprob"));
        json_t *m = json_object(), *t;
        size_t k;
        json_array_foreach(json_object_get(e, "top_logprobs"), k, t)
            json_object_set(m, json_string_value(json_object_get(t, "token")),
                            json_object_get(t, "logprob"));
        json_array_append_new(tops, m);
    }
    json_decref(lp);
    return json_pack("{s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs",
                     tops);
}

json_t *api_chunk(serve_job *job, const char *text, size_t n, json_t *lp, const char *finish)
{
    serve *srv = job->srv;
    json_t *ch;
    if (lp && !json_is_array(lp)) {
        json_t *a = json_array();
        json_array_append_new(a, lp);
        lp = a;
    }
    if (job->req.chat) {
        json_t *delta = json_object();
        if (job->n_gen == 0 && !finish)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (!finish)
            json_object_set_new(delta, "content", api_string(text, n));
        ch = json_pack("{s:i,s:o,s:o,s:o}", "index", 0, "delta", delta, "logprobs",
                       lp ? json_pack("{s:o}", "content", lp) : json_null(), "finish_reason",
                       finish ? json_string(finish) : json_null());
    } else {
        ch = json_pack("{s:i,s:o,s:o,s:o}", "index", 0, "text", api_string(text, n), "logprobs",
                       lp ? s_legacy_lp(lp) : json_null(), "finish_reason",
                       finish ? json_string(finish) : json_null());
    }
    return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", job->id, "object",
                     job->req.chat ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)job->created, "model", srv->model_id, "choices", ch);
}

/* OpenAI's usage; prompt_tokens_details.cached_tokens: prompt tokens the slot's cache held. */
static json_t *s_usage(serve_job *job)
{
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", (int)job->req.n_prompt,
                     "completion_tokens", (int)job->n_gen, "total_tokens",
                     (int)(job->req.n_prompt + job->n_gen), "prompt_tokens_details",
                     "cached_tokens", (int)job->n_cached);
}

/* Server-side timings (llama.cpp's server has the same idea): what the page shows, and what
 * an HTTP client compares its own time to first token against. */
static json_t *s_timings(serve_job *job)
{
    double ttft = job->n_gen ? (job->t_first - job->t_recv) * 1e3 : 0;
    double prefill = job->n_gen ? (job->t_first - job->t_start) * 1e3 : 0;
    double gen = job->n_gen > 1 ? (job->t_last - job->t_first) : 0;
    char ids[17], lg[17];
    snprintf(ids, sizeof ids, "%016llx", (unsigned long long)job->ids_digest);
    snprintf(lg, sizeof lg, "%016llx", (unsigned long long)job->logits_digest);
    /* prompt_n / cache_n: llama-server's names for evaluated and cached prompt tokens; the
     * digests (engine.h) let a client compare two runs bit for bit */
    return json_pack("{s:f,s:f,s:f,s:i,s:f,s:i,s:i,s:s,s:s}", "queue_ms",
                     (job->t_start - job->t_recv) * 1e3, "ttft_ms", ttft, "prefill_ms", prefill,
                     "predicted_n", (int)job->n_gen, "predicted_per_second",
                     gen > 0 ? (job->n_gen - 1) / gen : 0.0, "prompt_n",
                     (int)(job->req.n_prompt - job->n_cached), "cache_n", (int)job->n_cached,
                     "ids_digest", ids, "logits_digest", lg);
}

json_t *api_usage_chunk(serve_job *job)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:[],s:o,s:o}", "id", job->id, "object",
                     job->req.chat ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)job->created, "model", job->srv->model_id, "choices", "usage",
                     s_usage(job), "timings", s_timings(job));
}

json_t *api_response(serve_job *job)
{
    json_t *text = api_string(job->text ? job->text : "", job->text_len);
    json_t *lp = job->lp ? json_incref(job->lp) : NULL;
    json_t *ch;
    const char *fin = api_finish_name(job->finish);
    if (job->req.chat)
        ch = json_pack("{s:i,s:{s:s,s:o},s:o,s:s}", "index", 0, "message", "role", "assistant",
                       "content", text, "logprobs",
                       lp ? json_pack("{s:o}", "content", lp) : json_null(), "finish_reason", fin);
    else
        ch = json_pack("{s:i,s:o,s:o,s:s}", "index", 0, "text", text, "logprobs",
                       lp ? s_legacy_lp(lp) : json_null(), "finish_reason", fin);
    return json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o,s:o}", "id", job->id, "object",
                     job->req.chat ? "chat.completion" : "text_completion", "created",
                     (json_int_t)job->created, "model", job->srv->model_id, "choices", ch,
                     "usage", s_usage(job), "timings", s_timings(job));
}

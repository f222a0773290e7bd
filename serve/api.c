/* api.c — the OpenAI API's shapes: request bodies checked field by field, responses, stream
 * chunks, usage, logprobs, error objects. serve/
 *
 * Every refusal names the field (the error object's "param") and says what was wanted. Every
 * top-level field is in one table (s_fields): honoured, accepted without effect on the text,
 * or refused; a field the table does not know is refused too, so nothing is dropped silently.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "quant/quant.h"
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

/* Parameters and tensor types of the file, counted once (the model is read-only). */
static void s_model_meta(serve *srv, json_t **types, json_int_t *n_params)
{
    const gguf_file *g = llm_model_gguf(srv->model);
    uint64_t count[64] = {0};
    *n_params = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        uint64_t ne = 1;
        for (uint32_t d = 0; d < g->tensors[i].n_dims; d++)
            ne *= g->tensors[i].dims[d];
        *n_params += (json_int_t)ne;
        if (g->tensors[i].type < 64)
            count[g->tensors[i].type]++;
    }
    *types = json_object();
    for (uint32_t t = 0; t < 64; t++)
        if (count[t])
            json_object_set_new(*types, quant_type_name(t), json_integer((json_int_t)count[t]));
}

json_t *api_models(serve *srv)
{
    json_t *types, *data = json_array();
    json_int_t n_params;
    s_model_meta(srv, &types, &n_params);
    const arch_hparams *hp = &llm_model_arch(srv->model)->hp;
    uint32_t fo = 0, nw = srv->swarm ? llm_swarm_status(srv->swarm, NULL, 0, &fo) : 0;
    json_t *meta = json_pack("{s:i,s:i,s:i,s:i,s:I,s:I,s:o,s:s,s:s,s:i,s:i}", "n_vocab",
                             (int)srv->n_vocab, "n_ctx", (int)srv->n_ctx, "n_ctx_train",
                             (int)hp->n_ctx_train, "n_embd", (int)hp->dim, "n_params", n_params,
                             "size", (json_int_t)llm_model_gguf(srv->model)->file_size,
                             "tensor_types", types, "architecture", hp->name, "arm", srv->arm,
                             "workers", (int)nw,
                             "slots", (int)srv->n_slots);
    /* One entry per name the model answers to: the file's, then each --alias. */
    for (uint32_t i = 0; i <= srv->n_alias; i++)
        json_array_append_new(data, json_pack("{s:s,s:s,s:I,s:s,s:O,s:i}", "id",
                                              i ? srv->alias[i - 1] : srv->model_id, "object",
                                              "model", "created", (json_int_t)0, "owned_by",
                                              "swarm", "meta", meta, "context_length",
                                              (int)srv->n_ctx));
    json_decref(meta);
    return json_pack("{s:s,s:o}", "object", "list", "data", data);
}

/* ---- parsing ---- */

/* Every top-level request field this server knows, and what it does with it. A field not in
 * the table is a 400 naming it (OpenAI's own API refuses unrecognised arguments), so nothing
 * a client asks for is ever dropped silently. docs/serve.md has the same table for users.
 *   F_HONOURED  parsed and applied by the functions below
 *   F_NO_EFFECT accepted: it cannot change the text (bookkeeping fields clients send)
 *   F_REFUSED   a 400 naming it, unless null, false, or `off` (the value that changes nothing)
 *   F_TOOLS     parsed and applied by tools.c (structured output, grammars, tool calls)
 *   F_OTHER     refused by s_check_scope (OpenAI's deprecated functions / function_call) */
typedef enum { F_HONOURED, F_NO_EFFECT, F_REFUSED, F_TOOLS, F_OTHER } s_field_status;
#define F_CHAT 1u
#define F_CMPL 2u
#define F_BOTH 3u
static const struct {
    const char *name;
    unsigned eps;                 /* F_CHAT, F_CMPL */
    s_field_status st;
    double off;                   /* F_REFUSED: a number equal to this is accepted (NAN: none) */
} s_fields[] = {
    { "model", F_BOTH, F_HONOURED, NAN },
    { "messages", F_CHAT, F_HONOURED, NAN },
    { "prompt", F_CMPL, F_HONOURED, NAN },
    { "max_tokens", F_BOTH, F_HONOURED, NAN },
    { "max_completion_tokens", F_BOTH, F_HONOURED, NAN },
    { "n_predict", F_BOTH, F_HONOURED, NAN },            /* llama-server's max_tokens */
    { "temperature", F_BOTH, F_HONOURED, NAN },
    { "top_p", F_BOTH, F_HONOURED, NAN },
    { "top_k", F_BOTH, F_HONOURED, NAN },
    { "min_p", F_BOTH, F_HONOURED, NAN },
    { "repeat_penalty", F_BOTH, F_HONOURED, NAN },
    { "repeat_last_n", F_BOTH, F_HONOURED, NAN },
    { "presence_penalty", F_BOTH, F_HONOURED, NAN },
    { "frequency_penalty", F_BOTH, F_HONOURED, NAN },
    { "logit_bias", F_BOTH, F_HONOURED, NAN },
    { "seed", F_BOTH, F_HONOURED, NAN },
    { "n", F_BOTH, F_HONOURED, NAN },
    { "stop", F_BOTH, F_HONOURED, NAN },
    { "logprobs", F_BOTH, F_HONOURED, NAN },
    { "top_logprobs", F_CHAT, F_HONOURED, NAN },
    { "stream", F_BOTH, F_HONOURED, NAN },
    { "stream_options", F_BOTH, F_HONOURED, NAN },
    { "ignore_eos", F_BOTH, F_HONOURED, NAN },
    { "cache_prompt", F_BOTH, F_HONOURED, NAN },         /* llama-server's: the prompt cache */
    { "speculative", F_BOTH, F_HONOURED, NAN },          /* swarm's: speculative decoding */
    { "user", F_BOTH, F_NO_EFFECT, NAN },
    { "metadata", F_BOTH, F_NO_EFFECT, NAN },
    { "store", F_BOTH, F_NO_EFFECT, NAN },
    { "service_tier", F_BOTH, F_NO_EFFECT, NAN },
    { "prompt_cache_key", F_BOTH, F_NO_EFFECT, NAN },
    { "safety_identifier", F_BOTH, F_NO_EFFECT, NAN },
    { "echo", F_CMPL, F_REFUSED, NAN },
    { "suffix", F_CMPL, F_REFUSED, NAN },
    { "best_of", F_CMPL, F_REFUSED, 1 },
    { "reasoning_effort", F_CHAT, F_REFUSED, NAN },
    { "modalities", F_CHAT, F_REFUSED, NAN },
    { "audio", F_CHAT, F_REFUSED, NAN },
    { "prediction", F_CHAT, F_REFUSED, NAN },
    { "web_search_options", F_CHAT, F_REFUSED, NAN },
    { "verbosity", F_CHAT, F_REFUSED, NAN },
    { "typical_p", F_BOTH, F_REFUSED, 1 },
    { "mirostat", F_BOTH, F_REFUSED, 0 },
    { "dry_multiplier", F_BOTH, F_REFUSED, 0 },
    { "xtc_probability", F_BOTH, F_REFUSED, 0 },
    { "dynatemp_range", F_BOTH, F_REFUSED, 0 },
    { "top_n_sigma", F_BOTH, F_REFUSED, -1 },
    { "n_probs", F_BOTH, F_REFUSED, 0 },
    { "samplers", F_BOTH, F_REFUSED, NAN },
    { "tools", F_BOTH, F_TOOLS, NAN },     /* on /v1/completions: tools.c's 400 says why */
    { "tool_choice", F_BOTH, F_TOOLS, NAN },
    { "parallel_tool_calls", F_BOTH, F_TOOLS, NAN },
    { "response_format", F_BOTH, F_TOOLS, NAN },
    { "grammar", F_BOTH, F_TOOLS, NAN },              /* llama-server's GBNF */
    { "json_schema", F_BOTH, F_TOOLS, NAN },          /* llama-server's */
    { "grammar_lazy", F_BOTH, F_TOOLS, NAN },         /* llama-server's */
    { "grammar_triggers", F_BOTH, F_TOOLS, NAN },     /* llama-server's */
    { "functions", F_BOTH, F_OTHER, NAN },
    { "function_call", F_BOTH, F_OTHER, NAN },
};
#define N_FIELDS (sizeof s_fields / sizeof s_fields[0])

#define FAIL(st, msg, param, code)                                                             \
    do {                                                                                       \
        *status = (st);                                                                        \
        *errj = api_error((msg), "invalid_request_error", (param), (code));                    \
        goto err;                                                                              \
    } while (0)

/* Each field of the body against the table: unknown ones and refused ones are 400s. */
static int s_fields_check(json_t *root, int chat, int *status, json_t **errj)
{
    char msg[512];
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        size_t i;
        for (i = 0; i < N_FIELDS; i++)
            if (!strcmp(k, s_fields[i].name))
                break;
        if (i == N_FIELDS || !(s_fields[i].eps & (chat ? F_CHAT : F_CMPL))) {
            snprintf(msg, sizeof msg, "unknown field '%.60s' for %s (docs/serve.md lists the "
                     "fields this server honours)", k,
                     chat ? "/v1/chat/completions" : "/v1/completions");
            FAIL(400, msg, k, "unknown_parameter");
        }
        if (s_fields[i].st != F_REFUSED || json_is_null(v) || json_is_false(v) ||
            (json_is_number(v) && json_number_value(v) == s_fields[i].off))
            continue;
        snprintf(msg, sizeof msg, "'%s' is not supported by this server", k);
        FAIL(400, msg, k, "unsupported_parameter");
    }
    return 0;
err:
    return -1;
}

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

int api_render_chat(serve *srv, json_t *msgs, char **out, size_t *outlen, int *status,
                    json_t **errj)
{
    char msg[512], where[32];
    chat_msg *m = NULL;
    char **texts = NULL;
    char *rendered = NULL;
    size_t n = 0, len = 0;
    int rc = -1;
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
        /* "developer" is OpenAI's newer name for the system role (its o1 models and later). */
        if (!strcmp(rs, "developer"))
            rs = "system";
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant")) {
            snprintf(msg, sizeof msg, "%s: role '%.40s' is not one of system, developer, "
                     "user, assistant", where, rs);
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
    *out = rendered;
    *outlen = len;
    rendered = NULL;
    rc = 0;
err:
    for (size_t i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    free(m);
    free(rendered);
    return rc;
}

static int s_prompt_chat(serve *srv, json_t *root, serve_req *r, int *status, json_t **errj)
{
    char msg[512], *rendered = NULL;
    size_t len = 0, nt = 0;
    int trc = tools_prompt_chat(srv, root, r, status, errj); /* tools or tool history */
    if (trc <= 0)
        return trc;
    if (api_render_chat(srv, json_object_get(root, "messages"), &rendered, &len, status, errj))
        return -1;
    int rc = tokenizer_encode(srv->tok, rendered, len,
                              TOKENIZER_ADD_SPECIAL | TOKENIZER_PARSE_SPECIAL, &r->prompt, &nt,
                              msg, sizeof msg);
    free(rendered);
    if (rc)
        FAIL(400, msg, "messages", "invalid_value");
    r->n_prompt = (uint32_t)nt;
    return 0;
err:
    return -1;
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

/* The model asked for: with one model served any name is taken and echoed back (as
 * llama-server does: a client's default model name must not fail), unless --strict-model,
 * which takes only the file's name and the --alias names. */
static int s_model(serve *srv, json_t *root, serve_req *r, int *status, json_t **errj)
{
    char msg[512];
    json_t *model = json_object_get(root, "model");
    snprintf(r->model, sizeof r->model, "%s", srv->n_alias ? srv->alias[0] : srv->model_id);
    if (!model || json_is_null(model))
        return 0;
    if (!json_is_string(model))
        FAIL(400, "'model' must be a string", "model", "invalid_type");
    const char *name = json_string_value(model);
    int known = !strcmp(name, srv->model_id);
    for (uint32_t i = 0; i < srv->n_alias && !known; i++)
        known = !strcmp(name, srv->alias[i]);
    if (!known && srv->strict_model) {
        snprintf(msg, sizeof msg, "the model '%.100s' does not exist (this server has '%s'%s)",
                 name, srv->model_id, srv->n_alias ? " and its --alias names" : "");
        FAIL(404, msg, "model", "model_not_found");
    }
    snprintf(r->model, sizeof r->model, "%s", name);
    return 0;
err:
    return -1;
}

/* What this server does not do: OpenAI's deprecated functions / function_call (tools,
 * tool_choice, response_format and the grammar fields are tools.c's). */
static int s_check_scope(serve *srv, json_t *root, int *status, json_t **errj)
{
    char msg[512];
    (void)srv;
    static const char *const unsupported[] = { "functions", "function_call", NULL };
    for (int i = 0; unsupported[i]; i++)
        if (json_object_get(root, unsupported[i])) {
            snprintf(msg, sizeof msg, "'%s' is not supported by this server", unsupported[i]);
            FAIL(400, msg, unsupported[i], "unsupported_parameter");
        }
    return 0;
err:
    return -1;
}

/* logit_bias: OpenAI's {"token id": bias} with bias in [-100, 100] (-100 bans the token), or
 * llama-server's [[id, bias], ...] where a bias of false bans it. Every id is checked against
 * the vocabulary and every bias is a number: a bad entry is a 400, never skipped. */
static int s_logit_bias(serve *srv, json_t *root, serve_req *r, int *status, json_t **errj)
{
    char msg[512];
    json_t *lb = json_object_get(root, "logit_bias");
    if (!lb || json_is_null(lb))
        return 0;
    size_t n = json_is_object(lb) ? json_object_size(lb) : json_is_array(lb) ?
               json_array_size(lb) : (size_t)-1;
    if (n == (size_t)-1 || n > SERVE_MAX_BIAS) {
        snprintf(msg, sizeof msg, "'logit_bias' must be an object {\"token id\": bias} (or "
                 "llama-server's [[id, bias], ...]) of at most %d entries", SERVE_MAX_BIAS);
        FAIL(400, msg, "logit_bias", "invalid_type");
    }
    if (n && !(r->bias = calloc(n, sizeof *r->bias)))
        FAIL(500, "out of memory", NULL, NULL);
    const char *k;
    json_t *v;
    size_t i = 0;
    void *it = json_is_object(lb) ? json_object_iter(lb) : NULL;
    for (; i < n; i++) {
        long long id = -1;
        char *end = NULL;
        if (it) {
            k = json_object_iter_key(it);
            v = json_object_iter_value(it);
            it = json_object_iter_next(lb, it);
            id = strtoll(k, &end, 10);
            if (!k[0] || *end)
                id = -1;
        } else {
            json_t *e = json_array_get(lb, i);
            k = "";
            v = json_array_get(e, 1);
            if (json_is_array(e) && json_array_size(e) == 2 &&
                json_is_integer(json_array_get(e, 0)))
                id = json_integer_value(json_array_get(e, 0));
        }
        if (id < 0 || id >= (long long)srv->n_vocab) {
            snprintf(msg, sizeof msg, "logit_bias: '%.40s' is not a token id in 0..%u", it || k[0]
                     ? k : "entry", srv->n_vocab - 1);
            FAIL(400, msg, "logit_bias", "invalid_value");
        }
        double b;
        if (json_is_false(v))
            b = SAMPLER_BIAS_BAN;
        else if (json_is_number(v) && (b = json_number_value(v)) >= -100 && b <= 100)
            ;
        else {
            snprintf(msg, sizeof msg, "logit_bias: the bias of token %lld must be a number in "
                     "[-100, 100]", id);
            FAIL(400, msg, "logit_bias", "invalid_value");
        }
        r->bias[i] = (sampler_bias){ .token = (int32_t)id, .bias = (float)b };
    }
    r->so.bias = r->bias;
    r->so.n_bias = (uint32_t)n;
    return 0;
err:
    return -1;
}

/* A fresh seed for a request without one, so two calls differ and the response can say
 * which seed reproduces it. 32 bits: llama.cpp's seeds are uint32 and a JavaScript client
 * reads numbers as doubles (exact only to 2^53). */
static uint64_t s_fresh_seed(void)
{
    uint32_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = (uint32_t)(ts.tv_nsec ^ ts.tv_sec ^ (long)pthread_self());
    }
    return v;
}

/* Sampling: OpenAI's semantics (temperature 1 and top_p 1 by default, no top_k / min_p /
 * repetition penalty unless asked), llama-server's extra fields, n, the seed; *maxt the
 * tokens asked for (0: as many as fit). */
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
        { "min_p", 0, 1, &r->so.min_p },
        { "repeat_penalty", 1e-3, 100, &r->so.repeat_penalty },
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
    long long ll = 0;
    /* top_k: 0 (or llama-server's -1) is off */
    if (s_int(root, "top_k", -1, INT32_MAX, &ll, msg, sizeof msg))
        return s_badparam(msg, "top_k", status, errj);
    r->so.top_k = ll > 0 ? (int32_t)ll : 0;
    ll = 64;
    /* repeat_last_n: -1 is the whole context (llama-server's), 0 off */
    if (s_int(root, "repeat_last_n", -1, srv->n_ctx, &ll, msg, sizeof msg))
        return s_badparam(msg, "repeat_last_n", status, errj);
    r->so.repeat_last_n = ll < 0 ? srv->n_ctx : (uint32_t)ll;
    ll = 1;
    if (s_int(root, "n", 1, SERVE_MAX_N, &ll, msg, sizeof msg))
        return s_badparam(msg, "n", status, errj);
    r->n = (uint32_t)ll;
    json_t *seed = json_object_get(root, "seed");
    ll = 0;
    if (s_int(root, "seed", INT64_MIN, INT64_MAX, &ll, msg, sizeof msg))
        return s_badparam(msg, "seed", status, errj);
    /* llama-server's -1 (and its default 4294967295) mean "a random seed" */
    r->so.seed = !seed || json_is_null(seed) || ll == -1 || ll == 4294967295LL ? s_fresh_seed()
                 : (uint64_t)ll;
    if (s_bool(root, "ignore_eos", &r->ignore_eos, msg, sizeof msg))
        return s_badparam(msg, "ignore_eos", status, errj);
    /* max_completion_tokens (OpenAI's newer name) over max_tokens over n_predict; a null is
     * unset, and llama-server's -1 (n_predict) is "as many as fit" */
    static const char *const mkeys[] = { "max_completion_tokens", "max_tokens", "n_predict" };
    for (size_t i = 0; i < 3; i++) {
        json_t *v = json_object_get(root, mkeys[i]);
        if (!v || json_is_null(v))
            continue;
        if (i == 2 && json_is_integer(v) && json_integer_value(v) == -1)
            break;
        if (s_int(root, mkeys[i], 1, srv->n_ctx, maxt, msg, sizeof msg))
            return s_badparam(msg, mkeys[i], status, errj);
        break;
    }
    r->max_set = *maxt > 0;
    return s_logit_bias(srv, root, r, status, errj);
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

/* "speculative": absent or null, the server's default (its --draft or --draft-lookup, else
 * off); false off; true the server's drafter, or prompt lookup when it has none; an object
 * {"draft": "model" | "lookup", "max": 1..32, "greedy": bool, "fixed": bool} picks the
 * drafter, its most tokens a pass, argmax drafts when sampling (draft_opts.greedy) and k
 * fixed at max (draft_opts.fixed); the fields not given are the server's. */
static int s_spec(serve *srv, json_t *root, serve_req *r, int *status, json_t **errj)
{
    char msg[512];
    json_t *v = json_object_get(root, "speculative"), *x;
    const char *k;
    r->spec = srv->spec_on;
    r->dopt = srv->draft.o;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v) && !json_is_object(v))
        FAIL(400, "'speculative' must be a boolean or an object {\"draft\": \"model\" | "
             "\"lookup\", \"max\": 1..32, \"greedy\": bool, \"fixed\": bool}", "speculative",
             "invalid_type");
    r->spec = !json_is_false(v);
    if (!srv->spec_on)
        r->dopt = (draft_opts){ .lookup = 1 };
    if (!json_is_object(v))
        return 0;
    json_object_foreach(v, k, x) if (strcmp(k, "draft") && strcmp(k, "max") &&
                                     strcmp(k, "greedy") && strcmp(k, "fixed")) {
        snprintf(msg, sizeof msg, "speculative: unknown field '%.60s' (known: draft, max, "
                 "greedy, fixed)", k);
        FAIL(400, msg, "speculative", "unknown_parameter");
    }
    const char *d = json_string_value(json_object_get(v, "draft"));
    if (json_object_get(v, "draft") && (!d || (strcmp(d, "model") && strcmp(d, "lookup"))))
        FAIL(400, "speculative.draft must be \"model\" or \"lookup\"", "speculative",
             "invalid_value");
    if (d && !strcmp(d, "model") && !srv->draft.o.model)
        FAIL(400, "speculative.draft \"model\": this server has no draft model (start it with "
             "--draft DRAFT.gguf)", "speculative", "invalid_value");
    if (d)
        r->dopt = !strcmp(d, "model") ? (draft_opts){ .model = srv->draft.o.model,
                                                      .greedy = srv->draft.o.greedy,
                                                      .fixed = srv->draft.o.fixed }
                                      : (draft_opts){ .lookup = 1, .fixed = srv->draft.o.fixed };
    long long ll = 0;
    if (s_int(v, "max", 1, DRAFT_K_MAX, &ll, msg, sizeof msg) ||
        s_bool(v, "greedy", &r->dopt.greedy, msg, sizeof msg) ||
        s_bool(v, "fixed", &r->dopt.fixed, msg, sizeof msg))
        return s_badparam(msg, "speculative", status, errj);
    r->dopt.k_max = ll ? (uint32_t)ll : d ? 0 : r->dopt.k_max;
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
    if (s_fields_check(root, r->chat, status, errj) || s_model(srv, root, r, status, errj) ||
        s_check_scope(srv, root, status, errj) ||
        s_sampling(srv, root, r, &maxt, status, errj) || s_stream(root, r, status, errj) ||
        s_stop(root, r, status, errj) || s_logprobs(root, r, status, errj) ||
        s_spec(srv, root, r, status, errj) ||
        tools_parse(srv, root, r, status, errj) ||
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
    free(r->bias);
    r->bias = NULL;
    r->so.bias = NULL;
    r->so.n_bias = 0;
    tools_req_free(r);
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

/* What every response and chunk carries besides its choices: the id, the model named in the
 * request, the seed that reproduces it (choice i drew with seed + i) and OpenAI's
 * system_fingerprint (the arm: the same seed on another arm is another random stream only
 * where their logits differ). */
static json_t *s_envelope(serve_job *job, const char *object)
{
    char fp[64];
    snprintf(fp, sizeof fp, "swarm-%s", job->srv->arm ? job->srv->arm : "reference");
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:I}", "id", job->id, "object", object, "created",
                     (json_int_t)job->created, "model", job->req.model, "system_fingerprint",
                     fp, "seed", (json_int_t)job->req.so.seed);
}

json_t *api_chunk(serve_job *job, const char *text, size_t n, json_t *lp, const char *finish)
{
    json_t *ch;
    serve_choice *c = &job->ch[job->cur];
    if (lp && !json_is_array(lp)) {
        json_t *a = json_array();
        json_array_append_new(a, lp);
        lp = a;
    }
    if (job->req.chat) {
        json_t *delta = json_object();
        if (c->n_gen == 0 && !finish)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (!finish)
            json_object_set_new(delta, "content", api_string(text, n));
        ch = json_pack("{s:i,s:o,s:o,s:o}", "index", (int)job->cur, "delta", delta, "logprobs",
                       lp ? json_pack("{s:o}", "content", lp) : json_null(), "finish_reason",
                       finish ? json_string(finish) : json_null());
    } else {
        ch = json_pack("{s:i,s:o,s:o,s:o}", "index", (int)job->cur, "text", api_string(text, n),
                       "logprobs", lp ? s_legacy_lp(lp) : json_null(), "finish_reason",
                       finish ? json_string(finish) : json_null());
    }
    json_t *j = s_envelope(job, job->req.chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(j, "choices", json_pack("[o]", ch));
    return j;
}

json_t *api_shutdown_error(void)
{
    return api_error("the server stopped before this reply was finished (its --grace ran "
                     "out); retry on another server", "server_error", NULL, "shutting_down");
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
    json_t *t = json_pack("{s:f,s:f,s:f,s:i,s:f,s:i,s:i,s:s,s:s}", "queue_ms",
                          (job->t_start - job->t_recv) * 1e3, "ttft_ms", ttft, "prefill_ms",
                          prefill, "predicted_n", (int)job->n_gen, "predicted_per_second",
                          gen > 0 ? (job->n_gen - 1) / gen : 0.0, "prompt_n",
                          (int)(job->req.n_prompt - job->n_cached), "cache_n",
                          (int)job->n_cached, "ids_digest", ids, "logits_digest", lg);
    tools_timings(job, t);
    if (job->req.spec) { /* draft_n, draft_n_accepted: llama-server's names */
        json_object_set_new(t, "draft_n", json_integer(job->n_drafted));
        json_object_set_new(t, "draft_n_accepted", json_integer(job->n_accepted));
        json_object_set_new(t, "draft_passes", json_integer(job->n_passes));
        json_object_set_new(t, "draft_ms", json_real(job->draft_ms));
    }
    return t;
}

json_t *api_usage_chunk(serve_job *job)
{
    json_t *j = s_envelope(job, job->req.chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(j, "choices", json_array());
    json_object_set_new(j, "usage", s_usage(job));
    json_object_set_new(j, "timings", s_timings(job));
    return j;
}

json_t *api_params(const sampler_opts *so, int max_tokens, int stream)
{
    return json_pack("{s:I,s:f,s:i,s:f,s:f,s:i,s:f,s:f,s:f,s:i,s:i,s:b,s:[s,s,s,s,s,s]}",
                     "seed", (json_int_t)so->seed, "temperature", (double)so->temperature,
                     "top_k", (int)so->top_k, "top_p", (double)so->top_p, "min_p",
                     (double)so->min_p, "repeat_last_n", (int)so->repeat_last_n,
                     "repeat_penalty", (double)so->repeat_penalty, "presence_penalty",
                     (double)so->presence_penalty, "frequency_penalty",
                     (double)so->frequency_penalty, "n_predict", max_tokens, "max_tokens",
                     max_tokens, "stream", stream, "samplers", "logit_bias", "penalties",
                     "top_k", "top_p", "min_p", "temperature");
}

json_t *api_response(serve_job *job)
{
    json_t *chs = json_array();
    for (uint32_t i = 0; i < job->req.n; i++) {
        serve_choice *c = &job->ch[i];
        json_t *text = api_string(c->text ? c->text : "", c->text_len);
        json_t *lp = c->lp ? json_incref(c->lp) : NULL, *ch;
        const char *fin = tools_finish_name(job, i);
        if (job->req.chat)
            ch = json_pack("{s:i,s:o,s:o,s:s}", "index", (int)i, "message",
                           tools_message(job, i, text), "logprobs",
                           lp ? json_pack("{s:o}", "content", lp) : json_null(),
                           "finish_reason", fin);
        else
            ch = json_pack("{s:i,s:o,s:o,s:s}", "index", (int)i, "text", text, "logprobs",
                           lp ? s_legacy_lp(lp) : json_null(), "finish_reason", fin);
        json_array_append_new(chs, ch);
    }
    json_t *j = s_envelope(job, job->req.chat ? "chat.completion" : "text_completion");
    json_object_set_new(j, "choices", chs);
    json_object_set_new(j, "usage", s_usage(job));
    json_object_set_new(j, "timings", s_timings(job));
    json_object_set_new(j, "generation_settings",
                        api_params(&job->req.so, job->req.max_set ? (int)job->req.max_tokens
                                   : -1, job->req.stream));
    return j;
}

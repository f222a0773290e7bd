/* native.c — llama-server's own endpoints, in its request and response shapes: /tokenize,
 * /detokenize, /apply-template, /props, /slots. serve/
 *
 * Clients written for llama-server (its web UI, llama.vim, tools that count tokens before
 * sending) learn the context size, the template and the tokens from these rather than from
 * errors. Field names and defaults are llama.cpp's tools/server/README.md's; swarm adds what
 * only it has (the arm, the workers) beside them, never instead of them.
 */
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "serve/serve_int.h"

#define FAIL(st, msg, param, code)                                                             \
    do {                                                                                       \
        *status = (st);                                                                        \
        *out = api_error((msg), "invalid_request_error", (param), (code));                     \
        goto err;                                                                              \
    } while (0)

/* A boolean option: absent or null leaves *v. -1 when it is something else. */
static int s_flag(json_t *root, const char *key, int *v)
{
    json_t *j = json_object_get(root, key);
    if (!j || json_is_null(j))
        return 0;
    if (!json_is_boolean(j))
        return -1;
    *v = json_is_true(j);
    return 0;
}

/* A piece as llama-server gives it: a string when it is valid UTF-8, else its bytes. */
static json_t *s_piece(const char *p, size_t n)
{
    json_t *j = json_stringn(p, n);
    if (j)
        return j;
    j = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(j, json_integer((unsigned char)p[i]));
    return j;
}

/* POST /tokenize {content, add_special = false, parse_special = true, with_pieces = false}
 * -> {tokens: [id...]} or {tokens: [{id, piece}...]} */
static int s_tokenize(serve *srv, json_t *root, json_t **out, int *status)
{
    char msg[256];
    int add = 0, parse = 1, pieces = 0;
    int32_t *ids = NULL;
    size_t n = 0;
    json_t *content = json_object_get(root, "content");
    if (!json_is_string(content))
        FAIL(400, "'content' must be a string (the text to tokenize)", "content",
             "invalid_type");
    if (s_flag(root, "add_special", &add) || s_flag(root, "parse_special", &parse) ||
        s_flag(root, "with_pieces", &pieces))
        FAIL(400, "add_special, parse_special and with_pieces must be booleans", NULL,
             "invalid_type");
    if (tokenizer_encode(srv->tok, json_string_value(content), json_string_length(content),
                         (add ? TOKENIZER_ADD_SPECIAL : 0) | (parse ? TOKENIZER_PARSE_SPECIAL : 0),
                         &ids, &n, msg, sizeof msg))
        FAIL(400, msg, "content", "invalid_value");
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        if (!pieces) {
            json_array_append_new(a, json_integer(ids[i]));
            continue;
        }
        size_t pl = 0;
        const char *p = tokenizer_piece(srv->tok, ids[i], 1, &pl);
        json_array_append_new(a, json_pack("{s:i,s:o}", "id", (int)ids[i], "piece",
                                           s_piece(p ? p : "", p ? pl : 0)));
    }
    free(ids);
    *out = json_pack("{s:o}", "tokens", a);
    return 0;
err:
    return -1;
}

/* POST /detokenize {tokens: [id...]} -> {content} */
static int s_detokenize(serve *srv, json_t *root, json_t **out, int *status)
{
    char msg[256];
    json_t *toks = json_object_get(root, "tokens"), *v;
    int32_t *ids = NULL;
    char *text = NULL;
    size_t len = 0, i;
    if (!json_is_array(toks))
        FAIL(400, "'tokens' must be an array of token ids", "tokens", "invalid_type");
    if (!(ids = malloc((json_array_size(toks) + 1) * sizeof *ids)))
        FAIL(500, "out of memory", NULL, NULL);
    json_array_foreach(toks, i, v) {
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || id >= tokenizer_n_vocab(srv->tok)) {
            snprintf(msg, sizeof msg, "tokens[%zu]: token ids must be integers in 0..%d", i,
                     tokenizer_n_vocab(srv->tok) - 1);
            FAIL(400, msg, "tokens", "invalid_value");
        }
        ids[i] = (int32_t)id;
    }
    /* llama-server detokenizes with special tokens shown (its tokens_to_str) */
    if (tokenizer_decode(srv->tok, ids, json_array_size(toks), 1, &text, &len, msg, sizeof msg))
        FAIL(400, msg, "tokens", "invalid_value");
    *out = json_pack("{s:o}", "content", api_string(text, len));
    free(text);
    free(ids);
    return 0;
err:
    free(ids);
    return -1;
}

/* POST /apply-template {messages, tools} -> {prompt} (with tools or tool history: the
 * family's tool rendering, as a chat request would have it) */
static int s_apply_template(serve *srv, json_t *root, json_t **out, int *status)
{
    char *text = NULL;
    size_t len = 0;
    int rc = tools_render_chat(srv, root, &text, status, out);
    if (rc < 0)
        return -1;
    if (rc == 0)
        len = strlen(text);
    else if (api_render_chat(srv, json_object_get(root, "messages"), &text, &len, status, out))
        return -1;
    *out = json_pack("{s:o}", "prompt", api_string(text, len));
    free(text);
    return 0;
}

/* The defaults a request gets when it names nothing (api.c's s_sampling: OpenAI's). */
static void s_defaults(sampler_opts *so)
{
    sampler_opts_default(so);
    so->temperature = 1.0f;
    so->top_k = 0;
    so->top_p = 1.0f;
    so->min_p = 0.0f;
    so->seed = 4294967295u; /* llama-server's "a fresh random seed per request" */
}

/* One slot in llama-server's shape, swarm's extras beside. */
static json_t *s_slot(serve *srv, uint32_t i)
{
    sched_slot_info si;
    sched_slot(srv->sched, i, &si);
    if (!si.busy)
        s_defaults(&si.so);
    int n_predict = si.busy && si.max_tokens ? (int)si.max_tokens : -1;
    return json_pack("{s:i,s:i,s:i,s:b,s:b,s:o,s:{s:b,s:i,s:i},s:s,s:i,s:i}", "id", (int)i,
                     "id_task", -1, "n_ctx", (int)si.n_ctx, "speculative", 0, "is_processing",
                     si.busy, "params", api_params(&si.so, n_predict, 0), "next_token",
                     "has_next_token", si.busy, "n_remain",
                     n_predict < 0 ? -1 : n_predict - (int)si.n_decoded, "n_decoded",
                     (int)si.n_decoded, "request_id", si.id, "n_prompt_tokens",
                     (int)si.n_prompt, "n_cached_tokens", (int)si.n_cached);
}

#ifdef SWARM_GIT_REV
static const char s_build[] = "swarm " SWARM_GIT_REV;
#else
static const char s_build[] = "swarm";
#endif

/* GET /props */
static int s_props(serve *srv, json_t **out)
{
    const char *jinja = NULL;
    char err[256];
    if (gguf_get_str(llm_model_gguf(srv->model), "tokenizer.chat_template", &jinja, err,
                     sizeof err))
        jinja = "";
    json_t *dgs = s_slot(srv, 0);
    json_object_set_new(dgs, "is_processing", json_false());
    json_object_set_new(json_object_get(dgs, "params"), "seed", json_integer(4294967295LL));
    json_t *models = api_models(srv);
    json_t *meta = json_object_get(json_array_get(json_object_get(models, "data"), 0), "meta");
    size_t bl = 0, el = 0;
    int32_t bos = tokenizer_bos(srv->tok), eos = tokenizer_eos(srv->tok);
    const char *b = bos >= 0 ? tokenizer_piece(srv->tok, bos, 1, &bl) : NULL;
    const char *e = eos >= 0 ? tokenizer_piece(srv->tok, eos, 1, &el) : NULL;
    *out = json_pack("{s:o,s:i,s:s,s:s,s:s,s:s,s:{s:b,s:b},s:o,s:o,s:s,s:b,s:s,s:s,s:O}",
                     "default_generation_settings", dgs, "total_slots", (int)srv->n_slots,
                     "model_path", srv->model_path, "model_alias",
                     srv->n_alias ? srv->alias[0] : srv->model_id, "chat_template", jinja,
                     "chat_template_name", srv->chat_template, "modalities", "vision", 0,
                     "audio", 0, "bos_token", api_string(b ? b : "", b ? bl : 0), "eos_token",
                     api_string(e ? e : "", e ? el : 0), "build_info", s_build, "is_sleeping",
                     0, "arm", srv->arm, "endpoint_slots", "enabled", "meta", meta);
    json_decref(models);
    return 0;
}

int native_handle(serve *srv, serve_endpoint ep, const char *body, size_t len, json_t **out,
                  int *status)
{
    char msg[512];
    json_error_t je;
    json_t *root = NULL;
    int rc = -1;
    *status = 200;
    *out = NULL;
    if (ep == EP_PROPS)
        return s_props(srv, out);
    if (ep == EP_SLOTS) {
        *out = json_array();
        for (uint32_t i = 0; i < srv->n_slots; i++)
            json_array_append_new(*out, s_slot(srv, i));
        return 0;
    }
    if (!(root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je))) {
        snprintf(msg, sizeof msg, "malformed JSON body: line %d, column %d: %s", je.line,
                 je.column, je.text);
        FAIL(400, msg, NULL, "invalid_json");
    }
    if (!json_is_object(root))
        FAIL(400, "the body must be a JSON object", NULL, "invalid_type");
    rc = ep == EP_TOKENIZE     ? s_tokenize(srv, root, out, status)
         : ep == EP_DETOKENIZE ? s_detokenize(srv, root, out, status)
                               : s_apply_template(srv, root, out, status);
err:
    json_decref(root);
    return rc;
}

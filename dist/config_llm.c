/* config_llm.c — a text-lab config's [llm] and [lab] sections (config_llm.h). dist/ */
#include "dist/config_llm.h"

#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"

static int s_set_u32(config_llm *c, const char *key, const char *v, uint32_t lo, uint32_t hi,
                     uint32_t *dst)
{
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        snprintf(c->why, sizeof c->why, "%s = '%s': an integer in %u..%u", key, v, lo, hi);
        return 0;
    }
    *dst = (uint32_t)x;
    return 1;
}

static int s_handler(void *user, const char *sec, const char *key, const char *v)
{
    config_llm *c = user;
    if (!key)
        return 1; /* a section header alone */
    if (!strcmp(sec, "llm")) {
        if (!strcmp(key, "model"))
            return snprintf(c->model, sizeof c->model, "%s", v), 1;
        if (!strcmp(key, "vocab"))
            return snprintf(c->vocab, sizeof c->vocab, "%s", v), 1;
        if (!strcmp(key, "type"))
            return snprintf(c->type, sizeof c->type, "%s", v), 1;
        if (!strcmp(key, "prompt"))
            return snprintf(c->prompt, sizeof c->prompt, "%s", v), 1;
        if (!strcmp(key, "generate")) {
            uint32_t g;
            if (!s_set_u32(c, key, v, 0, 1, &g))
                return 0;
            return c->generate = (int)g, 1;
        }
        if (!strcmp(key, "cap")) {
            if (util_parse_size(v, &c->cap) || !c->cap) {
                snprintf(c->why, sizeof c->why, "cap = '%s': a size (600M, ...)", v);
                return 0;
            }
            return 1;
        }
        struct { const char *k; uint32_t lo, hi, *dst; } u[] = {
            { "dim", 8, 65536, &c->dim },         { "layers", 1, 512, &c->layers },
            { "heads", 1, 1024, &c->heads },      { "kv_heads", 1, 1024, &c->kv_heads },
            { "ff", 8, 262144, &c->ff },          { "ctx_train", 16, 1u << 20, &c->ctx_train },
            { "seed", 0, UINT32_MAX, &c->seed },  { "tokens", 1, 4096, &c->tokens },
            { "ctx", 16, 1u << 20, &c->ctx },     { "batch", 1, 4096, &c->batch },
            { "workers", 0, 8, &c->workers },     { "threads", 1, 64, &c->threads },
        };
        for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
            if (!strcmp(key, u[i].k))
                return s_set_u32(c, key, v, u[i].lo, u[i].hi, u[i].dst);
    } else if (!strcmp(sec, "lab")) {
        if (!strcmp(key, "repeats"))
            return s_set_u32(c, key, v, 1, 100, &c->repeats);
        if (!strcmp(key, "out"))
            return snprintf(c->out, sizeof c->out, "%s", v), 1;
        if (!strcmp(key, "conditions")) {
            char buf[1024], *save = NULL;
            snprintf(buf, sizeof buf, "%s", v);
            c->n_cond = 0;
            for (char *t = strtok_r(buf, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save)) {
                if (c->n_cond == CONFIG_LLM_MAX_COND || strlen(t) >= sizeof c->cond[0]) {
                    snprintf(c->why, sizeof c->why, "conditions: at most %d, each shorter "
                             "than %zu characters", CONFIG_LLM_MAX_COND, sizeof c->cond[0]);
                    return 0;
                }
                snprintf(c->cond[c->n_cond++], sizeof c->cond[0], "%s", t);
            }
            return 1;
        }
    }
    snprintf(c->why, sizeof c->why, "unknown key '%s' in [%s]", key, sec);
    return 0;
}

static int s_has_llm(void *user, const char *sec, const char *key, const char *v)
{
    (void)key, (void)v;
    if (!strcmp(sec, "llm"))
        *(int *)user = 1;
    return 1;
}

int config_llm_wants(const char *path)
{
    int yes = 0;
    return ini_parse(path, s_has_llm, &yes) >= 0 && yes;
}

int config_llm_model_path(const char *config, char *path, size_t len, char *err, size_t errlen)
{
    config_llm *c = malloc(sizeof *c); /* several PATH_MAX strings: not for a caller's stack */
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = config_llm_load(c, config);
    if (rc == 0)
        snprintf(path, len, "%s", c->model);
    else
        snprintf(err, errlen, "%s: cannot take the model from it (see above)", config);
    free(c);
    return rc;
}

int config_llm_load(config_llm *c, const char *path)
{
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    /* TinyLlama-1.1B's shape: the model, F16 */
    c->dim = 2048, c->layers = 22, c->heads = 32, c->kv_heads = 4, c->ff = 5632;
    c->ctx_train = 2048, c->seed = 1, c->tokens = 32, c->ctx = 512, c->batch = 32;
    c->threads = 1, c->repeats = 3, c->cap = 600ull << 20;
    snprintf(c->type, sizeof c->type, "f16");
    snprintf(c->prompt, sizeof c->prompt, "Once upon a time");
    snprintf(c->out, sizeof c->out, "results");
    int line = ini_parse(path, s_handler, c);
    if (line < 0) {
        log_error("%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    if (line > 0) {
        log_error("%s:%d: %s", path, line, c->why[0] ? c->why : "not a key = value line");
        return -1;
    }
    if (!c->model[0] || !c->n_cond) {
        log_error("%s: needs [llm] model and [lab] conditions", path);
        return -1;
    }
    return 0;
}

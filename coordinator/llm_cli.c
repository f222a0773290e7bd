/* llm_cli.c — model opening and flag parsing shared by generate, chat and perplexity. coordinator/ */
#include "coordinator/llm_cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"

static int s_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int llm_cli_open(llm_cli_model *lm, const char *arg, char *err, size_t errlen)
{
    memset(lm, 0, sizeof *lm);
    if (s_ends_with(arg, ".gguf")) {
        snprintf(lm->path, sizeof lm->path, "%s", arg);
    } else {
        /* config_t holds several PATH_MAX paths: too big for a command's stack frame. */
        config_t *c = malloc(sizeof *c);
        if (!c) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        config_defaults(c);
        if (config_load(c, arg, err, errlen)) {
            free(c);
            return -1;
        }
        snprintf(lm->path, sizeof lm->path, "%s", c->model);
        free(c);
        if (!lm->path[0]) {
            snprintf(err, errlen, "%s: no [model] path", arg);
            return -1;
        }
    }
    if (!(lm->m = llm_model_open(lm->path, err, errlen)))
        return -1;
    if (!(lm->t = tokenizer_open(llm_model_gguf(lm->m), err, errlen))) {
        llm_model_free(&lm->m);
        return -1;
    }
    return 0;
}

void llm_cli_close(llm_cli_model *lm)
{
    tokenizer_free(&lm->t);
    llm_model_free(&lm->m);
}

int llm_cli_u32(const char *flag, const char *s, uint32_t lo, uint32_t hi, uint32_t *out,
                char *err, size_t errlen)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno || s[0] == '-' || s[0] == '+' || v < lo || v > hi) {
        snprintf(err, errlen, "%s '%s': want a whole number in %u..%u", flag, s, lo, hi);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

int llm_cli_u64(const char *flag, const char *s, uint64_t *out, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno || s[0] == '-' || s[0] == '+') {
        snprintf(err, errlen, "%s '%s': want a whole number >= 0", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

int llm_cli_f32(const char *flag, const char *s, float lo, float hi, float *out, char *err,
                size_t errlen)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
        snprintf(err, errlen, "%s '%s': want a number in [%g, %g]", flag, s, lo, hi);
        return -1;
    }
    *out = (float)v;
    return 0;
}

char *llm_cli_read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0;
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = (n + 65536 + 1) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                snprintf(err, errlen, "%s: out of memory", path);
                goto err;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, 65536, f);
        n += got;
        if (got < 65536)
            break;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: read failed", path);
        goto err;
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
err:
    fclose(f);
    free(buf);
    return NULL;
}

/* llm_cli.c — model opening and flag parsing shared by generate, chat and perplexity. coordinator/ */
#include "coordinator/llm_cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/gguf.h"
#include "common/util.h"
#include "quant/quant.h"

static int s_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* The GGUF path arg names: itself, or a config's [model] path. */
static int s_resolve(llm_cli_model *lm, const char *arg, char *err, size_t errlen)
{
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
    return 0;
}

int llm_cli_open(llm_cli_model *lm, const char *arg, char *err, size_t errlen)
{
    memset(lm, 0, sizeof *lm);
    if (s_resolve(lm, arg, err, errlen))
        return -1;
    if (!(lm->m = llm_model_open(lm->path, err, errlen)))
        return -1;
    if (!(lm->t = tokenizer_open(llm_model_gguf(lm->m), err, errlen))) {
        llm_model_free(&lm->m);
        return -1;
    }
    return 0;
}

int llm_cli_open_tok(llm_cli_model *lm, const char *arg, char *err, size_t errlen)
{
    memset(lm, 0, sizeof *lm);
    if (s_resolve(lm, arg, err, errlen))
        return -1;
    gguf_file *g = gguf_open(lm->path, err, errlen);
    arch_model am;
    int rc = -1;
    if (!g)
        return -1;
    /* arch_model_open validates every field the plan will use; only the context is kept */
    if (arch_model_open(&am, g, err, errlen))
        goto out;
    lm->n_ctx_train = am.hp.n_ctx_train;
    arch_model_close(&am);
    if (!(lm->t = tokenizer_open(g, err, errlen)))
        goto out;
    rc = 0;
out:
    gguf_close(&g);
    return rc;
}

int llm_cli_open_model(llm_cli_model *lm, const llm_opts *o, char *err, size_t errlen)
{
    return (lm->m = llm_model_open_opts(lm->path, o, err, errlen)) ? 0 : -1;
}

void llm_cli_ssd_init(llm_cli_ssd_flags *f)
{
    memset(f, 0, sizeof *f);
    f->buffered = -1;
}

int llm_cli_ssd_flag(llm_cli_ssd_flags *f, int argc, char **argv, int *i, char *err,
                     size_t errlen)
{
    const char *k = argv[*i];
    if (!strcmp(k, "--buffered")) {
        f->buffered = 1;
        return 1;
    }
    if (strcmp(k, "--cap") && strcmp(k, "--chunk") && strcmp(k, "--queue-depth"))
        return 0;
    if (*i + 1 >= argc) {
        snprintf(err, errlen, "%s needs a value", k);
        return -1;
    }
    const char *v = argv[++*i];
    if (!strcmp(k, "--queue-depth"))
        return llm_cli_u32(k, v, 1, 256, &f->queue_depth, err, errlen) ? -1 : 1;
    uint64_t b;
    if (util_parse_size(v, &b) || !b) {
        snprintf(err, errlen, "%s '%s': not a size (600M, 4M, 65536, ...)", k, v);
        return -1;
    }
    *(!strcmp(k, "--cap") ? &f->cap_bytes : &f->chunk_bytes) = b;
    return 1;
}

int llm_cli_ssd_opts(const llm_cli_ssd_flags *f, const char *arg, llm_opts *o, char *from,
                     size_t fromlen, char *err, size_t errlen)
{
    config_t *c = malloc(sizeof *c); /* several PATH_MAX paths: not for a stack frame */
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    config_defaults(c);
    snprintf(from, fromlen, "defaults");
    if (!s_ends_with(arg, ".gguf")) {
        if (config_load(c, arg, err, errlen)) {
            free(c);
            return -1;
        }
        snprintf(from, fromlen, "%s [ssd]", arg);
    }
    memset(o, 0, sizeof *o);
    o->arm = LLM_ARM_SSD;
    o->cap_bytes = f->cap_bytes ? f->cap_bytes : c->cap_bytes;
    o->chunk_bytes = f->chunk_bytes ? f->chunk_bytes : c->chunk_bytes;
    o->queue_depth = f->queue_depth ? f->queue_depth : c->queue_depth;
    o->overhead_bytes = c->overhead_bytes;
    o->buffered = f->buffered >= 0 ? f->buffered : c->buffered;
    free(c);
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

void llm_cli_gen_defaults(llm_cli_gen_opts *o)
{
    memset(o, 0, sizeof *o);
    sampler_opts_default(&o->so);
    o->n_predict = 64;
    o->n_batch = 64;
    o->threads = 1;
}

int llm_cli_gen_flag(llm_cli_gen_opts *o, int argc, char **argv, int *i, char *err,
                     size_t errlen)
{
    const char *f = argv[*i];
    static const char *const with_value[] = { "-n", "--ctx", "--batch", "--threads", "--temp",
                                              "--top-k", "--top-p", "--min-p",
                                              "--repeat-penalty", "--seed", "--stop", NULL };
    if (!strcmp(f, "--no-bos")) {
        o->no_bos = 1;
        return 1;
    }
    int known = 0;
    for (int k = 0; with_value[k]; k++)
        known |= !strcmp(f, with_value[k]);
    if (!known)
        return 0;
    if (*i + 1 >= argc) {
        snprintf(err, errlen, "%s needs a value", f);
        return -1;
    }
    const char *v = argv[++*i];
    uint32_t u;
    int rc = 0;
    if (!strcmp(f, "-n"))
        rc = llm_cli_u32(f, v, 1, 1u << 20, &o->n_predict, err, errlen);
    else if (!strcmp(f, "--ctx"))
        rc = llm_cli_u32(f, v, 1, 1u << 24, &o->n_ctx, err, errlen);
    else if (!strcmp(f, "--batch"))
        rc = llm_cli_u32(f, v, 1, 4096, &o->n_batch, err, errlen);
    else if (!strcmp(f, "--threads"))
        rc = llm_cli_u32(f, v, 1, QUANT_MAX_THREADS, &o->threads, err, errlen);
    else if (!strcmp(f, "--temp"))
        rc = llm_cli_f32(f, v, 0, 100, &o->so.temperature, err, errlen);
    else if (!strcmp(f, "--top-k")) {
        rc = llm_cli_u32(f, v, 0, INT32_MAX, &u, err, errlen);
        o->so.top_k = (int32_t)u;
    } else if (!strcmp(f, "--top-p"))
        rc = llm_cli_f32(f, v, 0, 1, &o->so.top_p, err, errlen);
    else if (!strcmp(f, "--min-p"))
        rc = llm_cli_f32(f, v, 0, 1, &o->so.min_p, err, errlen);
    else if (!strcmp(f, "--repeat-penalty"))
        rc = llm_cli_f32(f, v, 0, 100, &o->so.repeat_penalty, err, errlen);
    else if (!strcmp(f, "--seed"))
        rc = llm_cli_u64(f, v, &o->so.seed, err, errlen);
    else if (!strcmp(f, "--stop")) {
        if (o->n_stop == ENGINE_MAX_STOP || !*v || strlen(v) > ENGINE_MAX_STOP_LEN) {
            snprintf(err, errlen, "--stop '%s': 1..%d bytes, at most %d of them", v,
                     ENGINE_MAX_STOP_LEN, ENGINE_MAX_STOP);
            return -1;
        }
        o->stops[o->n_stop++] = v;
    }
    return rc ? -1 : 1;
}

int llm_cli_ctx(const llm_cli_gen_opts *o, const llm_model *m, uint32_t *n_ctx, char *err,
                size_t errlen)
{
    uint32_t train = llm_model_arch(m)->hp.n_ctx_train;
    if (o->n_ctx > train) {
        snprintf(err, errlen, "--ctx %u: %s was trained for %u positions at most", o->n_ctx,
                 llm_model_gguf(m)->path, train);
        return -1;
    }
    /* 4096 by default: a 128k-context file would otherwise ask for a KV cache it never uses
     * (Llama 3.1 8B: 32 layers x 8 KV heads x 128 x K and V x 4 bytes = 256 KiB of f32 per
     * position, 32 GiB at 128k). */
    *n_ctx = o->n_ctx ? o->n_ctx : train < 4096 ? train : 4096;
    return 0;
}

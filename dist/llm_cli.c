/* llm_cli.c — model opening and flag parsing shared by generate, chat and perplexity. dist/ */
#include "dist/llm_cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/config.h"
#include "gguf/gguf.h"
#include "base/sec.h"
#include "base/util.h"
#include "runtime/gate.h"
#include "quant/quant.h"

static int s_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* The GGUF path arg names: itself, or the model a config names (config_model_path). */
static int s_resolve(llm_cli_model *lm, const char *arg, char *err, size_t errlen)
{
    if (!s_ends_with(arg, ".gguf")) /* a config: a text lab's [llm] model, or [model] path */
        return config_model_path(arg, lm->path, sizeof lm->path, err, errlen);
    snprintf(lm->path, sizeof lm->path, "%s", arg);
    return 0;
}

int llm_cli_resolve(const char *arg, char *path, size_t len, char *err, size_t errlen)
{
    llm_cli_model *lm = calloc(1, sizeof *lm);
    if (!lm) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = s_resolve(lm, arg, err, errlen);
    if (rc == 0)
        snprintf(path, len, "%s", lm->path);
    free(lm);
    return rc;
}

int llm_cli_hosts(const char *arg, llm_swarm_opts *so, char *err, size_t errlen)
{
    so->n_hosts = 0;
    so->key_pub[0] = so->key_secret[0] = so->bind_host[0] = 0;
    if (s_ends_with(arg, ".gguf"))
        return 0;
    config_t *c = malloc(sizeof *c); /* several PATH_MAX paths: not for a stack frame */
    int rc = -1;
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    config_defaults(c);
    if (config_load(c, arg, err, errlen) == 0)
        rc = llm_cli_hosts_cfg(c, arg, so, err, errlen);
    free(c);
    return rc;
}

int llm_cli_hosts_cfg(const config_t *c, const char *arg, llm_swarm_opts *so, char *err,
                      size_t errlen)
{
    int rc = -1;
    so->n_hosts = 0;
    so->key_pub[0] = so->key_secret[0] = so->bind_host[0] = 0;
    if (!c->n_workers)
        return 0;
    if (c->n_workers > sizeof so->hosts / sizeof so->hosts[0]) {
        snprintf(err, errlen, "%s lists %u workers; the llm swarm takes at most %zu", arg,
                 c->n_workers, sizeof so->hosts / sizeof so->hosts[0]);
        goto out;
    }
    if (c->key[0] &&
        sec_load_key(c->key, so->key_pub, so->key_secret, err, errlen))
        goto out;
    for (uint32_t i = 0; i < c->n_workers; i++) {
        const config_worker *cw = &c->worker[i];
        llm_swarm_host *h = &so->hosts[i];
        char why[512];
        if (strlen(cw->name) >= sizeof h->id) {
            snprintf(err, errlen, "%s: [worker.%s]: a name of at most %zu characters", arg,
                     cw->name, sizeof h->id - 1);
            goto out;
        }
        snprintf(h->id, sizeof h->id, "%s", cw->name);
        snprintf(h->endpoint, sizeof h->endpoint, "%s", cw->endpoint);
        h->cap_bytes = cw->cap_bytes ? cw->cap_bytes : c->worker_cap_bytes;
        h->pub[0] = 0;
        if (!cw->endpoint[0]) {
            snprintf(err, errlen, "%s: [worker.%s] has no endpoint", arg, cw->name);
            goto out;
        }
        if (cw->public_key[0] && sec_parse_pub(cw->public_key, h->pub, why, sizeof why)) {
            snprintf(err, errlen, "%s: [worker.%s] public_key: %s", arg, cw->name, why);
            goto out;
        }
        if (so->key_pub[0] && !h->pub[0]) {
            snprintf(err, errlen, "%s: [security] key is set but [worker.%s] has no "
                     "public_key: every link must be CURVE", arg, cw->name);
            goto out;
        }
        if (h->pub[0] && !so->key_pub[0]) {
            snprintf(err, errlen, "%s: [worker.%s] has a public_key but [security] key is not "
                     "set: the coordinator needs its own key pair", arg, cw->name);
            goto out;
        }
        if (!h->pub[0] && !c->plaintext && !sec_endpoint_is_local(h->endpoint)) {
            snprintf(err, errlen, "%s: [worker.%s] %s is not loopback: refusing plaintext (set "
                     "[security] key and public_key, or [swarm] plaintext = 1)", arg, cw->name,
                     h->endpoint);
            goto out;
        }
    }
    so->n_hosts = c->n_workers;
    snprintf(so->bind_host, sizeof so->bind_host, "%s", c->host);
    rc = 0;
out:
    if (rc)
        so->key_pub[0] = so->key_secret[0] = 0;
    return rc;
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
    if (!strcmp(k, "--stream-all-experts")) {
        f->experts_dense = 1;
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
    o->experts_dense = f->experts_dense;
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
}

int llm_cli_gen_flag(llm_cli_gen_opts *o, int argc, char **argv, int *i, char *err,
                     size_t errlen)
{
    const char *f = argv[*i];
    static const char *const with_value[] = { "-n", "--ctx", "--batch", "--temp",
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

/* Before any allocation the cap should charge: the block device (sysfs walks allocate), then
 * the cgroup (v1 does not move charges made before joining), then the model under the plan. */
int llm_ssd_open(llm_ssd *x, llm_cli_model *lm, uint32_t n_ctx, uint32_t n_batch, char *err,
                 size_t errlen)
{
    exec_plan plan;
    x->lo.n_ctx = n_ctx;
    x->lo.n_batch = n_batch;
    /* a cap the plan cannot hold is refused with its numbers here, not by the OOM killer */
    if (llm_ssd_plan(lm->path, &x->lo, &plan, err, errlen))
        return -1;
    x->has_dev = devstat_find(lm->path, &x->dv, x->dverr, sizeof x->dverr) == 0;
    cap_enter(&x->cap, x->lo.cap_bytes, x->tag, 0);
    cap_describe(&x->cap, x->cap_mode, sizeof x->cap_mode);
    util_reset_hwm();
    if (llm_cli_open_model(lm, &x->lo, err, errlen))
        return -1;
    const exec_plan *p = llm_model_plan(lm->m);
    char b1[32], b2[32], b3[32];
    char split[160] = "";
    if (p->n_split || p->expert_slots)
        snprintf(split, sizeof split, ", %u split (attention and router resident, experts "
                 "through a cache of %u slots, LRU)", p->n_split, p->expert_slots);
    fprintf(stderr, "ssd arm: cap %s (%s; knobs from %s), %u layers resident, %u streamed "
            "(%.1f MiB per pass)%s, ring %u x %s, working set %s, %s, buffers %s, checksums: "
            "%s\n",
            util_fmt_size(x->lo.cap_bytes, b1, sizeof b1), x->cap_mode, x->from, p->n_resident,
            p->n_streamed, p->streamed_per_step / 1048576.0, split, p->ring_slots,
            util_fmt_size(p->slot_bytes, b2, sizeof b2),
            util_fmt_size(p->working_set, b3, sizeof b3),
            exec_is_direct(llm_model_exec(lm->m)) ? "O_DIRECT" : "buffered (labelled)",
            exec_io_buffers(llm_model_exec(lm->m)), llm_model_sums_source(lm->m));
    /* what loading read (resident layers, embedding, head) is not the steps' */
    llm_model_drain(lm->m);
    llm_model_stats(lm->m, &x->s0);
    x->io0 = util_io_read_bytes();
    if (x->has_dev)
        x->has_dev = devstat_read(&x->dv, &x->d0, x->dverr, sizeof x->dverr) == 0;
    return 0;
}

/* After the run: storage against streamed bytes (cache gate), every streamed layer
 * hashed and matching (content gate). */
int llm_ssd_expert_bound(const llm_ssd *x, double *bytes_per_token, double *gbps,
                         double *bound_ms)
{
    uint64_t steps = x->s1.steps_1 - x->s0.steps_1, ns = x->s1.expert_read_ns - x->s0.expert_read_ns;
    uint64_t all = x->s1.expert_read_bytes - x->s0.expert_read_bytes;
    uint64_t h = x->s1.expert_hits_1 - x->s0.expert_hits_1, m = x->s1.expert_misses_1 - x->s0.expert_misses_1;
    if (!steps || !ns || !all || !(h + m))
        return 0;
    *bytes_per_token = (double)(x->s1.expert_read_bytes_1 - x->s0.expert_read_bytes_1) / steps;
    *gbps = (double)all / (double)ns;
    *bound_ms = *bytes_per_token / (*gbps * 1e6);
    return 1;
}

void llm_ssd_judge(llm_ssd *x, llm_model *m)
{
    llm_model_drain(m);
    llm_model_stats(m, &x->s1);
    x->io1 = util_io_read_bytes();
    x->cgroup_peak = cap_peak(&x->cap);
    x->peak_rss = util_vmhwm_bytes(0);
    if (x->s1.expert_layers > x->s0.expert_layers) {
        uint64_t hit = x->s1.expert_hits - x->s0.expert_hits;
        uint64_t miss = x->s1.expert_misses - x->s0.expert_misses;
        fprintf(stderr, "ssd experts: %.1f MiB read for routed experts where streaming every "
                "expert reads %.1f MiB; cache %u slots, hit rate %.3f (%llu of %llu), %llu "
                "slices hashed\n",
                (x->s1.expert_read_bytes - x->s0.expert_read_bytes) / 1048576.0,
                (x->s1.expert_dense_bytes - x->s0.expert_dense_bytes) / 1048576.0,
                llm_model_plan(m)->expert_slots, hit + miss ? (double)hit / (hit + miss) : 0.0,
                (unsigned long long)hit, (unsigned long long)(hit + miss),
                (unsigned long long)(x->s1.experts_hashed - x->s0.experts_hashed));
        double tok, gbps, bound;
        if (llm_ssd_expert_bound(x, &tok, &gbps, &bound))
            fprintf(stderr, "ssd experts a generated token: %.1f MiB read (hit rate %.3f); at "
                    "the rate the arm's expert reads ran, %.2f GB/s, the disk bound of those "
                    "bytes is %.2f ms a token\n", tok / 1048576.0,
                    (double)(x->s1.expert_hits_1 - x->s0.expert_hits_1) /
                        (double)(x->s1.expert_hits_1 - x->s0.expert_hits_1 + x->s1.expert_misses_1 -
                                 x->s0.expert_misses_1),
                    gbps, bound);
    }
    exec_stats d = { .content_fail = x->s1.content_fail - x->s0.content_fail,
                     .layers_streamed = x->s1.layers_streamed - x->s0.layers_streamed,
                     .layers_due = x->s1.layers_due - x->s0.layers_due };
    /* the cache gate: storage against every byte the steps asked of the file, the experts'
     * reads included */
    uint64_t asked = x->s1.streamed_bytes - x->s0.streamed_bytes + x->s1.expert_read_bytes -
                     x->s0.expert_read_bytes;
    gate_cache_judge(&x->rr, x->io1 - x->io0, asked, 0);
    gate_content_judge(&x->rr, &d);
    fprintf(stderr, "ssd gates: cache %s (storage %.1f MiB for %.1f MiB streamed), content %s "
            "(%llu streamed layers hashed, %llu failed)%s%s\n",
            result_gate_name(x->rr.gate_cache), (x->io1 - x->io0) / 1048576.0,
            asked / 1048576.0,
            result_gate_name(x->rr.gate_content), (unsigned long long)d.layers_streamed,
            (unsigned long long)d.content_fail, x->rr.void_reason[0] ? ": " : "",
            x->rr.void_reason);
}

/* The SSD fields of a result (docs/results.md, "generate results"). */
void llm_ssd_json(json_t *j, const llm_ssd *x, const llm_model *m)
{
    const exec_plan *p = llm_model_plan(m);
    const exec_t *e = llm_model_exec(m);
    uint64_t sb = x->s1.streamed_bytes - x->s0.streamed_bytes;
    json_object_set_new(j, "cap_mode", json_string(x->cap_mode));
    json_object_set_new(j, "ssd_from", json_string(x->from));
    json_object_set_new(j, "streamed_bytes", json_integer((json_int_t)sb));
    json_object_set_new(j, "resident_layers", json_integer(p->n_resident));
    json_object_set_new(j, "streamed_layers", json_integer(p->n_streamed));
    json_object_set_new(j, "split_layers", json_integer(p->n_split));
    json_object_set_new(j, "streamed_per_pass_bytes",
                        json_integer((json_int_t)p->streamed_per_step));
    if (p->expert_slots) {
        uint64_t hit = x->s1.expert_hits - x->s0.expert_hits;
        uint64_t miss = x->s1.expert_misses - x->s0.expert_misses;
        json_object_set_new(j, "expert_read_bytes",
                            json_integer((json_int_t)(x->s1.expert_read_bytes -
                                                      x->s0.expert_read_bytes)));
        json_object_set_new(j, "expert_dense_bytes",
                            json_integer((json_int_t)(x->s1.expert_dense_bytes -
                                                      x->s0.expert_dense_bytes)));
        json_object_set_new(j, "expert_cache_slots", json_integer(p->expert_slots));
        json_object_set_new(j, "expert_cache_bytes",
                            json_integer((json_int_t)p->expert_cache_bytes));
        json_object_set_new(j, "expert_cache_hits", json_integer((json_int_t)hit));
        json_object_set_new(j, "expert_cache_misses", json_integer((json_int_t)miss));
        double tok, gbps, bound;
        json_object_set_new(j, "expert_read_ms",
                            json_real((x->s1.expert_read_ns - x->s0.expert_read_ns) / 1e6));
        if (llm_ssd_expert_bound(x, &tok, &gbps, &bound)) {
            json_object_set_new(j, "expert_read_bytes_per_token", json_real(tok));
            json_object_set_new(j, "expert_read_gbps", json_real(gbps));
            json_object_set_new(j, "expert_disk_bound_ms_per_token", json_real(bound));
        }
        /* one-position steps (generated tokens), apart from the prompt's passes */
        json_object_set_new(j, "steps_1", json_integer((json_int_t)(x->s1.steps_1 - x->s0.steps_1)));
        json_object_set_new(j, "expert_read_bytes_1",
                            json_integer((json_int_t)(x->s1.expert_read_bytes_1 -
                                                      x->s0.expert_read_bytes_1)));
        json_object_set_new(j, "expert_cache_hits_1",
                            json_integer((json_int_t)(x->s1.expert_hits_1 - x->s0.expert_hits_1)));
        json_object_set_new(j, "expert_cache_misses_1",
                            json_integer((json_int_t)(x->s1.expert_misses_1 -
                                                      x->s0.expert_misses_1)));
        /* where a generated token's time went (lab/lab_llm.c compares them with its terms) */
        json_object_set_new(j, "expert_read_ms_1",
                            json_real((x->s1.expert_read_ns_1 - x->s0.expert_read_ns_1) / 1e6));
        json_object_set_new(j, "expert_hash_ms_1",
                            json_real((x->s1.expert_hash_ns_1 - x->s0.expert_hash_ns_1) / 1e6));
        json_object_set_new(j, "step_ms_1",
                            json_real((x->s1.step_ns_1 - x->s0.step_ns_1) / 1e6));
        json_object_set_new(j, "experts_hashed",
                            json_integer((json_int_t)(x->s1.experts_hashed -
                                                      x->s0.experts_hashed)));
    }
    json_object_set_new(j, "queue_depth", json_integer(x->lo.queue_depth));
    json_object_set_new(j, "chunk_bytes", json_integer((json_int_t)x->lo.chunk_bytes));
    json_object_set_new(j, "ring_slots", json_integer(p->n_streamed ? p->ring_slots : 0));
    json_object_set_new(j, "planned_working_set_bytes",
                        json_integer((json_int_t)p->working_set));
    json_object_set_new(j, "held_bytes", json_integer((json_int_t)llm_model_held_bytes(m)));
    json_object_set_new(j, "io", json_string(!p->n_streamed        ? "resident"
                                             : exec_is_direct(e) ? "direct"
                                                                 : "buffered"));
    json_object_set_new(j, "io_uring", json_boolean(exec_uses_uring(e)));
    json_object_set_new(j, "io_buffers", json_string(exec_io_buffers(e)));
    json_object_set_new(j, "checksums", json_string(llm_model_sums_source(m)));
    json_object_set_new(j, "cgroup_peak_bytes", json_integer((json_int_t)x->cgroup_peak));
    json_object_set_new(j, "read_wait_ms", json_real((x->s1.wait_ns - x->s0.wait_ns) / 1e6));
    json_object_set_new(j, "layer_ms", json_real((x->s1.compute_ns - x->s0.compute_ns) / 1e6));
    json_object_set_new(j, "hash_wait_ms",
                        json_real((x->s1.verify_wait_ns - x->s0.verify_wait_ns) / 1e6));
    devstat_sample d1;
    devstat_delta dd;
    char why[256];
    if (!x->has_dev || devstat_read(&x->dv, &d1, why, sizeof why)) {
        json_object_set_new(j, "device", json_null());
        json_object_set_new(j, "device_error", json_string(x->has_dev ? why : x->dverr));
        return;
    }
    /* read now, after the generation: what the device served since d0 (the result line is
     * written with nothing else read between) */
    devstat_diff(&x->d0, &d1, &dd);
    json_object_set_new(j, "device", json_string(x->dv.name));
    json_object_set_new(j, "device_reads", json_integer((json_int_t)dd.reads));
    json_object_set_new(j, "device_read_bytes", json_integer((json_int_t)dd.read_bytes));
    json_object_set_new(j, "device_avg_request_bytes",
                        json_integer((json_int_t)dd.avg_request_bytes));
    json_object_set_new(j, "device_busy_ms", json_real(dd.busy_ms));
    json_object_set_new(j, "device_util", json_real(dd.util));
}

void llm_ssd_leave(llm_ssd *x)
{
    cap_leave(&x->cap);
}

/* ---------------------------------------------------------------- speculative decoding */

int llm_cli_draft_flag(llm_cli_draft *d, int argc, char **argv, int *i, char *err,
                       size_t errlen)
{
    const char *k = argv[*i];
    if (!strcmp(k, "--draft-lookup")) {
        d->o.lookup = 1;
        return 1;
    }
    if (!strcmp(k, "--draft-greedy")) {
        d->o.greedy = 1;
        return 1;
    }
    if (!strcmp(k, "--draft-fixed")) {
        d->o.fixed = 1;
        return 1;
    }
    if (strcmp(k, "--draft") && strcmp(k, "--draft-max") && strcmp(k, "--draft-ahead"))
        return 0;
    if (*i + 1 >= argc) {
        snprintf(err, errlen, "%s needs a value", k);
        return -1;
    }
    const char *v = argv[++*i];
    if (!strcmp(k, "--draft")) {
        d->path = v;
        return 1;
    }
    if (!strcmp(k, "--draft-ahead")) {
        d->o.overlap = !strcmp(v, "on") ? DRAFT_OVERLAP_ON : !strcmp(v, "off") ? DRAFT_OVERLAP_OFF
                       : !strcmp(v, "auto") ? DRAFT_OVERLAP_AUTO : 2;
        if (d->o.overlap == 2) {
            snprintf(err, errlen, "--draft-ahead '%s': on, off or auto", v);
            return -1;
        }
        return 1;
    }
    return llm_cli_u32(k, v, 1, DRAFT_K_MAX, &d->o.k_max, err, errlen) ? -1 : 1;
}

int llm_cli_draft_check(const llm_cli_draft *d, char *err, size_t errlen)
{
    if (d->path && d->o.lookup) {
        snprintf(err, errlen, "--draft and --draft-lookup: one drafter at a time");
        return -1;
    }
    if ((d->o.k_max || d->o.fixed) && !llm_cli_draft_on(d)) {
        snprintf(err, errlen, "--draft-%s needs --draft or --draft-lookup",
                 d->o.k_max ? "max" : "fixed");
        return -1;
    }
    if (d->o.greedy && !d->path) {
        snprintf(err, errlen, "--draft-greedy needs --draft (a draft model)");
        return -1;
    }
    return 0;
}

int llm_cli_draft_on(const llm_cli_draft *d)
{
    return d->path || d->o.lookup;
}

int llm_cli_draft_open(llm_cli_draft *d, const llm_model *target, char *err, size_t errlen)
{
    if (!d->path)
        return 0;
    char why[512];
    if (!(d->o.model = llm_model_open(d->path, why, sizeof why)) ||
        draft_check_vocab(target, d->o.model, why, sizeof why)) {
        snprintf(err, errlen, "--draft: %s", why);
        llm_model_free(&d->o.model);
        return -1;
    }
    return 0;
}

uint32_t llm_cli_draft_max(const llm_cli_draft *d)
{
    return d->o.k_max ? d->o.k_max : d->path ? DRAFT_K_MODEL : DRAFT_K_LOOKUP;
}

void llm_cli_draft_close(llm_cli_draft *d)
{
    llm_model_free(&d->o.model);
}

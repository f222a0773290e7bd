/* llm.c — the one-process runner: a file resident, sessions with KV caches, llm_eval. runtime/ */
#include "runtime/llm.h"
#include "runtime/llm_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arch/arch_int.h"
#include "arch/sums.h"
#include "base/log.h"
#include "base/util.h"
#include "quant/quant.h"

llm_model *llm_model_open(const char *path, char *err, size_t errlen)
{
    return llm_model_open_opts(path, NULL, err, errlen);
}

/* Bytes a session of n_ctx positions, n_batch per pass, holds: its KV caches (a
 * sliding-window layer's only its window and a pass: arch_kv_rows), activations, the final
 * norm in f32, and attention's scores at the most threads (llama.c). */
static uint64_t s_session_bytes(const arch_model *am, uint32_t n_ctx, uint32_t n_batch)
{
    const arch_hparams *hp = &am->hp;
    return arch_kv_bytes(am, 0, hp->n_layers, n_ctx, n_batch) +
           2ull * n_batch * hp->dim * sizeof(float) + hp->dim * sizeof(float) +
           (uint64_t)QUANT_MAX_THREADS * n_ctx * sizeof(float);
}

/* The SSD arm's options with their defaults; -1 with err when the context exceeds the model's. */
static int s_ssd_defaults(const arch_hparams *hp, llm_opts *o, const char *path, char *err,
                          size_t errlen)
{
    if (!o->queue_depth)
        o->queue_depth = 4;
    if (!o->chunk_bytes)
        o->chunk_bytes = 4u << 20;
    if (!o->overhead_bytes)
        o->overhead_bytes = EXEC_WORKER_OVERHEAD;
    if (!o->n_ctx)
        o->n_ctx = hp->n_ctx_train < 512 ? hp->n_ctx_train : 512;
    if (!o->n_batch)
        o->n_batch = 32;
    if (o->n_batch > o->n_ctx)
        o->n_batch = o->n_ctx;
    if (!o->n_sessions)
        o->n_sessions = 1;
    if (o->n_ctx > hp->n_ctx_train) {
        arch_err(err, errlen, path, "context %u: must be 1..%u (the model's context_length)",
                 o->n_ctx, hp->n_ctx_train);
        return -1;
    }
    return 0;
}

/* Bytes of continuous batching's buffers for passes of max_rows positions and steps sessions
 * (llm_batch: the rows, the last rows' norms, their logits). */
static uint64_t s_batch_bytes(const arch_hparams *hp, uint32_t max_rows, uint32_t steps)
{
    return ((uint64_t)max_rows * hp->dim + (uint64_t)steps * (hp->dim + hp->n_vocab)) *
           sizeof(float);
}

/* An SSD arm's positions per pass: a prompt chunk of n_batch and a decode step of each other
 * session. */
uint32_t llm_ssd_max_pos(const llm_opts *o)
{
    return o->n_batch + o->n_sessions - 1;
}

/* What the executor is told the runner holds beside the layers: the embedding, final norm and
 * head in aligned buffers (the head once when tied), the sessions and, for several, the
 * batched passes' buffers. */
static void s_ssd_exec_opts(const arch_model *am, const llm_opts *o, exec_opts *eo)
{
    const arch_tensor *ts[3] = { &am->tok_embd, &am->out_norm, &am->output };
    uint64_t held = 0;
    for (int i = 0; i < 3; i++)
        if (!(i == 2 && am->hp.tied_output))
            held += (ts[i]->nbytes + 2 * EXEC_ALIGN + EXEC_ALIGN - 1) / EXEC_ALIGN * EXEC_ALIGN;
    *eo = (exec_opts){ .budget_bytes = o->cap_bytes, .queue_depth = o->queue_depth,
                       .chunk_bytes = o->chunk_bytes, .overhead_bytes = o->overhead_bytes,
                       .buffered = o->buffered, .total_steps = o->total_steps,
                       .experts_dense = o->experts_dense,
                       .verify_resident = 1, .max_pos = llm_ssd_max_pos(o),
                       .held_bytes = held + o->n_sessions *
                                                s_session_bytes(am, o->n_ctx, o->n_batch) };
    if (o->n_sessions > 1)
        eo->held_bytes += s_batch_bytes(&am->hp, llm_ssd_max_pos(o), o->n_sessions);
}

int llm_ssd_plan(const char *path, const llm_opts *o, exec_plan *p, char *err, size_t errlen)
{
    gguf_file *g = gguf_open(path, err, errlen);
    arch_model am;
    exec_opts eo;
    llm_opts lo = *o;
    int rc = -1;
    if (!g)
        return -1;
    if (arch_model_open(&am, g, err, errlen))
        goto out;
    if (s_ssd_defaults(&am.hp, &lo, path, err, errlen) == 0) {
        s_ssd_exec_opts(&am, &lo, &eo);
        rc = exec_plan_make_arch(&am, 0, am.hp.n_layers, &eo, p, err, errlen);
    }
    arch_model_close(&am);
out:
    gguf_close(&g);
    return rc;
}

/* The SSD arm: sums, embedding / norm / head read once, the layers through the executor. */
static int s_open_ssd(llm_model *m, const char *path, char *err, size_t errlen)
{
    const arch_hparams *hp = &m->am.hp;
    const arch_tensor *ts[3] = { &m->am.tok_embd, &m->am.out_norm, &m->am.output };
    const void **dst[3] = { &m->tok_embd, &m->out_norm, &m->output };
    uint64_t *sums;
    sums_source src;
    char cpath[PATH_MAX + 32], why[256];
    int fd = -1, rc = -1;
    llm_opts *o = &m->o;
    if (s_ssd_defaults(hp, o, path, err, errlen))
        return -1;
    if (!(sums = m->sums = malloc(hp->n_layers * sizeof *sums)))
        goto oom;
    if (sums_get(&m->am, path, sums, &src, cpath, sizeof cpath, err, errlen))
        goto done;
    snprintf(m->sums_src, sizeof m->sums_src, "%s%s%s",
             src == SUMS_METADATA ? "metadata" : src == SUMS_CACHED ? "cache " : "computed",
             src == SUMS_COMPUTED && cpath[0] ? ", cached in " : "", cpath);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        arch_err(err, errlen, path, "open: %s", strerror(errno));
        goto done;
    }
    for (int i = 0; i < 3; i++) {
        if (i == 2 && hp->tied_output) {
            m->output = m->tok_embd;
            continue;
        }
        if (!(m->buf[i] = exec_read_aligned(fd, ts[i]->off, ts[i]->nbytes, dst[i], why,
                                            sizeof why))) {
            arch_err(err, errlen, path, "%s: %s", ts[i]->name, why);
            goto done;
        }
        m->held += (ts[i]->nbytes + 2 * EXEC_ALIGN + EXEC_ALIGN - 1) / EXEC_ALIGN * EXEC_ALIGN;
    }
    exec_opts eo;
    s_ssd_exec_opts(&m->am, o, &eo); /* the same held bytes llm_ssd_plan counts */
    if (!(m->ex = exec_new_arch(&m->am, path, sums, 0, hp->n_layers, &eo, err, errlen)))
        goto done;
    /* several sessions share the one executor: their passes go through the batcher (one at a
     * time, each carrying every session's step that is ready) */
    if (o->n_sessions > 1 && llm_model_batching(m, llm_ssd_max_pos(o), err, errlen))
        goto done;
    rc = 0;
    goto done;
oom:
    arch_err(err, errlen, path, "out of memory");
done:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* The reference arm's layers, as mapped, against the per-layer checksums the file carries
 * or a cache beside it holds (arch/sums.h): a byte changed in place (size and mtime kept, so
 * the cache still names the file's good bytes) is found before any output is trusted. When
 * the sums were computed just now from these very bytes, a second hash would prove nothing
 * and is skipped. Its cost is one hash over the weights, from memory (logged). */
static int s_verify_mapped(llm_model *m, const char *path, char *err, size_t errlen)
{
    const arch_hparams *hp = &m->am.hp;
    sums_source src;
    char cpath[PATH_MAX + 32];
    uint64_t t0 = util_now_ns(), bytes = 0;
    if (!(m->sums = malloc(hp->n_layers * sizeof *m->sums))) {
        arch_err(err, errlen, path, "out of memory");
        return -1;
    }
    if (sums_get(&m->am, path, m->sums, &src, cpath, sizeof cpath, err, errlen))
        return -1;
    snprintf(m->sums_src, sizeof m->sums_src, "%s%s%s",
             src == SUMS_METADATA ? "metadata" : src == SUMS_CACHED ? "cache " : "computed",
             src == SUMS_COMPUTED && cpath[0] ? ", cached in " : "", cpath);
    if (src == SUMS_COMPUTED)
        return 0;
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        const void *const *d = llm_layer_data(m, l);
        uint64_t h = sums_of_layer(&m->am, l, d);
        for (uint32_t t = 0; t < m->am.layers[l].n_tensors; t++)
            bytes += m->am.layers[l].t[t].nbytes;
        if (h != m->sums[l]) {
            arch_err(err, errlen, path, "layer %u " SUMS_MISMATCH " (its bytes hash to %016llx, "
                     "the checksums from %s say %016llx): the file is corrupt", l,
                     (unsigned long long)h, m->sums_src, (unsigned long long)m->sums[l]);
            return -1;
        }
    }
    log_info("%s: %u layers verified against the checksums from %s (%.1f MiB in %.0f ms)", path,
             hp->n_layers, m->sums_src, (double)bytes / 1048576.0,
             (double)(util_now_ns() - t0) / 1e6);
    return 0;
}

llm_model *llm_model_open_opts(const char *path, const llm_opts *o, char *err, size_t errlen)
{
    llm_model *m = calloc(1, sizeof *m);
    int fd = -1;
    if (!m) {
        arch_err(err, errlen, path, "out of memory");
        return NULL;
    }
    if (!(m->g = gguf_open(path, err, errlen)) || arch_model_open(&m->am, m->g, err, errlen))
        goto err;
    if (!arch_model_has(&m->am, ARCH_TOKENS)) {
        arch_err(err, errlen, path,
                 "a swarm-dense model has no tokens (run it with `swarm run`); a token "
                 "family (llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3) needed");
        goto err;
    }
    if (o)
        m->o = *o;
    m->arm = m->o.arm;
    if (m->arm == LLM_ARM_RESIDENT) {
        if (!m->o.hook || !m->o.hook->layers || !m->o.hook->end || !m->o.hook->max_batch) {
            arch_err(err, errlen, path, "the resident arm needs its layers (a swarm)");
            goto err;
        }
        m->hook = *m->o.hook;
        m->o.hook = NULL;
    }
    if (m->arm == LLM_ARM_SSD) {
        if (s_open_ssd(m, path, err, errlen))
            goto err;
        return m;
    }
    const char *sim = m->arm == LLM_ARM_REFERENCE ? getenv("SWARM_EXPERT_SIM") : NULL;
    if (sim && m->am.hp.n_expert) { /* the lab's calibration: see struct llm_model */
        char *end;
        unsigned long n = strtoul(sim, &end, 10);
        if (*end || !n || n > UINT32_MAX || !(m->xused = calloc(m->am.hp.n_expert, 1)) ||
            !(m->xsim = xsim_new((uint32_t)n))) {
            arch_err(err, errlen, path, "SWARM_EXPERT_SIM '%s': slots (a count) wanted", sim);
            goto err;
        }
        m->xsim_slots = (uint32_t)n;
        /* the misses themselves, for the lab's disk figure of exactly these reads */
        const char *lp = getenv("SWARM_EXPERT_SIM_LOG");
        if (lp && (!(m->xmissed = calloc(m->am.hp.n_expert, sizeof *m->xmissed)) ||
                   !(m->xlog = fopen(lp, "w")))) {
            arch_err(err, errlen, path, "SWARM_EXPERT_SIM_LOG '%s': %s", lp, strerror(errno));
            goto err;
        }
    }
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        arch_err(err, errlen, path, "open: %s", strerror(errno));
        goto err;
    }
    m->map_len = (size_t)m->g->file_size;
    /* MAP_POPULATE: the reference arm holds every weight before the first token; the
     * resident arm reads only embedding rows, the norm and the head (its layers are the
     * workers'), so only those pages come in */
    m->map = mmap(NULL, m->map_len, PROT_READ,
                  MAP_PRIVATE | (m->arm == LLM_ARM_RESIDENT ? 0 : MAP_POPULATE), fd, 0);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        arch_err(err, errlen, path, "mmap of %zu bytes: %s", m->map_len, strerror(errno));
        goto err;
    }
    if (m->arm == LLM_ARM_RESIDENT) {
        /* The norm and the head are read every token: in aligned buffers (transparent huge
         * pages where the kernel gives them) rather than 4 KiB pages of the mapping. Measured
         * on the 22-layer F16 TinyLlama shape: a 131 MB head from the mapping kept the
         * resident arm 20-40 ms a token behind the in-process executor. The embedding stays
         * mapped: a prompt reads a few rows of it (when tied, the head is read instead). */
        const arch_tensor *ts[3] = { &m->am.tok_embd, &m->am.out_norm, &m->am.output };
        const void **dst[3] = { &m->tok_embd, &m->out_norm, &m->output };
        char why[256];
        for (int i = m->am.hp.tied_output ? 0 : 1; i < 3; i++) {
            if (i == 2 && m->am.hp.tied_output)
                continue;
            if (!(m->buf[i] = exec_read_aligned(fd, ts[i]->off, ts[i]->nbytes, dst[i], why,
                                                sizeof why))) {
                arch_err(err, errlen, path, "%s: %s", ts[i]->name, why);
                goto err;
            }
        }
    }
    close(fd);
    fd = -1;
    const arch_hparams *hp = &m->am.hp;
    if (!(m->data = calloc((size_t)hp->n_layers * ARCH_MAX_LAYER_TENSORS, sizeof *m->data))) {
        arch_err(err, errlen, path, "out of memory");
        goto err;
    }
    for (uint32_t l = 0; l < hp->n_layers; l++)
        for (uint32_t i = 0; i < m->am.layers[l].n_tensors; i++)
            m->data[(size_t)l * ARCH_MAX_LAYER_TENSORS + i] = m->map + m->am.layers[l].t[i].off;
    if (!m->buf[0])
        m->tok_embd = m->map + m->am.tok_embd.off;
    if (!m->buf[1])
        m->out_norm = m->map + m->am.out_norm.off;
    if (m->am.hp.tied_output)
        m->output = m->tok_embd;
    else if (!m->buf[2])
        m->output = m->map + m->am.output.off;
    if (m->arm == LLM_ARM_REFERENCE && s_verify_mapped(m, path, err, errlen))
        goto err;
    return m;
err:
    if (fd >= 0)
        close(fd);
    llm_model_free(&m);
    return NULL;
}

void llm_model_free(llm_model **mp)
{
    if (!mp || !*mp)
        return;
    llm_model *m = *mp;
    if (m->map)
        munmap(m->map, m->map_len);
    exec_free(&m->ex);
    if (m->xsim) {
        uint64_t h = m->xhits[1], x = m->xmisses[1];
        fprintf(stderr, "expert cache sim: %u slots (LRU), one-position passes %llu: hits %llu "
                "misses %llu (hit rate %.3f); every pass: hits %llu misses %llu\n",
                m->xsim_slots, (unsigned long long)m->xsteps1, (unsigned long long)h,
                (unsigned long long)x, h + x ? (double)h / (double)(h + x) : 0.0,
                (unsigned long long)m->xhits[0], (unsigned long long)m->xmisses[0]);
        xsim_free(&m->xsim);
    }
    if (m->xlog)
        fclose(m->xlog);
    free(m->xmissed);
    free(m->xused);
    llm_batch_free(&m->batch);
    free(m->sums);
    for (int i = 0; i < 3; i++)
        free(m->buf[i]);
    free(m->data);
    arch_model_close(&m->am);
    gguf_close(&m->g);
    free(m);
    *mp = NULL;
}

llm_arm llm_model_arm(const llm_model *m)
{
    return m->arm;
}

const exec_plan *llm_model_plan(const llm_model *m)
{
    return m->ex ? exec_get_plan(m->ex) : NULL;
}

const exec_t *llm_model_exec(const llm_model *m)
{
    return m->ex;
}

int llm_model_stats(const llm_model *m, exec_stats *st)
{
    if (!m->ex)
        return -1;
    *st = m->st;
    return 0;
}

void llm_model_drain(llm_model *m)
{
    exec_drain(m->ex);
}

const uint64_t *llm_model_layer_sums(const llm_model *m)
{
    return m->sums;
}

uint64_t llm_model_held_bytes(const llm_model *m)
{
    return m->held;
}

const char *llm_model_sums_source(const llm_model *m)
{
    return m->sums_src[0] ? m->sums_src : "none (the reference arm maps the file)";
}

const arch_model *llm_model_arch(const llm_model *m)
{
    return &m->am;
}

const gguf_file *llm_model_gguf(const llm_model *m)
{
    return m->g;
}

const void *const *llm_layer_data(const llm_model *m, uint32_t layer)
{
    if (!m->data)
        return NULL;
    return m->data + (size_t)layer * ARCH_MAX_LAYER_TENSORS;
}

uint64_t llm_model_weight_bytes(const llm_model *m)
{
    uint64_t b = m->am.tok_embd.nbytes + m->am.out_norm.nbytes;
    if (!m->am.hp.tied_output)
        b += m->am.output.nbytes;
    for (uint32_t l = 0; l < m->am.hp.n_layers; l++)
        b += m->am.layers[l].weight_bytes;
    return b;
}

uint64_t llm_model_pass_bytes(const llm_model *m)
{
    uint64_t b = m->am.out_norm.nbytes + m->am.output.nbytes;
    for (uint32_t l = 0; l < m->am.hp.n_layers; l++)
        b += m->am.layers[l].weight_bytes;
    return b;
}

const uint8_t *llm_model_map(const llm_model *m, uint64_t *len)
{
    *len = m->map_len;
    return m->map;
}

/* ---------------------------------------------------------------- sessions */

llm_session *llm_session_new(llm_model *m, uint32_t n_ctx, uint32_t n_batch, char *err,
                             size_t errlen)
{
    const arch_hparams *hp = &m->am.hp;
    const char *path = m->g->path;
    if (n_ctx < 1 || n_ctx > hp->n_ctx_train) {
        arch_err(err, errlen, path, "context %u: must be 1..%u (the model's context_length)",
                 n_ctx, hp->n_ctx_train);
        return NULL;
    }
    if (n_batch < 1)
        n_batch = 1;
    if (n_batch > n_ctx)
        n_batch = n_ctx;
    if (m->arm == LLM_ARM_SSD && m->n_sessions >= (int)m->o.n_sessions) {
        arch_err(err, errlen, path, "the SSD arm plans for %u session%s at a time (their KV "
                 "caches count against the cap)", m->o.n_sessions, m->o.n_sessions > 1 ? "s" : "");
        return NULL;
    }
    if (m->arm == LLM_ARM_SSD && n_ctx > m->o.n_ctx) {
        arch_err(err, errlen, path, "context %u: the SSD arm was planned for %u positions (its "
                 "KV caches count against the cap; open it with a larger n_ctx)", n_ctx,
                 m->o.n_ctx);
        return NULL;
    }
    if (m->arm == LLM_ARM_SSD && n_batch > m->o.n_batch)
        n_batch = m->o.n_batch; /* the executor's run holds o.n_batch positions */
    if (m->arm == LLM_ARM_RESIDENT && n_ctx > m->hook.n_ctx) {
        arch_err(err, errlen, path, "context %u: the swarm's workers hold caches of %u "
                 "positions", n_ctx, m->hook.n_ctx);
        return NULL;
    }
    if (m->arm == LLM_ARM_RESIDENT && n_batch > m->hook.max_batch)
        n_batch = m->hook.max_batch; /* a message carries at most max_batch positions */
    llm_session *s = calloc(1, sizeof *s);
    if (!s) {
        arch_err(err, errlen, path, "out of memory");
        return NULL;
    }
    s->m = m;
    s->id = ++m->next_session;
    s->n_ctx = n_ctx;
    s->n_batch = n_batch;
    s->nthreads = 1;
    uint32_t kvd = hp->n_head_kv * hp->head_dim;
    /* floats of K and V of all layers (a sliding-window layer's ring is shorter:
     * arch_kv_rows); the resident arm's caches are the workers' */
    size_t all = m->arm == LLM_ARM_RESIDENT ? 2 * hp->n_layers
                                            : arch_kv_bytes(&m->am, 0, hp->n_layers, n_ctx,
                                                            n_batch) / sizeof(float);
    char why[160];
    if (!(s->kv = calloc(hp->n_layers, sizeof *s->kv)) ||
        !(s->kv_mem = malloc(all * sizeof(float))) ||
        !(s->x = malloc((size_t)n_batch * hp->dim * sizeof(float))) ||
        !(s->xn = malloc((size_t)n_batch * hp->dim * sizeof(float))) ||
        !(s->norm_w = malloc(hp->dim * sizeof(float)))) {
        arch_err(err, errlen, path, "out of memory for a session of %u positions", n_ctx);
        goto err;
    }
    float *next = s->kv_mem;
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        uint32_t rows = m->arm == LLM_ARM_RESIDENT ? 1 : arch_kv_rows(&m->am, l, n_ctx, n_batch);
        s->kv[l] = (arch_kv){ .n_ctx = n_ctx, .kv_dim = kvd, .n_rows = rows, .k = next };
        s->kv[l].v = next + (m->arm == LLM_ARM_RESIDENT ? 1 : (size_t)rows * kvd);
        next = s->kv[l].v + (m->arm == LLM_ARM_RESIDENT ? 1 : (size_t)rows * kvd);
    }
    if (quant_dequantize_row((quant_type)m->am.out_norm.type, m->out_norm, s->norm_w, hp->dim,
                             why, sizeof why)) {
        arch_err(err, errlen, path, "output_norm.weight: %s", why);
        goto err;
    }
    if (m->arm == LLM_ARM_SSD) {
        s->m->n_sessions++;
        return s;
    }
    if (m->arm == LLM_ARM_RESIDENT)
        return s;
    if (!(s->run = arch_run_new(&m->am, n_batch, err, errlen)))
        goto err;
    return s;
err:
    llm_session_free(&s);
    return NULL;
}

void llm_session_free(llm_session **sp)
{
    if (!sp || !*sp)
        return;
    llm_session *s = *sp;
    llm_session_active(s, 0);
    if (s->m->arm == LLM_ARM_SSD && s->m->n_sessions && !s->run)
        s->m->n_sessions--;
    if (s->m->arm == LLM_ARM_RESIDENT)
        s->m->hook.end(s->m->hook.ctx, s->id);
    arch_run_free(&s->run);
    free(s->kv);
    free(s->kv_mem);
    free(s->x);
    free(s->xn);
    free(s->norm_w);
    free(s);
    *sp = NULL;
}

void llm_session_set_threads(llm_session *s, int nthreads)
{
    s->nthreads = nthreads < 1 ? 1 : nthreads;
    if (s->m->ex)
        exec_set_threads(s->m->ex, s->nthreads);
    else if (s->run)
        arch_run_set_threads(s->run, s->nthreads);
}

uint32_t llm_session_span(const llm_session *s)
{
    const llm_model *m = s->m;
    if (m->arm != LLM_ARM_RESIDENT || !m->hook.prefill || m->batch ||
        m->hook.prefill_span <= s->n_batch)
        return s->n_batch;
    return m->hook.prefill_span < s->n_ctx ? m->hook.prefill_span : s->n_ctx;
}

uint32_t llm_session_pos(const llm_session *s)
{
    const llm_model *m = s->m;
    if (m->arm == LLM_ARM_RESIDENT && m->hook.cached && s->n_past) {
        uint32_t held = m->hook.cached(m->hook.ctx, s->id);
        return held < s->n_past ? held : s->n_past;
    }
    return s->n_past;
}

void llm_session_reset(llm_session *s)
{
    /* The resident arm's caches live in the swarm, which counts what each session holds to
     * rebuild it after a loss: a reset session holds nothing there either (the trim hook). */
    llm_session_rewind(s, 0);
}

void llm_session_rewind(llm_session *s, uint32_t pos)
{
    /* Position p's K and V depend only on tokens 0..p, so the first pos stay valid; the rest
     * are overwritten by the next pass before attention reads them (it reads 0..n_past). */
    if (pos < s->n_past)
        s->n_past = pos;
    /* a sliding-window layer's ring may no longer hold the window before pos: then nothing
     * is kept (the resident arm's workers size their rings for their larger batch, so the
     * rule on this session's batch is the safe one for them too) */
    s->n_past = arch_kv_resume(&s->m->am, s->n_ctx, s->n_batch, s->n_high, s->n_past);
    if (!s->n_past)
        s->n_high = 0;
    if (s->m->arm == LLM_ARM_RESIDENT && s->m->hook.trim)
        s->m->hook.trim(s->m->hook.ctx, s->id, s->n_past);
}

uint64_t llm_session_kv_bytes(const llm_session *s)
{
    return arch_kv_bytes(&s->m->am, 0, s->m->am.hp.n_layers, s->n_ctx, s->n_batch);
}

/* A streamed layer failed the content gate in the pass just run: the model is faulted for
 * good (llm_model_fault) and the pass fails. */
/* The reference's layers as arch_layer_forward runs them (the same calls, the same bits), the
 * routing of each layer with experts replayed through the expert cache simulation. */
static int s_forward_sim(llm_session *s, uint32_t n, char *err, size_t errlen)
{
    llm_model *m = s->m;
    if (m->xlog) /* a pass begins: the lab's replay times the passes a token's time covers */
        fprintf(m->xlog, "pass %u %u\n", s->n_past, n);
    for (uint32_t l = 0; l < m->am.hp.n_layers; l++) {
        const arch_layer *L = &m->am.layers[l];
        const void *const *data = llm_layer_data(m, l);
        int seen = 0;
        if (arch_layer_begin(s->run, l, data, &s->kv[l], s->x, n, s->n_past, err, errlen))
            return -1;
        for (uint32_t t = L->n_vectors; t < L->n_tensors; t++) {
            if (arch_layer_before(s->run, t))
                goto fail;
            if (L->t[t].n_expert && !seen++) {
                uint64_t h = 0, x = 0;
                uint32_t nm = 0;
                memset(m->xused, 0, L->t[t].n_expert);
                arch_layer_experts(s->run, m->xused);
                xsim_layer(m->xsim, l, m->xused, L->t[t].n_expert, &h, &x, m->xmissed, &nm);
                if (m->xlog && nm) {
                    fprintf(m->xlog, "%d %u", n == 1, l);
                    for (uint32_t i = 0; i < nm; i++)
                        fprintf(m->xlog, " %u", m->xmissed[i]);
                    fputc('\n', m->xlog);
                }
                m->xhits[0] += h;
                m->xmisses[0] += x;
                m->xhits[1] += n == 1 ? h : 0;
                m->xmisses[1] += n == 1 ? x : 0;
            }
            if (arch_layer_rows(s->run, t, 0, L->t[t].rows, data[t]))
                goto fail;
        }
        if (arch_layer_end(s->run))
            goto fail;
    }
    m->xsteps1 += n == 1;
    return 0;
fail:
    arch_err(err, errlen, m->g->path, "%s", arch_run_error(s->run));
    return -1;
}

int llm_content_fault(llm_model *m, char *err, size_t errlen)
{
    if (!atomic_load(&m->faulted)) {
        uint32_t l = m->st.content_bad_layer ? m->st.content_bad_layer - 1 : 0;
        snprintf(m->fault, sizeof m->fault, "content gate: streamed layer %u " SUMS_MISMATCH
                 " (its bytes hash to %016llx, expected %016llx): %s is corrupt; nothing "
                 "computed from it is returned", l, (unsigned long long)m->st.content_bad_hash,
                 m->sums ? (unsigned long long)m->sums[l] : 0ull, m->g->path);
        atomic_store(&m->faulted, 1);
    }
    snprintf(err, errlen, "%s", m->fault);
    return -1;
}

const char *llm_model_fault(const llm_model *m)
{
    return atomic_load(&((llm_model *)m)->faulted) ? m->fault : NULL;
}

/* The embedding rows of n tokens into x (n x dim), the family's scale applied. */
static int s_embed(const llm_model *m, const int32_t *tokens, uint32_t n, float *x, char *err,
                   size_t errlen)
{
    const arch_model *am = &m->am;
    uint32_t d = am->hp.dim;
    char why[160];
    for (uint32_t p = 0; p < n; p++) {
        const uint8_t *row = (const uint8_t *)m->tok_embd + (uint64_t)tokens[p] *
                                                                am->tok_embd.row_bytes;
        if (quant_dequantize_row((quant_type)am->tok_embd.type, row, x + (size_t)p * d, d, why,
                                 sizeof why)) {
            arch_err(err, errlen, m->g->path, "token_embd.weight: %s", why);
            return -1;
        }
    }
    arch_embed_finish(am, x, n);
    return 0;
}

static int s_head(llm_session *s, uint32_t n, float *logits, int all, char *err,
                  size_t errlen);

/* The resident arm's prompt through the workers as chunks in flight at once (hook.prefill):
 * n positions from n_past, the last one's logits. The same bits as s_pass over the same
 * positions: every row is its position's alone. */
static int s_prefill(llm_session *s, const int32_t *tokens, uint32_t n, float *logits,
                     char *err, size_t errlen)
{
    const llm_model *m = s->m;
    uint32_t d = m->am.hp.dim;
    float *x = malloc((size_t)n * d * sizeof(float));
    if (!x) {
        arch_err(err, errlen, m->g->path, "out of memory for a prompt of %u positions", n);
        return -1;
    }
    int rc = s_embed(m, tokens, n, x, err, errlen);
    if (!rc && atomic_load(&s->m->faulted)) {
        snprintf(err, errlen, "%s", s->m->fault);
        rc = -1;
    }
    if (!rc)
        rc = m->hook.prefill(m->hook.ctx, s->id, tokens, x, n, s->n_past, s->n_batch, err,
                             errlen);
    if (!rc) {
        memcpy(s->x, x + (size_t)(n - 1) * d, d * sizeof(float)); /* the head's row */
        s->n_past += n;
        s->n_high = s->n_past > s->n_high ? s->n_past : s->n_high;
    }
    free(x);
    return rc || !logits ? rc : s_head(s, 1, logits, 0, err, errlen);
}

/* One pass over n <= n_batch positions starting at n_past. */
int llm_run_pass(llm_session *s, const int32_t *tokens, uint32_t n, float *logits, int all,
                  char *err, size_t errlen)
{
    const llm_model *m = s->m;
    const arch_model *am = &m->am;
    const arch_hparams *hp = &am->hp;
    if (s_embed(m, tokens, n, s->x, err, errlen))
        return -1;
    if (atomic_load(&s->m->faulted)) {
        snprintf(err, errlen, "%s", s->m->fault);
        return -1;
    }
    if (m->arm == LLM_ARM_RESIDENT) {
        if (m->hook.layers(m->hook.ctx, s->id, tokens, s->x, n, s->n_past, err, errlen))
            return -1;
    } else if (m->ex) {
        uint64_t bad = m->st.content_fail;
        if (exec_step_n(m->ex, s->x, n, s->n_past, s->kv, &s->m->st, err, errlen))
            return -1;
        if (m->st.content_fail != bad) /* this pass used bytes that are not the file's */
            return llm_content_fault(s->m, err, errlen);
    } else if (m->xsim) {
        if (s_forward_sim(s, n, err, errlen))
            return -1;
    } else {
        for (uint32_t l = 0; l < hp->n_layers; l++)
            if (arch_layer_forward(s->run, l, llm_layer_data(m, l), &s->kv[l], s->x, n,
                                   s->n_past, err, errlen))
                return -1;
    }
    s->n_past += n;
    s->n_high = s->n_past > s->n_high ? s->n_past : s->n_high;
    return logits ? s_head(s, n, logits, all, err, errlen) : 0;
}

/* The final norm and the head over s->x's last row (all: every one of its n rows). */
static int s_head(llm_session *s, uint32_t n, float *logits, int all, char *err,
                  size_t errlen)
{
    const llm_model *m = s->m;
    const arch_model *am = &m->am;
    const arch_hparams *hp = &am->hp;
    uint32_t d = hp->dim;
    char why[160];
    uint32_t first = all ? 0 : n - 1, cnt = all ? n : 1;
    for (uint32_t p = first; p < n; p++)
        arch_rmsnorm(s->x + (size_t)p * d, s->norm_w, s->xn + (size_t)(p - first) * d, d,
                     hp->norm_eps);
    if (quant_matmat((quant_type)am->output.type, hp->n_vocab, d, m->output, cnt, s->xn, logits,
                     s->nthreads, why, sizeof why)) {
        arch_err(err, errlen, m->g->path, "%s: %s", am->output.name, why);
        return -1;
    }
    arch_logits_finish(am, logits, cnt);
    return 0;
}

int llm_eval(llm_session *s, const int32_t *tokens, uint32_t n, float *logits, int all,
             char *err, size_t errlen)
{
    const arch_hparams *hp = &s->m->am.hp;
    const char *path = s->m->g->path;
    if (!n || !tokens) {
        arch_err(err, errlen, path, "no tokens to evaluate");
        return -1;
    }
    if (n > s->n_ctx - s->n_past) {
        arch_err(err, errlen, path,
                 "%u tokens do not fit the context: %u of %u positions are used (ask for a "
                 "larger context)", n, s->n_past, s->n_ctx);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= hp->n_vocab) {
            arch_err(err, errlen, path, "token %u: id %d outside the vocabulary (0..%u)", i,
                     tokens[i], hp->n_vocab - 1);
            return -1;
        }
    /* batched: chunks of at most a pass's rows, each queued to ride with the others' steps;
     * sized before each chunk, as the others start or stop decoding (llm_batch_chunk, llm_batch.c) */
    int batched = s->m->batch && !all;
    uint32_t chunk = s->n_batch;
    for (uint32_t i = 0, nb; i < n; i += nb) {
        if (batched)
            chunk = llm_batch_chunk(s, n, n - i);
        nb = n - i < chunk ? n - i : chunk;
        int last = i + nb == n;
        float *out = NULL;
        if (logits && all)
            out = logits + (size_t)i * hp->n_vocab;
        else if (logits && last)
            out = logits;
        /* the resident arm's prompt: every chunk in flight through the workers at once */
        if (!i && !batched && !s->m->batch && !all && n > chunk &&
            s->m->arm == LLM_ARM_RESIDENT && s->m->hook.prefill)
            return s_prefill(s, tokens, n, logits, err, errlen);
        if (batched ? llm_batch_step(s, tokens + i, nb, out, err, errlen)
                    : s->m->batch ? llm_batch_alone(s, tokens + i, nb, out, all, err, errlen)
                                  : llm_run_pass(s, tokens + i, nb, out, all, err, errlen))
            return -1;
    }
    return 0;
}


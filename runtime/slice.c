/* slice.c — a worker's range of a real model: resident layers through the executor, KV caches
 * per (session, layer) in slots, freed on session end. runtime/ */
#include "runtime/slice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch.h"
#include "arch/sums.h"
#include "gguf/gguf.h"
#include "base/util.h"

typedef struct {
    uint64_t session;             /* 0 = free */
    uint32_t cached;              /* positions 0 .. cached-1 are written */
    arch_kv *kv;                  /* one per layer of the range, NULL until first used */
} s_slot;

struct slice {
    gguf_file *g;
    arch_model am;
    int am_open;
    exec_t *e;
    uint32_t first, last, n_ctx, max_batch, n_slots, kv_dim;
    int stateless;                /* no layer keeps a cache: no slots are used */
    s_slot *slots;
    uint64_t kv_alloc;
};

static void s_slot_free(slice_t *s, s_slot *sl)
{
    if (sl->kv) {
        for (uint32_t l = 0; l < s->last - s->first; l++) {
            free(sl->kv[l].k);
            free(sl->kv[l].v);
        }
        free(sl->kv);
        s->kv_alloc -= arch_kv_bytes(&s->am, s->first, s->last, s->n_ctx, s->max_batch);
    }
    memset(sl, 0, sizeof *sl);
}

static int s_slot_alloc(slice_t *s, s_slot *sl)
{
    uint32_t nl = s->last - s->first;
    if (!(sl->kv = calloc(nl, sizeof *sl->kv)))
        return -1;
    s->kv_alloc += arch_kv_bytes(&s->am, s->first, s->last, s->n_ctx, s->max_batch);
    for (uint32_t l = 0; l < nl; l++) {
        /* a sliding-window layer's ring holds its window and a message's positions */
        uint32_t rows = arch_kv_rows(&s->am, s->first + l, s->n_ctx, s->max_batch);
        size_t each = (size_t)rows * s->kv_dim;
        sl->kv[l] = (arch_kv){ .n_ctx = s->n_ctx, .kv_dim = s->kv_dim, .n_rows = rows };
        /* malloc, not calloc: a row is read only after a step wrote it (no gaps) */
        if (!(sl->kv[l].k = malloc(each * sizeof(float))) ||
            !(sl->kv[l].v = malloc(each * sizeof(float))))
            return -1;
    }
    return 0;
}

uint64_t slice_held_bytes(const arch_model *am, uint32_t max_batch, uint32_t n_ctx,
                          uint32_t threads)
{
    uint64_t th = threads ? threads : 1;
    return (uint64_t)am->hp.dim * max_batch * 4 * 2 + 2 * 4096 + th * n_ctx * 4;
}

slice_t *slice_new(const slice_opts *o, char *err, size_t errlen)
{
    int cap_short = 0;
    return slice_new_ex(o, &cap_short, err, errlen);
}

slice_t *slice_new_ex(const slice_opts *o, int *cap_short, char *err, size_t errlen)
{
    slice_t *s = calloc(1, sizeof *s);
    *cap_short = 0;
    uint64_t *sums = NULL;
    char why[512];
    if (!s) {
        util_errf(err, errlen, o->path, "out of memory");
        return NULL;
    }
    if (!(s->g = gguf_open(o->path, why, sizeof why))) {
        snprintf(err, errlen, "%s", why);
        goto err;
    }
    if (arch_model_open(&s->am, s->g, why, sizeof why)) {
        snprintf(err, errlen, "%s", why);
        goto err;
    }
    s->am_open = 1;
    const arch_hparams *hp = &s->am.hp;
    if (o->first >= o->last || o->last > hp->n_layers) {
        util_errf(err, errlen, o->path, "layers [%u, %u) do not fit its %u", o->first,
                  o->last, hp->n_layers);
        goto err;
    }
    if (!o->n_ctx || (hp->n_ctx_train && o->n_ctx > hp->n_ctx_train) || !o->sessions ||
        !o->max_batch) {
        util_errf(err, errlen, o->path, "context %u (model: %u), %u sessions, batch %u: each "
                  "must be >= 1, the context at most the model's", o->n_ctx, hp->n_ctx_train,
                  o->sessions, o->max_batch);
        goto err;
    }
    s->first = o->first;
    s->last = o->last;
    s->n_ctx = o->n_ctx;
    s->max_batch = o->max_batch;
    s->n_slots = o->sessions;
    s->kv_dim = hp->n_head_kv * hp->head_dim;
    if (!(s->slots = calloc(s->n_slots, sizeof *s->slots)) ||
        !(sums = calloc(hp->n_layers, sizeof *sums))) {
        util_errf(err, errlen, o->path, "out of memory for %u session slots", o->sessions);
        goto err;
    }
    /* The coordinator's checksums are the ones the bytes must match: the executor hashes
     * each resident layer as it loads it and each streamed one as it arrives, so nothing
     * here reads the rest of the file (a worker's fetched copy holds only its layers). */
    if (o->expect_sums) {
        for (uint32_t l = o->first; l < o->last; l++)
            sums[l] = o->expect_sums[l - o->first];
    } else {
        sums_source src;
        if (sums_get(&s->am, o->path, sums, &src, NULL, 0, why, sizeof why)) {
            snprintf(err, errlen, "%s", why);
            goto err;
        }
    }
    exec_opts eo;
    s->stateless = !arch_model_has(&s->am, ARCH_KV); /* the family says so (arch.h) */
    if (o->exec) {
        eo = *o->exec;
    } else {
        exec_opts_worker(&eo, o->cap_bytes);
        /* A stateless range (the dense lab model) is planned by the rule its partitioner
         * prices a worker with (dist/partition.c partition_make: layers and the worker's
         * overhead, nothing held), or an assignment made at the margin would be refused. */
        if (!s->stateless)
            eo.held_bytes = slice_held_bytes(&s->am, o->max_batch, o->n_ctx,
                                             o->threads > 0 ? (uint32_t)o->threads : 1) +
                            (uint64_t)o->sessions * arch_kv_bytes(&s->am, o->first, o->last,
                                                                  o->n_ctx, o->max_batch);
    }
    eo.max_pos = o->max_batch;
    exec_plan plan;
    if (!o->exec && o->cap_bytes &&
        exec_plan_make_arch(&s->am, o->first, o->last, &eo, &plan, why, sizeof why)) {
        *cap_short = 1;
        snprintf(err, errlen, "%s", why);
        goto err;
    }
    if (!(s->e = exec_new_arch(&s->am, o->path, sums, o->first, o->last, &eo, why, sizeof why))) {
        snprintf(err, errlen, "%s", why);
        goto err;
    }
    if (o->threads > 1)
        exec_set_threads(s->e, o->threads);
    free(sums);
    return s;
err:
    free(sums);
    slice_free(&s);
    return NULL;
}

void slice_free(slice_t **sp)
{
    if (!sp || !*sp)
        return;
    slice_t *s = *sp;
    for (uint32_t i = 0; s->slots && i < s->n_slots; i++)
        s_slot_free(s, &s->slots[i]);
    free(s->slots);
    exec_free(&s->e);
    if (s->am_open)
        arch_model_close(&s->am);
    gguf_close(&s->g);
    free(s);
    *sp = NULL;
}

static s_slot *s_find(const slice_t *s, uint64_t session)
{
    for (uint32_t i = 0; i < s->n_slots; i++)
        if (s->slots[i].session == session)
            return &s->slots[i];
    return NULL;
}

int slice_step(slice_t *s, uint64_t session, uint32_t pos0, uint32_t n, float *x, char *err,
               size_t errlen)
{
    exec_stats st;
    memset(&st, 0, sizeof st);
    return slice_step_stats(s, session, pos0, n, x, &st, err, errlen);
}

int slice_step_stats(slice_t *s, uint64_t session, uint32_t pos0, uint32_t n, float *x,
                     exec_stats *st, char *err, size_t errlen)
{
    slice_seg one = { .session = session, .pos0 = pos0, .n = n };
    return slice_step_segs(s, &one, 1, x, st, err, errlen);
}

/* seg's slot (a free one taken for a new session), checked as a step of it. NULL with err. */
static s_slot *s_seg_slot(slice_t *s, const slice_seg *g, uint32_t total, char *err,
                          size_t errlen)
{
    char what[64];
    snprintf(what, sizeof what, "session %llu", (unsigned long long)g->session);
    if (!g->session || !g->n || total > s->max_batch) {
        util_errf(err, errlen, what, "%u positions (1..%u), session id >= 1", total,
                  s->max_batch);
        return NULL;
    }
    if ((uint64_t)g->pos0 + g->n > s->n_ctx) {
        util_errf(err, errlen, what, "positions %u..%u pass the context of %u", g->pos0,
                  g->pos0 + g->n - 1, s->n_ctx);
        return NULL;
    }
    s_slot *sl = s_find(s, g->session);
    if (!sl) {
        if (!(sl = s_find(s, 0))) {
            util_errf(err, errlen, what, "all %u session slots hold live sessions (a session "
                      "end frees one)", s->n_slots);
            return NULL;
        }
        if (s_slot_alloc(s, sl)) {
            s_slot_free(s, sl);
            util_errf(err, errlen, what, "out of memory for its KV caches");
            return NULL;
        }
        sl->session = g->session;
    }
    if (g->pos0 > sl->cached) {
        util_errf(err, errlen, what, "positions from %u, but only 0..%d are cached", g->pos0,
                  (int)sl->cached - 1);
        return NULL;
    }
    return sl;
}

int slice_step_segs(slice_t *s, const slice_seg *segs, uint32_t k, float *x, exec_stats *st,
                    char *err, size_t errlen)
{
    if (!k || k > SLICE_MAX_SEGS) {
        snprintf(err, errlen, "%u sessions in one step (1..%d)", k, SLICE_MAX_SEGS);
        return -1;
    }
    /* Nothing cached: any step, in any order, under any session and position (a dense step
     * is numbered by its caller; the numbers change nothing it computes). */
    if (s->stateless) {
        char what[64];
        snprintf(what, sizeof what, "session %llu", (unsigned long long)segs[0].session);
        if (k != 1) {
            util_errf(err, errlen, what, "%u sessions in one step of a stateless range", k);
            return -1;
        }
        if (!segs[0].n || segs[0].n > s->max_batch) {
            util_errf(err, errlen, what, "%u positions (1..%u)", segs[0].n, s->max_batch);
            return -1;
        }
        return exec_step_n(s->e, x, segs[0].n, 0, NULL, st, err, errlen);
    }
    uint32_t total = 0;
    for (uint32_t i = 0; i < k; i++)
        total += segs[i].n;
    s_slot *sl[SLICE_MAX_SEGS];
    exec_seg es[SLICE_MAX_SEGS];
    for (uint32_t i = 0; i < k; i++) {
        for (uint32_t j = 0; j < i; j++)
            if (segs[j].session == segs[i].session) {
                snprintf(err, errlen, "session %llu: twice in one step",
                         (unsigned long long)segs[i].session);
                return -1;
            }
        if (!(sl[i] = s_seg_slot(s, &segs[i], total, err, errlen)))
            return -1;
        es[i] = (exec_seg){ .kv = sl[i]->kv, .pos0 = segs[i].pos0, .n = segs[i].n };
    }
    if (exec_step_segs(s->e, x, es, k, st, err, errlen))
        return -1;
    /* a step from pos0 makes rows past pos0+n stale: they were computed over other tokens */
    for (uint32_t i = 0; i < k; i++)
        sl[i]->cached = segs[i].pos0 + segs[i].n;
    return 0;
}

int slice_end(slice_t *s, uint64_t session)
{
    s_slot *sl = session ? s_find(s, session) : NULL;
    if (!sl)
        return 0;
    s_slot_free(s, sl);
    return 1;
}

uint32_t slice_dim(const slice_t *s) { return s->am.hp.dim; }
int slice_stateless(const slice_t *s) { return s->stateless; }
void slice_drain(slice_t *s) { if (s) exec_drain(s->e); }
uint64_t slice_loaded_bytes(const slice_t *s) { return exec_loaded_bytes(s->e); }
uint64_t slice_kv_alloc_bytes(const slice_t *s) { return s->kv_alloc; }
const exec_plan *slice_plan(const slice_t *s) { return exec_get_plan(s->e); }

uint32_t slice_live(const slice_t *s)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_slots; i++)
        n += s->slots[i].session != 0;
    return n;
}

uint32_t slice_cached(const slice_t *s, uint64_t session)
{
    const s_slot *sl = session ? s_find(s, session) : NULL;
    return sl ? sl->cached : 0;
}

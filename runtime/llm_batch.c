/* llm_batch.c — continuous batching (llm_model_batching): every active session's next
 * position(s) in one shared pass, each weight read once for all of them. runtime/ */
#include "runtime/llm_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arch/arch_int.h"
#include "base/log.h"
#include "base/util.h"
#include "quant/quant.h"

/* ---------------------------------------------------------------- continuous batching */

/* One session's part of a pass: its caller waits on it until a pass has run it. */
typedef struct s_step {
    struct s_step *next;
    llm_session *s;
    const int32_t *tok;
    uint32_t n;                   /* positions, from s->n_past */
    float *logits;                /* n_vocab for the last position, or NULL */
    int decode;                   /* a decode position (not a prompt's chunk, however short) */
    int mixed;                    /* a prompt chunk sized to ride beside decode steps */
    int done, rc;
    char err[256];
} s_step;

struct llm_batch {
    pthread_mutex_t mu;
    pthread_cond_t cv;            /* on CLOCK_MONOTONIC */
    s_step *head, *tail;          /* steps waiting for a pass, in arrival order */
    uint32_t n_queued, n_active;
    uint32_t max_rows;            /* positions one pass carries */
    uint32_t max_steps;           /* sessions one pass carries */
    int running;                  /* a caller is running a pass */
    uint64_t last_pass_ns;
    uint64_t passes, rows;
    uint32_t n_stream;            /* active sessions whose last call was one decode position */
    /* measured in this process (moving averages, 0 = not yet): passes of decode positions
     * only (their time and rows), and passes carrying a prompt chunk without decode steps
     * (time and rows): from them a row's cost, the first allowance (llm_batch_chunk) */
    double dec_ns, dec_rows, big_ns, big_rows;
    double allow;                 /* prompt rows a pass carries beside others' decode steps
                                   * (0: not yet sized), steered by the mixed passes' time */
    uint64_t cut;                 /* prompt chunks cut below their batch for that */
    /* the pass's own buffers (used by the caller running it, outside mu) */
    arch_run *run;                /* max_rows positions */
    float *x;                     /* (max_rows, dim) every step's rows, in step order */
    float *xn;                    /* (LLM_BATCH_MAX_SESSIONS, dim) final norm of each last row */
    float *logits;                /* (LLM_BATCH_MAX_SESSIONS, n_vocab) */
    arch_seg segs[LLM_BATCH_MAX_SESSIONS];
    exec_seg esegs[LLM_BATCH_MAX_SESSIONS];
};

void llm_batch_free(llm_batch **bp)
{
    llm_batch *b = *bp;
    if (!b)
        return;
    arch_run_free(&b->run);
    free(b->x);
    free(b->xn);
    free(b->logits);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
    *bp = NULL;
}

int llm_model_batching(llm_model *m, uint32_t max_rows, char *err, size_t errlen)
{
    const arch_hparams *hp = &m->am.hp;
    if (m->arm == LLM_ARM_RESIDENT && !m->hook.segs) {
        arch_err(err, errlen, m->g->path, "continuous batching on the resident arm needs "
                 "layers that run several sessions in one pass (llm_layers_hook.segs)");
        return -1;
    }
    if (m->batch)
        return 0;
    if (m->arm == LLM_ARM_RESIDENT && max_rows > m->hook.max_batch)
        max_rows = m->hook.max_batch; /* one act carries at most max_batch positions */
    uint32_t steps = LLM_BATCH_MAX_SESSIONS;
    if (m->arm == LLM_ARM_SSD) { /* what the plan counted against the cap, no more */
        max_rows = max_rows < llm_ssd_max_pos(&m->o) ? max_rows : llm_ssd_max_pos(&m->o);
        steps = m->o.n_sessions < steps ? m->o.n_sessions : steps;
    }
    llm_batch *b = calloc(1, sizeof *b);
    pthread_condattr_t ca;
    if (!b)
        goto oom;
    pthread_mutex_init(&b->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cv, &ca);
    pthread_condattr_destroy(&ca);
    b->max_rows = max_rows < 1 ? 1 : max_rows;
    b->max_steps = steps;
    /* the SSD arm's layers run in its executor (its own run, planned for these rows) */
    if (!m->ex && m->arm != LLM_ARM_RESIDENT &&
        !(b->run = arch_run_new(&m->am, b->max_rows, err, errlen))) {
        llm_batch_free(&b);
        return -1;
    }
    b->x = malloc((size_t)b->max_rows * hp->dim * sizeof(float));
    b->xn = malloc((size_t)steps * hp->dim * sizeof(float));
    b->logits = malloc((size_t)steps * hp->n_vocab * sizeof(float));
    if (!b->x || !b->xn || !b->logits)
        goto oom;
    m->batch = b;
    return 0;
oom:
    llm_batch_free(&b);
    arch_err(err, errlen, m->g->path, "out of memory for passes of %u positions", max_rows);
    return -1;
}

void llm_session_active(llm_session *s, int on)
{
    llm_batch *b = s->m->batch;
    on = !!on;
    if (s->m->arm == LLM_ARM_RESIDENT && s->m->hook.active)
        s->m->hook.active(s->m->hook.ctx, s->id, on);
    if (!b || s->active == on) /* counted only while the model batches */
        return;
    s->active = on;
    pthread_mutex_lock(&b->mu);
    b->n_active = on ? b->n_active + 1 : b->n_active - 1;
    if (!on && s->stream) {
        s->stream = 0;
        b->n_stream--;
    }
    pthread_cond_broadcast(&b->cv); /* a pass waiting for this session need not */
    pthread_mutex_unlock(&b->mu);
}

void llm_model_batch_counts(llm_model *m, uint64_t *passes, uint64_t *rows)
{
    *passes = *rows = 0;
    if (!m->batch)
        return;
    pthread_mutex_lock(&m->batch->mu);
    *passes = m->batch->passes;
    *rows = m->batch->rows;
    pthread_mutex_unlock(&m->batch->mu);
}

uint64_t llm_model_batch_cuts(llm_model *m)
{
    if (!m->batch)
        return 0;
    pthread_mutex_lock(&m->batch->mu);
    uint64_t c = m->batch->cut;
    pthread_mutex_unlock(&m->batch->mu);
    return c;
}

/* What a prompt's rows may add to a pass of the others' decode steps, as a share of that
 * pass's time: a mixed pass's target is (1 + S_MIX) decode passes. The bar is the stream's ITL
 * p95 at most 2x alone's; the first rule's budget of a whole decode pass put a mixed pass at
 * 2x by design, and the noise of a shared machine decided (1.4-2.4x, 2026-12-02-itl.md;
 * 1.3-2.6x on the reference arm, 1.8-4.8x on the resident arm, over 2x in 19 of 26 rounds,
 * 2026-12-03-itl.md). */
#define S_MIX 0.5
/* Prompt rows beside others' decode steps before anything measures a row's time. */
#define S_PROBE 1

/* Positions of s's next step, for a call of n positions with left still to run: its batch,
 * within a pass; while other sessions decode, a prompt's chunk at most the allowance, steered
 * by the time of the passes it rides (s_batch_steer): halved after a pass over the target,
 * one row more after one with room for another row, so a mixed pass stays within the target
 * but for the machine's own spikes, which make the allowance smaller, never larger. Its first
 * value: S_MIX x a decode-only pass's time / a row's time (the passes carrying a prompt alone
 * against the decode-only ones), or S_PROBE rows where none has run; at least one row goes
 * per pass (where one row costs more than S_MIX of a decode pass, the mixed pass is a decode
 * pass and one row). A prompt alone goes in full batches. The bits do not change: a
 * position's bits do not depend on its batch. */
uint32_t llm_batch_chunk(llm_session *s, uint32_t n, uint32_t left)
{
    llm_batch *b = s->m->batch;
    uint32_t r = s->n_batch < b->max_rows ? s->n_batch : b->max_rows;
    pthread_mutex_lock(&b->mu);
    int stream = n == 1 && s->active; /* a decode position (a prompt chunk is not one) */
    if (stream != s->stream) {
        b->n_stream = stream ? b->n_stream + 1 : b->n_stream - 1;
        s->stream = stream;
    }
    s->mixed = !stream && b->n_stream && b->dec_ns > 0;
    if (s->mixed) {
        if (b->allow <= 0) {
            double row_ns = b->big_rows > b->dec_rows + 1
                                ? (b->big_ns - b->dec_ns) / (b->big_rows - b->dec_rows) : 0;
            b->allow = row_ns > 0 ? S_MIX * b->dec_ns / row_ns : S_PROBE;
            b->allow = b->allow < 1 ? 1 : b->allow > r ? r : b->allow;
        }
        uint32_t c = b->allow < r ? (uint32_t)b->allow : r;
        if (c < r && left > c) {
            r = c;
            b->cut++;
        }
    }
    pthread_mutex_unlock(&b->mu);
    return r;
}

/* One forward pass over k sessions' steps: their rows embedded one after another, every layer
 * over all of them (arch_layer_forward_segs: each weight read once), then the final norm of
 * each step's last row and the head over those rows (one read of the head for all). Each row
 * is computed as it would be alone (arch.h), so each session's bits are its own. */
static int s_batch_pass(llm_model *m, s_step *const *st, uint32_t k, int nthreads, char *err,
                        size_t errlen)
{
    llm_batch *b = m->batch;
    const arch_model *am = &m->am;
    const arch_hparams *hp = &am->hp;
    uint32_t d = hp->dim, row = 0, nl = 0;
    char why[160];
    for (uint32_t i = 0; i < k; i++) {
        for (uint32_t p = 0; p < st[i]->n; p++) {
            const uint8_t *er = (const uint8_t *)m->tok_embd +
                                (uint64_t)st[i]->tok[p] * am->tok_embd.row_bytes;
            if (quant_dequantize_row((quant_type)am->tok_embd.type, er,
                                     b->x + (size_t)(row + p) * d, d, why, sizeof why)) {
                arch_err(err, errlen, m->g->path, "token_embd.weight: %s", why);
                return -1;
            }
        }
        b->segs[i] = (arch_seg){ .pos0 = st[i]->s->n_past, .n = st[i]->n };
        b->esegs[i] = (exec_seg){ .kv = st[i]->s->kv, .pos0 = st[i]->s->n_past, .n = st[i]->n };
        row += st[i]->n;
    }
    arch_embed_finish(am, b->x, row); /* the family's scale (gemma's sqrt(dim)), as s_pass */
    if (atomic_load(&m->faulted)) {
        snprintf(err, errlen, "%s", m->fault);
        return -1;
    }
    if (m->arm == LLM_ARM_RESIDENT) { /* one act through the workers for every session */
        llm_hook_seg hs[LLM_BATCH_MAX_SESSIONS];
        for (uint32_t i = 0; i < k; i++)
            hs[i] = (llm_hook_seg){ .session = st[i]->s->id, .tokens = st[i]->tok,
                                    .pos0 = st[i]->s->n_past, .n = st[i]->n };
        if (k == 1 ? m->hook.layers(m->hook.ctx, hs[0].session, hs[0].tokens, b->x, hs[0].n,
                                    hs[0].pos0, err, errlen)
                   : m->hook.segs(m->hook.ctx, hs, k, b->x, err, errlen))
            return -1;
    } else if (m->ex) { /* SSD: each streamed layer read once for every session in the pass */
        uint64_t bad = m->st.content_fail;
        if (exec_step_segs(m->ex, b->x, b->esegs, k, &m->st, err, errlen))
            return -1;
        if (m->st.content_fail != bad) /* this pass used bytes that are not the file's */
            return llm_content_fault(m, err, errlen);
    } else {
        arch_run_set_threads(b->run, nthreads);
        for (uint32_t l = 0; l < hp->n_layers; l++) {
            for (uint32_t i = 0; i < k; i++)
                b->segs[i].kv = &st[i]->s->kv[l];
            if (arch_layer_forward_segs(b->run, l, llm_layer_data(m, l), b->segs, k, b->x, err,
                                        errlen))
                return -1;
        }
    }
    row = 0;
    for (uint32_t i = 0; i < k; i++) {
        row += st[i]->n;
        st[i]->s->n_past += st[i]->n;
        if (st[i]->s->n_past > st[i]->s->n_high)
            st[i]->s->n_high = st[i]->s->n_past;
        if (st[i]->logits)
            arch_rmsnorm(b->x + (size_t)(row - 1) * d, st[i]->s->norm_w, b->xn + (size_t)nl++ * d,
                         d, hp->norm_eps);
    }
    if (!nl)
        return 0;
    if (quant_matmat((quant_type)am->output.type, hp->n_vocab, d, m->output, nl, b->xn,
                     b->logits, nthreads, why, sizeof why)) {
        arch_err(err, errlen, m->g->path, "%s: %s", am->output.name, why);
        return -1;
    }
    arch_logits_finish(am, b->logits, nl); /* the family's final soft-cap, as s_pass */
    nl = 0;
    for (uint32_t i = 0; i < k; i++)
        if (st[i]->logits)
            memcpy(st[i]->logits, b->logits + (size_t)nl++ * hp->n_vocab,
                   (size_t)hp->n_vocab * sizeof(float));
    return 0;
}

/* Wait (under mu) for the other active sessions to queue their steps: at most a quarter of
 * the last pass's time, so a session that is late (sampling, its client) costs the others
 * little and rides the next pass. */
static void s_batch_gather(llm_batch *b)
{
    if (b->n_queued >= b->n_active || !b->last_pass_ns)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + b->last_pass_ns / 4;
    ts.tv_sec = (time_t)(t / 1000000000ull);
    ts.tv_nsec = (long)(t % 1000000000ull);
    while (b->n_queued < b->n_active)
        if (pthread_cond_timedwait(&b->cv, &b->mu, &ts) == ETIMEDOUT)
            break;
}

/* One sample into a moving average (an eighth each; the first is taken whole). A sample
 * over twice the average counts as twice it: on a shared machine a pass now and then waits
 * for the cores, and those spikes would otherwise set the bound, not the passes' cost. */
static void s_avg(double *avg, double v)
{
    if (*avg <= 0) {
        *avg = v;
        return;
    }
    if (v > 2 * *avg)
        v = 2 * *avg;
    *avg += (v - *avg) / 8;
}

/* A mixed pass's time (ns, prompt rows beside the decode steps) steers the allowance: over
 * (1 + S_MIX) decode-only passes, half as many prompt rows (at least one); one more only where
 * another of this pass's rows, at its measured cost ((ns - a decode pass) / prompt rows), fits
 * within it (at most a batch). The passes stay within the target whatever a row costs (it
 * grows along a prompt as its rows attend to more positions, and steps where a kernel changes
 * method with the batch), and a pass slowed by the machine only makes the next ones lighter. */
static void s_batch_steer(llm_batch *b, uint64_t ns, uint32_t prompt_rows)
{
    double target = (1 + S_MIX) * b->dec_ns;
    if (b->allow <= 0 || b->dec_ns <= 0 || !prompt_rows)
        return;
    double row_ns = ((double)ns - b->dec_ns) / prompt_rows;
    if ((double)ns > target)
        b->allow = b->allow / 2 < 1 ? 1 : b->allow / 2;
    else if ((double)ns + (row_ns > 0 ? row_ns : 0) <= target && b->allow + 1 <= b->max_rows)
        b->allow += 1;
}

/* A pass's time into the moving averages (an eighth each pass): decode-only passes apart
 * from those carrying a prompt chunk alone; a pass with both (a mixed chunk beside decode
 * steps) steers the allowance instead (s_batch_steer). */
static void s_batch_time(llm_batch *b, s_step *const *st, uint32_t k, uint32_t rows, uint64_t ns)
{
    int dec = 1, any_dec = 0, mixed = 0;
    uint32_t prompt_rows = 0;
    for (uint32_t i = 0; i < k; i++) {
        dec &= st[i]->decode;
        any_dec |= st[i]->decode;
        mixed |= st[i]->mixed;
        prompt_rows += st[i]->decode ? 0 : st[i]->n;
    }
    if (mixed && any_dec) {
        s_batch_steer(b, ns, prompt_rows);
        return;
    }
    if (any_dec && !dec) /* a full chunk beside decode steps: neither kind's cost */
        return;
    double *t = dec ? &b->dec_ns : &b->big_ns, *r = dec ? &b->dec_rows : &b->big_rows;
    if (*t <= 0)
        *r = rows;
    else
        *r += ((double)rows - *r) / 8;
    s_avg(t, (double)ns);
}

/* s's step into the next pass; the first caller to find no pass running runs one (over the
 * steps queued, in order, within max_rows) and hands the next to whoever is still waiting. */
int llm_batch_step(llm_session *s, const int32_t *tok, uint32_t n, float *logits,
                        char *err, size_t errlen)
{
    llm_batch *b = s->m->batch;
    s_step me = { .s = s, .tok = tok, .n = n, .logits = logits, .decode = s->stream,
                  .mixed = s->mixed };
    pthread_mutex_lock(&b->mu);
    if (b->tail)
        b->tail->next = &me;
    else
        b->head = &me;
    b->tail = &me;
    b->n_queued++;
    pthread_cond_broadcast(&b->cv);
    while (!me.done) {
        if (b->running) {
            pthread_cond_wait(&b->cv, &b->mu);
            continue;
        }
        b->running = 1;
        s_batch_gather(b);
        s_step *take[LLM_BATCH_MAX_SESSIONS];
        uint32_t k = 0, rows = 0;
        while (b->head && k < b->max_steps && rows + b->head->n <= b->max_rows) {
            s_step *t = b->head;
            b->head = t->next;
            if (!b->head)
                b->tail = NULL;
            t->next = NULL;
            take[k++] = t;
            rows += t->n;
        }
        b->n_queued -= k;
        pthread_mutex_unlock(&b->mu);
        char why[256];
        uint64_t t0 = util_now_ns();
        int rc = s_batch_pass(s->m, take, k, s->nthreads, why, sizeof why);
        uint64_t dt = util_now_ns() - t0;
        pthread_mutex_lock(&b->mu);
        b->last_pass_ns = dt;
        b->passes++;
        b->rows += rows;
        if (!rc)
            s_batch_time(b, take, k, rows, dt);
        for (uint32_t i = 0; i < k; i++) {
            take[i]->rc = rc;
            if (rc)
                snprintf(take[i]->err, sizeof take[i]->err, "%s", why);
            take[i]->done = 1;
        }
        b->running = 0;
        pthread_cond_broadcast(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
    if (me.rc)
        snprintf(err, errlen, "%s", me.err);
    return me.rc;
}

/* A pass of s alone on a batched model (every position's logits: perplexity), between the
 * batched ones: the SSD arm's one executor runs one pass at a time. */
int llm_batch_alone(llm_session *s, const int32_t *tok, uint32_t n, float *logits, int all,
                         char *err, size_t errlen)
{
    llm_batch *b = s->m->batch;
    pthread_mutex_lock(&b->mu);
    while (b->running)
        pthread_cond_wait(&b->cv, &b->mu);
    b->running = 1;
    pthread_mutex_unlock(&b->mu);
    int rc = llm_run_pass(s, tok, n, logits, all, err, errlen);
    pthread_mutex_lock(&b->mu);
    b->running = 0;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return rc;
}

/* draft.c — the drafter of speculative decoding: a draft model (argmax or sampled drafts), or prompt lookup.
 * text/ */
#include "text/draft.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

struct draft {
    llm_model *model;             /* NULL: prompt lookup */
    llm_session *s;               /* the draft model's session */
    int32_t *hist;                /* ids in s's cache, in order */
    uint32_t n_hist, n_ctx, n_vocab;
    float *logits;                /* n_vocab */
    uint32_t k_max, k, ngram;
    int greedy, fixed;            /* draft_opts' */
    sampler_t *smp;               /* sampled drafts (draft_sampling): the request's chain; NULL: argmax */
    sampler_dist *q;              /* (k_max,) each draft's distribution, into qid/qp */
    int32_t *qid;                 /* (k_max, n_vocab) */
    double *qp;                   /* (k_max, n_vocab) */
    /* draft_update's measurements (decayed sums and running means; 0: none yet) */
    double acc, rej, t_pass, t_row, t_draft;
    double t_tok;                 /* the draft model: one single-position pass (kept across
                                   * requests: the machine's, not the text's) */
    uint32_t since_probe, probe_every; /* plain passes since the last probe, and the gap */
    int probing;                  /* the pass under way carries a probe */
    /* drafting ahead (draft_ahead): the thread, its job, its context and result */
    pthread_t th;
    int th_on, quit;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    enum { AHEAD_NONE, AHEAD_QUEUED, AHEAD_DONE } job;
    int32_t *actx;                /* n_ctx + DRAFT_K_MAX + 1: the job's context; draft_propose's
                                   * scratch for context + drafts taken from it */
    uint32_t an, ak;              /* the job's context length and tokens asked for */
    int32_t aout[DRAFT_K_MAX + 1];
    int ares;                     /* the job's draft count, or -1 (aerr) */
    int avalid;                   /* aout holds a result for actx[0..an) */
    char aerr[256];
    int last_hit;                 /* the last draft_propose took drafts made ahead */
    uint32_t hits;                /* since draft_restart */
};

static int s_propose(draft *d, const int32_t *ctx, uint32_t n, uint32_t k, int32_t *out,
                     char *err, size_t errlen);

int draft_check_vocab(const llm_model *target, const llm_model *dm, char *err, size_t errlen)
{
    const gguf_file *gt = llm_model_gguf(target), *gd = llm_model_gguf(dm);
    uint32_t vt = llm_model_arch(target)->hp.n_vocab, vd = llm_model_arch(dm)->hp.n_vocab;
    if (vt != vd) {
        util_errf(err, errlen, gd->path, "the draft model's vocabulary has %u tokens, the "
                  "target %s has %u: a draft must share the target's vocabulary", vd, gt->path, vt);
        return -1;
    }
    const gguf_kv *kt = gguf_find_kv(gt, "tokenizer.ggml.tokens");
    const gguf_kv *kd = gguf_find_kv(gd, "tokenizer.ggml.tokens");
    if (!kt || !kd || !kt->arr_str || !kd->arr_str)
        return 0; /* no token strings (a lab model): the sizes are all there is to compare */
    if (kt->arr_n != kd->arr_n) {
        util_errf(err, errlen, gd->path, "the draft model's tokenizer has %llu tokens, the "
                  "target %s has %llu", (unsigned long long)kd->arr_n, gt->path,
                  (unsigned long long)kt->arr_n);
        return -1;
    }
    for (uint64_t i = 0; i < kt->arr_n; i++)
        if (strcmp(kt->arr_str[i], kd->arr_str[i])) {
            util_errf(err, errlen, gd->path, "token %llu is \"%.40s\" in the draft model but "
                      "\"%.40s\" in the target %s: a draft must share the target's vocabulary",
                      (unsigned long long)i, kd->arr_str[i], kt->arr_str[i], gt->path);
            return -1;
        }
    return 0;
}

draft *draft_new(const draft_opts *o, uint32_t n_ctx, int nthreads, char *err, size_t errlen)
{
    if (!o->model == !o->lookup) {
        util_errf(err, errlen, "draft", "one source: a draft model or prompt lookup");
        return NULL;
    }
    if (o->k_max > DRAFT_K_MAX || o->ngram > 8) {
        util_errf(err, errlen, "draft", "draft-max %u must be 1..%d, ngram %u 1..8", o->k_max,
                  DRAFT_K_MAX, o->ngram);
        return NULL;
    }
    draft *d = calloc(1, sizeof *d);
    if (!d) {
        util_errf(err, errlen, "draft", "out of memory");
        return NULL;
    }
    d->model = o->model;
    d->k_max = o->k_max ? o->k_max : o->model ? DRAFT_K_MODEL : DRAFT_K_LOOKUP;
    d->probe_every = 16; /* k 0: the first pass is plain (draft_restart) */
    d->ngram = o->ngram ? o->ngram : DRAFT_NGRAM;
    d->greedy = !!o->greedy;
    d->fixed = !!o->fixed;
    d->k = d->fixed ? d->k_max : 0;
    d->n_ctx = n_ctx;
    if (d->model) {
        const arch_hparams *hp = &llm_model_arch(d->model)->hp;
        /* the draft model may know a shorter context than the target's session: past it, no
         * drafts (draft_propose), never an error */
        if (hp->n_ctx_train && d->n_ctx > hp->n_ctx_train)
            d->n_ctx = hp->n_ctx_train;
        d->n_vocab = hp->n_vocab;
        if (!(d->s = llm_session_new(d->model, d->n_ctx, 64, err, errlen)))
            goto err;
        llm_session_set_threads(d->s, nthreads);
        d->hist = malloc((size_t)d->n_ctx * sizeof *d->hist);
        d->logits = malloc((size_t)d->n_vocab * sizeof *d->logits);
        d->actx = malloc(((size_t)d->n_ctx + DRAFT_K_MAX + 1) * sizeof *d->actx);
        if (!d->hist || !d->logits || !d->actx) {
            util_errf(err, errlen, "draft", "out of memory for a context of %u", d->n_ctx);
            goto err;
        }
    }
    return d;
err:
    draft_free(&d);
    return NULL;
}

/* Wait for the job under way (if any); its result is then in aout/ares. */
static void s_join(draft *d)
{
    if (!d->th_on)
        return;
    pthread_mutex_lock(&d->mu);
    while (d->job == AHEAD_QUEUED)
        pthread_cond_wait(&d->cv, &d->mu);
    if (d->job == AHEAD_DONE)
        d->avalid = d->ares > 0;
    d->job = AHEAD_NONE;
    pthread_mutex_unlock(&d->mu);
}

static void *s_ahead_main(void *arg)
{
    draft *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->quit && d->job != AHEAD_QUEUED)
            pthread_cond_wait(&d->cv, &d->mu);
        if (d->quit)
            break;
        pthread_mutex_unlock(&d->mu);
        /* the caller touches nothing of d but the job's state until it joins */
        int r = s_propose(d, d->actx, d->an, d->ak, d->aout, d->aerr, sizeof d->aerr);
        pthread_mutex_lock(&d->mu);
        d->ares = r;
        d->job = AHEAD_DONE;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

void draft_free(draft **dp)
{
    if (!dp || !*dp)
        return;
    draft *d = *dp;
    if (d->th_on) {
        s_join(d);
        pthread_mutex_lock(&d->mu);
        d->quit = 1;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->th, NULL);
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
    }
    free(d->actx);
    sampler_destroy(&d->smp);
    free(d->q);
    free(d->qid);
    free(d->qp);
    llm_session_free(&d->s);
    free(d->hist);
    free(d->logits);
    free(d);
    *dp = NULL;
}

int draft_same(const draft *d, const draft_opts *o)
{
    uint32_t k = o->k_max ? o->k_max : o->model ? DRAFT_K_MODEL : DRAFT_K_LOOKUP;
    return d->model == o->model && !d->model == !!o->lookup && d->k_max == k &&
           d->ngram == (o->ngram ? o->ngram : DRAFT_NGRAM) && d->greedy == !!o->greedy &&
           d->fixed == !!o->fixed;
}

uint32_t draft_k(const draft *d)
{
    return d->k;
}

void draft_wait(draft *d)
{
    s_join(d);
}

uint32_t draft_ahead_hits(const draft *d)
{
    return d->hits;
}

int draft_ahead(draft *d, const int32_t *ctx, uint32_t n, uint32_t k, char *err, size_t errlen)
{
    /* past the draft model's context: nothing to draft (s_propose); sampled drafts: the
     * sampler is the caller's thread's */
    if (!d->model || !n || n > d->n_ctx || d->smp)
        return 0;
    s_join(d);
    d->avalid = 0;
    if (!d->th_on) {
        if (pthread_mutex_init(&d->mu, NULL) || pthread_cond_init(&d->cv, NULL) ||
            pthread_create(&d->th, NULL, s_ahead_main, d)) {
            util_errf(err, errlen, "draft", "no thread to draft ahead on");
            return -1;
        }
        d->th_on = 1;
    }
    memcpy(d->actx, ctx, (size_t)n * sizeof *ctx);
    pthread_mutex_lock(&d->mu);
    d->an = n;
    d->ak = k + 1 < DRAFT_K_MAX + 1 ? k + 1 : DRAFT_K_MAX + 1;
    d->job = AHEAD_QUEUED;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
    return 0;
}

void draft_restart(draft *d)
{
    s_join(d);
    d->avalid = 0;
    d->hits = 0;
    d->k = d->fixed ? d->k_max : 0;
    d->acc = d->rej = d->t_pass = d->t_row = d->t_draft = 0;
    d->since_probe = d->probing = 0;
    d->probe_every = 16;
}

static double s_mean(double old, double x)
{
    return old > 0 ? 0.75 * old + 0.25 * x : x;
}

void draft_update(draft *d, uint32_t drafted, uint32_t accepted, double pass_ms,
                  double draft_ms)
{
    s_join(d);
    if (!drafted) {
        d->t_pass = s_mean(d->t_pass, pass_ms);
    } else {
        d->acc = 0.8 * d->acc + accepted;
        d->rej = 0.8 * d->rej + (accepted < drafted);
        /* a draft model's cost a token is a single pass of it: what drafting every pass costs
         * (the batched catch-up of the tokens accepted rides along). Its time this pass also
         * ran the catch-up of every token since it last drafted (the whole prompt at first),
         * which would make a drafter that was off look dearer than it is. Drafts made ahead
         * cost what the caller still waited for them. */
        double per = d->model && !d->last_hit ? d->t_tok : draft_ms / drafted;
        if (per > 0)
            d->t_draft = s_mean(d->t_draft, per);
        if (d->t_pass > 0) /* the rows beyond the first, against a plain pass */
            d->t_row = s_mean(d->t_row, pass_ms > d->t_pass ? (pass_ms - d->t_pass) / drafted : 0);
    }
    if (d->probing && drafted) /* a failed probe: wait twice as long for the next one */
        d->probe_every = accepted ? 16 : d->probe_every < 256 ? 2 * d->probe_every : 256;
    d->probing = 0;
    if (d->fixed) {
        d->k = d->k_max;
        return;
    }
    if (!(d->t_pass > 0)) { /* no plain pass measured yet: one next, to have the baseline */
        d->k = 0;
        return;
    }
    if (!(d->t_draft > 0)) { /* nothing drafted yet: two, to measure the drafter and a row */
        d->k = d->k_max < 2 ? d->k_max : 2;
        return;
    }
    double a = (d->acc + 0.5) / (d->acc + d->rej + 1), best = 0, an = a;
    uint32_t kb = 1;
    for (uint32_t k = 1; k <= d->k_max; k++, an *= a) {
        double v = (1 - an * a) / (1 - a) / (d->t_pass + k * (d->t_row + d->t_draft));
        if (v > best)
            best = v, kb = k;
    }
    /* off only when plain passes are clearly better: the times are a few noisy samples on a
     * shared machine, and one wrong "off" costs more (a paused drafter learns only from its
     * probes) than one wrong "on" (one pass's extra rows) */
    if (1 / d->t_pass > 1.1 * best)
        kb = 0;
    /* k 0 learns nothing about a: a draft of one every 16 plain passes keeps it current (32,
     * 64, ... 256 after probes that failed) */
    if (kb == 0 && ++d->since_probe >= d->probe_every)
        kb = 1, d->since_probe = 0, d->probing = 1;
    d->k = kb;
}

int draft_sampling(draft *d, const sampler_opts *so, char *err, size_t errlen)
{
    s_join(d);
    sampler_destroy(&d->smp);
    if (!so || !d->model || d->greedy || so->temperature == 0)
        return 0;
    if (!d->q) {
        d->q = calloc(d->k_max, sizeof *d->q);
        d->qid = malloc((size_t)d->k_max * d->n_vocab * sizeof *d->qid);
        d->qp = malloc((size_t)d->k_max * d->n_vocab * sizeof *d->qp);
        if (!d->q || !d->qid || !d->qp) {
            free(d->q), free(d->qid), free(d->qp);
            d->q = NULL, d->qid = NULL, d->qp = NULL;
            util_errf(err, errlen, "draft", "out of memory for %u drafts' distributions",
                      d->k_max);
            return -1;
        }
        for (uint32_t j = 0; j < d->k_max; j++)
            d->q[j] = (sampler_dist){ d->qid + (size_t)j * d->n_vocab,
                                      d->qp + (size_t)j * d->n_vocab, 0 };
    }
    sampler_opts o = *so;
    o.seed ^= DRAFT_SEED_MIX;
    return (d->smp = sampler_new(&o, d->n_vocab, err, errlen)) ? 0 : -1;
}

const sampler_dist *draft_dist(const draft *d, uint32_t j)
{
    return d->smp && j < d->k_max ? &d->q[j] : NULL;
}

/* The latest earlier occurrence of the context's last n-gram (longest first); the tokens after
 * it. */
static int s_lookup(const draft *d, const int32_t *ctx, uint32_t n, uint32_t k, int32_t *out)
{
    for (uint32_t g = d->ngram < n ? d->ngram : n - 1; g >= 1; g--) {
        const int32_t *tail = ctx + n - g;
        /* a match ending at i (exclusive) < n, so at least one token follows it */
        for (uint32_t i = n - 1; i >= g; i--) {
            if (memcmp(ctx + i - g, tail, g * sizeof *ctx))
                continue;
            uint32_t c = 0;
            while (c < k && i + c < n)
                out[c] = ctx[i + c], c++;
            return (int)c;
        }
    }
    return 0;
}

static int32_t s_argmax(const float *l, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (l[i] > l[best])
            best = i; /* ties: the lowest id, as the greedy sampler */
    return (int32_t)best;
}

/* Drafts made ahead that continue ctx: how many copied into out (at most k; 0: none fit). */
static uint32_t s_take(draft *d, const int32_t *ctx, uint32_t n, uint32_t k, int32_t *out)
{
    if (!d->avalid || n <= d->an || n - d->an > (uint32_t)d->ares)
        return 0;
    uint32_t j = n - d->an; /* the tokens drawn after the ahead job's context */
    if (memcmp(ctx, d->actx, (size_t)d->an * sizeof *ctx) ||
        memcmp(ctx + d->an, d->aout, (size_t)j * sizeof *ctx))
        return 0;
    uint32_t c = (uint32_t)d->ares - j < k ? (uint32_t)d->ares - j : k;
    memcpy(out, d->aout + j, (size_t)c * sizeof *out);
    return c;
}

int draft_propose(draft *d, const int32_t *ctx, uint32_t n, uint32_t k, int32_t *out,
                  char *err, size_t errlen)
{
    s_join(d);
    d->last_hit = 0;
    if (!n || !k)
        return 0;
    if (!d->model)
        return s_lookup(d, ctx, n, k, out);
    uint32_t c = s_take(d, ctx, n, k, out);
    d->avalid = 0;
    if (!c)
        return s_propose(d, ctx, n, k, out, err, errlen);
    d->last_hit = 1;
    d->hits++;
    if (c == k || (uint64_t)n + c > d->n_ctx)
        return (int)c;
    /* fewer made ahead than wanted now: the rest continue context + those (the session
     * holds all but the last of them) */
    memcpy(d->actx, ctx, (size_t)n * sizeof *ctx);
    memcpy(d->actx + n, out, (size_t)c * sizeof *out);
    int r = s_propose(d, d->actx, n + c, k - c, out + c, err, errlen);
    return r < 0 ? r : (int)c + r;
}

/* The draft model's continuation of ctx, argmax or sampled (d->smp): k tokens into out (0
 * when past its context). */
static int s_propose(draft *d, const int32_t *ctx, uint32_t n, uint32_t k, int32_t *out,
                     char *err, size_t errlen)
{
    if ((uint64_t)n + k - 1 > d->n_ctx)
        return 0;
    /* keep the common prefix with what the session holds (the accepted tokens of the last
     * verification), run the rest; the last context token always runs, for its logits */
    uint32_t keep = 0, held = llm_session_pos(d->s);
    while (keep < d->n_hist && keep < n - 1 && keep < held && d->hist[keep] == ctx[keep])
        keep++;
    llm_session_rewind(d->s, keep);
    d->n_hist = keep;
    uint64_t t0 = util_now_ns();
    if (llm_eval(d->s, ctx + keep, n - keep, d->logits, 0, err, errlen))
        goto fail;
    if (n - keep == 1)
        d->t_tok = s_mean(d->t_tok, (double)(util_now_ns() - t0) / 1e6);
    memcpy(d->hist + keep, ctx + keep, (n - keep) * sizeof *ctx);
    d->n_hist = n;
    for (uint32_t i = 0; i < k; i++) {
        /* sampled: from q under the request's chain, the context and drafts so far its
         * penalty window (d->hist holds exactly those) */
        out[i] = d->smp ? sampler_sample_dist(d->smp, d->logits, d->hist, d->n_hist, NULL, &d->q[i])
                        : s_argmax(d->logits, d->n_vocab);
        if (out[i] < 0) {
            util_errf(err, errlen, "draft", "%s", sampler_error(d->smp));
            goto fail;
        }
        if (i + 1 == k)
            break; /* the last draft is not run: the next context may not contain it */
        t0 = util_now_ns();
        if (llm_eval(d->s, out + i, 1, d->logits, 0, err, errlen))
            goto fail;
        d->t_tok = s_mean(d->t_tok, (double)(util_now_ns() - t0) / 1e6);
        d->hist[d->n_hist++] = out[i];
    }
    return (int)k;
fail:
    llm_session_reset(d->s);
    d->n_hist = 0;
    return -1;
}

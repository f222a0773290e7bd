/* engine.c — a request run on one session: prefill in batches, a token at a time after, stop
 * strings held back across tokens, timings and digests. text/ */
#include "text/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t inside the engine: no allocation per request */
#include <xxhash.h>

#include "base/util.h"

struct engine {
    llm_model *m;
    const tokenizer *t;
    llm_session *s;
    uint32_t n_ctx, n_batch, n_vocab;
    int32_t *hist;                /* the ids in the KV cache, in order (n_hist of them) */
    uint32_t n_hist;
    float *logits;                /* n_vocab: the last position's */
    float *masked;                /* n_vocab: the logits with a grammar's refusals at -inf */
    double *itl, *itl_sorted;     /* n_ctx each */
    uint32_t n_itl;
    char *pend;                   /* decoded text not yet released (a stop string may start) */
    size_t pend_len, pend_cap;
    tokenizer_decoder dec;
    XXH3_state_t ids_h, logits_h;
    int nthreads;
    /* speculation: the drafter, the last verification's rows of logits (row i: after its
     * token i), its tokens (the sampled one, then the drafts), how many drafts it carried and
     * how many of them were accepted so far */
    draft *d;                     /* kept across requests asking for the same */
    draft *use;                   /* this request's: d, or NULL when it asks for none */
    float *rows;
    int32_t vtok[DRAFT_K_MAX + 1];
    uint32_t spec_n, spec_i;
    double pass_ms, draft_ms;     /* the last verification's pass, and its drafting */
    uint32_t n_passes_req;        /* passes of this request after its prefill */
    int ahead;                    /* this request's drafter drafts ahead during passes */
    int sampled;                  /* this request's drafts are drawn from the draft model's q:
                                   * a drafted position's token is sampler_sample_spec's */
};

engine *engine_new(llm_model *m, const tokenizer *t, uint32_t n_ctx, uint32_t n_batch,
                   int nthreads, char *err, size_t errlen)
{
    engine *e = calloc(1, sizeof *e);
    if (!e) {
        util_errf(err, errlen, "engine", "out of memory");
        return NULL;
    }
    e->m = m;
    e->t = t;
    e->n_vocab = llm_model_arch(m)->hp.n_vocab;
    if (tokenizer_n_vocab(t) < 1 || (uint32_t)tokenizer_n_vocab(t) > e->n_vocab) {
        /* The tokenizer may be shorter than the head (padded vocabularies), never longer: an
         * id it produces must have a row in token_embd. */
        util_errf(err, errlen, llm_model_gguf(m)->path,
                  "the tokenizer has %d tokens but token_embd only %u rows", tokenizer_n_vocab(t), e->n_vocab);
        goto err;
    }
    if (!(e->s = llm_session_new(m, n_ctx, n_batch, err, errlen)))
        goto err;
    llm_session_set_threads(e->s, nthreads);
    e->nthreads = nthreads;
    e->n_ctx = n_ctx;
    e->n_batch = n_batch;
    /* The longest piece bounds what one token adds to the held text and to the decoder's
     * buffer; sizing both for it here is what keeps the token loop free of allocation. */
    size_t maxpiece = 0;
    for (int32_t id = 0; id < tokenizer_n_vocab(t); id++) {
        size_t pl = 0;
        tokenizer_piece(t, id, 0, &pl);
        maxpiece = pl > maxpiece ? pl : maxpiece;
    }
    e->pend_cap = ENGINE_MAX_STOP_LEN + maxpiece + 8;
    tokenizer_decoder_init(&e->dec, t, 0);
    e->dec.cap = maxpiece + 8;
    e->hist = malloc((size_t)n_ctx * sizeof *e->hist);
    e->logits = malloc((size_t)e->n_vocab * sizeof *e->logits);
    e->masked = malloc((size_t)e->n_vocab * sizeof *e->masked);
    e->itl = malloc((size_t)n_ctx * sizeof *e->itl);
    e->itl_sorted = malloc((size_t)n_ctx * sizeof *e->itl_sorted);
    e->pend = malloc(e->pend_cap);
    e->dec.buf = malloc(e->dec.cap);
    if (!e->hist || !e->logits || !e->masked || !e->itl || !e->itl_sorted || !e->pend || !e->dec.buf) {
        util_errf(err, errlen, "engine", "out of memory for a context of %u", n_ctx);
        goto err;
    }
    return e;
err:
    engine_free(&e);
    return NULL;
}

void engine_free(engine **ep)
{
    if (!ep || !*ep)
        return;
    engine *e = *ep;
    llm_session_free(&e->s);
    draft_free(&e->d);
    free(e->rows);
    tokenizer_decoder_free(&e->dec);
    free(e->hist);
    free(e->logits);
    free(e->masked);
    free(e->itl);
    free(e->itl_sorted);
    free(e->pend);
    free(e);
    *ep = NULL;
}

uint32_t engine_n_ctx(const engine *e)
{
    return e->n_ctx;
}

llm_session *engine_session(engine *e)
{
    return e->s;
}

void engine_reset(engine *e)
{
    llm_session_reset(e->s);
    e->n_hist = 0;
}

uint32_t engine_cached(const engine *e, const int32_t **ids)
{
    if (ids)
        *ids = e->hist;
    return e->n_hist;
}

uint32_t engine_reusable(const engine *e, const int32_t *prompt, uint32_t n)
{
    uint32_t keep = 0;
    while (keep < e->n_hist && keep < n && e->hist[keep] == prompt[keep])
        keep++;
    return keep == n && keep ? keep - 1 : keep;
}

const double *engine_itl_ms(const engine *e)
{
    return e->itl;
}

const char *engine_finish_name(engine_finish f)
{
    static const char *const names[] = { "none", "stop", "length", "eog", "cancelled", "error" };
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "?";
}

static int s_check(const engine *e, const engine_request *q, char *err, size_t errlen)
{
    const char *path = llm_model_gguf(e->m)->path;
    if (!q->prompt || q->n_prompt == 0) {
        util_errf(err, errlen, path, "an empty prompt (at least one token, e.g. BOS)");
        return -1;
    }
    if (q->max_tokens == 0) {
        util_errf(err, errlen, "max_tokens", "must be at least 1");
        return -1;
    }
    if ((uint64_t)q->n_prompt + q->max_tokens > e->n_ctx) {
        util_errf(err, errlen, path,
                  "the prompt's %u tokens + max_tokens %u = %llu positions exceed the context "
                  "of %u (ask for a larger context or fewer tokens)", q->n_prompt,
              q->max_tokens, (unsigned long long)q->n_prompt + q->max_tokens, e->n_ctx);
        return -1;
    }
    for (uint32_t i = 0; i < q->n_prompt; i++)
        if (q->prompt[i] < 0 || (uint32_t)q->prompt[i] >= e->n_vocab) {
            util_errf(err, errlen, path, "prompt token %u: id %d outside the vocabulary (0..%u)",
                      i, q->prompt[i], e->n_vocab - 1);
            return -1;
        }
    if (q->n_stop > ENGINE_MAX_STOP || (q->n_stop && !q->stop)) {
        util_errf(err, errlen, "stop", "%u strings: at most %d", q->n_stop, ENGINE_MAX_STOP);
        return -1;
    }
    for (uint32_t i = 0; i < q->n_stop; i++) {
        size_t l = q->stop[i] ? strlen(q->stop[i]) : 0;
        if (l == 0 || l > ENGINE_MAX_STOP_LEN) {
            util_errf(err, errlen, "stop", "string %u: %zu bytes, must be 1..%d", i, l,
                  ENGINE_MAX_STOP_LEN);
            return -1;
        }
    }
    for (uint32_t i = 0; q->force && i < q->max_tokens; i++)
        if (q->force[i] < 0 || (uint32_t)q->force[i] >= e->n_vocab) {
            util_errf(err, errlen, path, "forced token %u: id %d outside the vocabulary (0..%u)",
                      i, q->force[i], e->n_vocab - 1);
            return -1;
        }
    if (q->top_logprobs > SAMPLER_TOP_MAX) {
        util_errf(err, errlen, "top_logprobs", "%u: at most %d", q->top_logprobs, SAMPLER_TOP_MAX);
        return -1;
    }
    return 0;
}

/* Where the earliest complete stop string starts in the held text, or -1. */
static long s_stop_at(const engine *e, const engine_request *q)
{
    long best = -1;
    for (uint32_t i = 0; i < q->n_stop; i++) {
        const char *hit = memmem(e->pend, e->pend_len, q->stop[i], strlen(q->stop[i]));
        if (hit && (best < 0 || hit - e->pend < best))
            best = hit - e->pend;
    }
    return best;
}

/* Bytes at the end of the held text that begin some stop string: they must wait. */
static size_t s_hold(const engine *e, const engine_request *q)
{
    size_t hold = 0;
    for (uint32_t i = 0; i < q->n_stop; i++) {
        size_t sl = strlen(q->stop[i]);
        size_t k = sl - 1 < e->pend_len ? sl - 1 : e->pend_len;
        for (; k > hold; k--)
            if (!memcmp(e->pend + e->pend_len - k, q->stop[i], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

static int s_cancelled(const engine_request *q)
{
    return q->cancel && atomic_load(q->cancel);
}

static void s_finish_stats(engine *e, engine_stats *st, uint64_t t_first, uint64_t t_last)
{
    st->gen_ms = st->n_gen ? (double)(t_last - t_first) / 1e6 : 0;
    st->prompt_tok_s = st->prompt_ms > 0 ? st->n_prompt_eval / (st->prompt_ms / 1e3) : NAN;
    st->gen_tok_s = st->n_gen > 1 && st->gen_ms > 0 ? (st->n_gen - 1) / (st->gen_ms / 1e3) : NAN;
    memcpy(e->itl_sorted, e->itl, e->n_itl * sizeof *e->itl);
    util_sort_doubles(e->itl_sorted, e->n_itl);
    st->itl_ms_p50 = util_percentile(e->itl_sorted, e->n_itl, 50);
    st->itl_ms_p95 = util_percentile(e->itl_sorted, e->n_itl, 95);
    st->itl_ms_p99 = util_percentile(e->itl_sorted, e->n_itl, 99);
    st->ids_digest = XXH3_64bits_digest(&e->ids_h);
    st->logits_digest = XXH3_64bits_digest(&e->logits_h);
}

/* The prompt into the cache: the part not already there, n_batch positions per pass, the head
 * only after the last (earlier batches' logits are never read). */
static int s_prefill(engine *e, const engine_request *q, engine_stats *st, char *err,
                     size_t errlen)
{
    /* The last prompt token must be run to get logits (engine_reusable leaves it out). A
     * chat's re-tokenized history often differs from the ids generated (the tokenizer's split
     * of the reply text is not the model's), so the cache is cut back to the common prefix
     * rather than thrown away. */
    uint32_t keep = q->no_cache ? 0 : engine_reusable(e, q->prompt, q->n_prompt);
    /* at most what the session still holds: the resident arm's rebuild after a loss drops an
     * idle session's caches (llm_layers_hook.cached). Asked here, not in engine_reusable: a
     * server picks slots with that under its own lock, which must never wait on the swarm. */
    uint32_t held = llm_session_pos(e->s);
    keep = keep < held ? keep : held;
    llm_session_rewind(e->s, keep);
    keep = llm_session_pos(e->s); /* less when a sliding window no longer holds keep's */
    e->n_hist = keep;
    st->n_prompt_eval = q->n_prompt - keep;
    st->n_cached = keep;
    /* positions per call: the batch, or a pipelined prefill's span (llm_session_span) */
    uint32_t span = llm_session_span(e->s);
    for (uint32_t i = keep; i < q->n_prompt; i += span) {
        uint32_t nb = q->n_prompt - i < span ? q->n_prompt - i : span;
        if (s_cancelled(q))
            return 1;
        if (llm_eval(e->s, q->prompt + i, nb, i + nb == q->n_prompt ? e->logits : NULL, 0, err,
                     errlen)) {
            engine_reset(e);
            return -1;
        }
        memcpy(e->hist + i, q->prompt + i, nb * sizeof *e->hist);
        e->n_hist = i + nb;
    }
    return 0;
}

/* The grammar's word on the token just drawn (*id): kept if allowed, else drawn again from
 * the masked logits; then the grammar advances over it. -1 when nothing is allowed. */
static int s_constrain(engine *e, const engine_request *q, sampler_t *smp, uint32_t g,
                       int32_t *id, sampler_step_info *info, engine_stats *st)
{
    uint64_t t0 = util_now_ns();
    uint32_t budget = q->max_tokens - g;
    int rc = 0;
    if (!grammar_allows(q->grammar, *id, budget)) {
        memcpy(e->masked, e->logits, (size_t)e->n_vocab * sizeof *e->masked);
        if (grammar_mask(q->grammar, e->masked, e->n_vocab, budget) == 0) {
            rc = -1;
            goto out;
        }
        st->n_masked++;
        info->n_top = q->logprobs ? q->top_logprobs : 0;
        *id = sampler_sample(smp, e->masked, e->hist, e->n_hist, q->logprobs ? info : NULL);
        if (*id < 0)
            goto out;
    }
    if (grammar_accept_token(q->grammar, *id))
        rc = -1;
out:
    st->grammar_ms += (double)(util_now_ns() - t0) / 1e6;
    return rc;
}

/* Report token tok (or the held tail when tok->id is -1); 1 when the callback says stop. */
static int s_report(const engine_request *q, const engine_token *tok)
{
    return q->on_token && q->on_token(q->user, tok) != 0;
}

/* The drafter the request asks for: the engine's own when it is the same, else a new one
 * (the draft model's vocabulary checked against the target's). */
static int s_draft_setup(engine *e, const engine_request *q, char *err, size_t errlen)
{
    e->spec_n = e->spec_i = e->n_passes_req = 0;
    e->use = NULL;
    e->sampled = 0;
    if (!q->draft)
        return 0;
    /* sampled drafts when the request samples from a draft model; a grammar's token is drawn,
     * refused and drawn again, not one distribution the rule could weigh, so its drafts stay
     * the draft model's argmax (a point mass: still the exact rule) */
    e->sampled = q->draft->model && !q->draft->greedy && q->sampling.temperature > 0 &&
                 !q->grammar && !q->force;
    /* ahead only where the pass leaves the cores idle: its layers run on other machines */
    e->ahead = !e->sampled && (q->draft->overlap == DRAFT_OVERLAP_ON ||
               (q->draft->overlap == DRAFT_OVERLAP_AUTO && llm_model_arm(e->m) == LLM_ARM_RESIDENT));
    if (e->d && draft_same(e->d, q->draft)) {
        draft_restart(e->d);
        e->use = e->d;
        return draft_sampling(e->use, e->sampled ? &q->sampling : NULL, err, errlen);
    }
    draft_free(&e->d);
    if (q->draft->model && draft_check_vocab(e->m, q->draft->model, err, errlen))
        return -1;
    if (!e->rows &&
        !(e->rows = malloc((size_t)(DRAFT_K_MAX + 1) * e->n_vocab * sizeof *e->rows))) {
        util_errf(err, errlen, "engine", "out of memory for the verification's logits");
        return -1;
    }
    if (!(e->use = e->d = draft_new(q->draft, e->n_ctx, e->nthreads, err, errlen)))
        return -1;
    return draft_sampling(e->use, e->sampled ? &q->sampling : NULL, err, errlen);
}

/* Token g: the forced one (req.force), the rule's when a sampled draft waits at this position
 * (accept it with min(1, p/q), else a draw from max(0, p - q)), else the sampler's draw. */
static int32_t s_draw(engine *e, const engine_request *q, sampler_t *smp, uint32_t g,
                      sampler_step_info *info)
{
    sampler_step_info *pi = q->logprobs ? info : NULL;
    info->n_top = q->logprobs ? q->top_logprobs : 0;
    if (q->force) {
        info->n_top = 0;
        info->logprob = 0;
        return q->force[g];
    }
    if (e->sampled && e->spec_i < e->spec_n)
        return sampler_sample_spec(smp, e->logits, e->hist, e->n_hist, draft_dist(e->use, e->spec_i),
                                   e->vtok[1 + e->spec_i], pi);
    return sampler_sample(smp, e->logits, e->hist, e->n_hist, pi);
}

/* The logits after id (sampled as token g, not the last): the next row of the verification
 * when id is the draft there (no pass), else a pass over id and a fresh draft, one act of
 * 1 + k positions with every row's logits. The cache then holds hist, id and the drafts; a
 * rejected draft's positions are dropped at the next call (or the request's end). */
static int s_advance(engine *e, const engine_request *q, int32_t id, uint32_t g,
                     engine_stats *st, char *err, size_t errlen)
{
    if (e->spec_i < e->spec_n && e->vtok[1 + e->spec_i] == id) {
        e->spec_i++;
        st->n_accepted++;
        e->hist[e->n_hist++] = id;
        memcpy(e->logits, e->rows + (size_t)e->spec_i * e->n_vocab, e->n_vocab * sizeof(float));
        return 0;
    }
    /* the drafter's time is what this waits for it: a draft made ahead during the last pass
     * costs only what was left of that work (draft_update joins it) */
    uint64_t t0 = util_now_ns();
    if (e->use && e->n_passes_req) {
        draft_update(e->use, e->spec_n, e->spec_i, e->pass_ms, e->draft_ms);
        if (e->spec_n)
            llm_session_rewind(e->s, e->n_hist);
    }
    e->spec_n = e->spec_i = 0;
    e->vtok[0] = id;
    if (e->use) {
        /* drafts only for tokens within max_tokens: row j of this pass draws token g + 1 + j */
        uint32_t k = draft_k(e->use), left = q->max_tokens - g - 2;
        k = k < left ? k : left;
        e->hist[e->n_hist] = id; /* the context the drafter continues (not yet in the cache) */
        int nd = draft_propose(e->use, e->hist, e->n_hist + 1, k, e->vtok + 1, err, errlen);
        e->draft_ms = (double)(util_now_ns() - t0) / 1e6;
        st->draft_ms += e->draft_ms;
        if (nd < 0)
            return -1;
        e->spec_n = (uint32_t)nd;
        st->n_drafted += e->spec_n;
        /* while the pass runs: the drafter continues as if every draft is accepted (the
         * context, id, the drafts), up to as many tokens as the rule may ask for next */
        if (e->ahead && e->spec_n) {
            memcpy(e->hist + e->n_hist + 1, e->vtok + 1, e->spec_n * sizeof *e->hist);
            uint32_t ka = e->spec_n + 1 < DRAFT_K_MAX ? e->spec_n + 1 : DRAFT_K_MAX;
            if (draft_ahead(e->use, e->hist, e->n_hist + 1 + e->spec_n, ka, err, errlen))
                return -1;
        }
    }
    st->n_passes++;
    e->n_passes_req++;
    uint64_t t1 = util_now_ns();
    if (llm_eval(e->s, e->vtok, 1 + e->spec_n, e->spec_n ? e->rows : e->logits, e->spec_n > 0,
                 err, errlen))
        return -1;
    e->pass_ms = (double)(util_now_ns() - t1) / 1e6;
    if (e->spec_n)
        memcpy(e->logits, e->rows, e->n_vocab * sizeof(float));
    e->hist[e->n_hist++] = id;
    return 0;
}

int engine_generate(engine *e, const engine_request *q, engine_stats *st, char *err,
                    size_t errlen)
{
    memset(st, 0, sizeof *st);
    st->finish = ENGINE_FINISH_ERROR;
    st->n_prompt = q->n_prompt;
    st->itl_ms_p50 = st->itl_ms_p95 = st->itl_ms_p99 = NAN;
    if (s_check(e, q, err, errlen) || s_draft_setup(e, q, err, errlen))
        return -1;
    sampler_t *smp = sampler_new(&q->sampling, e->n_vocab, err, errlen);
    if (!smp)
        return -1;
    uint64_t t0 = util_now_ns(), t_first = 0, t_prev = 0;
    /* a batched pass (llm_model_batching) waits for the sessions in a request */
    llm_session_active(e->s, 1);
    XXH3_64bits_reset(&e->ids_h);
    XXH3_64bits_reset(&e->logits_h);
    e->n_itl = 0;
    e->pend_len = 0;
    e->dec.n_held = 0;
    e->dec.first = 0; /* the text continues the prompt: a piece keeps its leading space */
    int rc = s_prefill(e, q, st, err, errlen);
    st->prompt_ms = (double)(util_now_ns() - t0) / 1e6;
    if (rc) {
        llm_session_active(e->s, 0);
        st->finish = rc > 0 ? ENGINE_FINISH_CANCELLED : ENGINE_FINISH_ERROR;
        sampler_destroy(&smp);
        return rc > 0 ? 0 : -1;
    }
    sampler_step_info info;
    engine_finish fin = ENGINE_FINISH_NONE;
    for (uint32_t g = 0; fin == ENGINE_FINISH_NONE; g++) {
        int32_t id = s_draw(e, q, smp, g, &info);
        if (id >= 0 && q->grammar && s_constrain(e, q, smp, g, &id, &info, st)) {
            util_errf(err, errlen, "grammar", "token %u: the grammar allows no token", g);
            fin = ENGINE_FINISH_ERROR;
            break;
        }
        if (id < 0) {
            util_errf(err, errlen, "sampler", "token %u: %s", g, sampler_error(smp));
            fin = ENGINE_FINISH_ERROR;
            break;
        }
        uint64_t now = util_now_ns();
        if (g == 0) {
            st->ttft_ms = (double)(now - t0) / 1e6;
            t_first = now;
        } else {
            e->itl[e->n_itl++] = (double)(now - t_prev) / 1e6;
        }
        t_prev = now;
        st->n_gen++;
        XXH3_64bits_update(&e->ids_h, &id, sizeof id);
        XXH3_64bits_update(&e->logits_h, e->logits, (size_t)e->n_vocab * sizeof(float));
        engine_token tok = { .id = id, .index = g, .text = "", .logits = e->logits };
        if (q->logprobs) {
            tok.logprob = info.logprob;
            tok.n_top = info.n_top;
            tok.top = info.top;
        }
        if (!q->ignore_eog && tokenizer_is_eog(e->t, id)) {
            tok.is_eog = 1;
            fin = s_report(q, &tok) ? ENGINE_FINISH_CANCELLED : ENGINE_FINISH_EOG;
            break;
        }
        size_t pl = 0;
        const char *p = tokenizer_decoder_push(&e->dec, id, &pl, err, errlen);
        if (!p) {
            fin = ENGINE_FINISH_ERROR;
            break;
        }
        memcpy(e->pend + e->pend_len, p, pl);
        e->pend_len += pl;
        long at = s_stop_at(e, q);
        size_t out = at >= 0 ? (size_t)at : e->pend_len - s_hold(e, q);
        tok.text = e->pend;
        tok.len = out;
        int stop = s_report(q, &tok);
        memmove(e->pend, e->pend + out, e->pend_len - out);
        e->pend_len -= out;
        if (stop)
            fin = ENGINE_FINISH_CANCELLED;
        else if (at >= 0)
            fin = ENGINE_FINISH_STOP;
        else if (g + 1 == q->max_tokens)
            fin = ENGINE_FINISH_LENGTH;
        else if (s_cancelled(q))
            fin = ENGINE_FINISH_CANCELLED;
        if (fin != ENGINE_FINISH_NONE)
            break;
        /* The token just sampled is run only when another follows: the cache then holds
         * exactly hist[0..n_hist). */
        if (s_advance(e, q, id, g, st, err, errlen)) {
            fin = ENGINE_FINISH_ERROR;
            engine_reset(e);
            break;
        }
    }
    if (e->spec_n && fin != ENGINE_FINISH_ERROR)
        llm_session_rewind(e->s, e->n_hist); /* drafts never drawn leave the cache */
    if (e->use) { /* nothing runs on the drafter between requests */
        draft_wait(e->use);
        st->n_ahead_hits = draft_ahead_hits(e->use);
    }
    e->spec_n = e->spec_i = 0;
    llm_session_active(e->s, 0);
    if (fin == ENGINE_FINISH_LENGTH || fin == ENGINE_FINISH_EOG) {
        /* Generation ended with text still held for a stop string that never came (or a
         * truncated UTF-8 sequence): it is the model's output, so it is released. */
        size_t fl = 0;
        const char *f = tokenizer_decoder_flush(&e->dec, &fl);
        if (e->pend_len + fl <= e->pend_cap) {
            memcpy(e->pend + e->pend_len, f, fl);
            e->pend_len += fl;
        }
        engine_token tail = { .id = -1, .index = st->n_gen, .text = e->pend,
                              .len = e->pend_len };
        if (e->pend_len && s_report(q, &tail))
            fin = ENGINE_FINISH_CANCELLED;
        e->pend_len = 0;
    }
    st->finish = fin;
    s_finish_stats(e, st, t_first, t_prev);
    sampler_destroy(&smp);
    return fin == ENGINE_FINISH_ERROR ? -1 : 0;
}

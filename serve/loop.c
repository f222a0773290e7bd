/* loop.c — the generation loop a slot runs for one job: prefill, then sample, decode, hold back
 * what could become a stop string, emit. serve/
 *
 * STOPGAP, to be swapped for the generation engine: a colleague's engine (prompt tokens +
 * sampling options + max_tokens + stop strings + a per-token callback that can cancel) was not
 * in main when this was written, and there must be one generation loop in the project, not
 * two. This file is the one place that knows how tokens are produced; sched.c calls only
 * loop_run, and everything it emits goes through the job_* and api_* calls below, so the swap
 * is: loop_run builds an engine request from job->req and forwards the engine's per-token
 * callback to s_release.
 */
#include <stdlib.h>
#include <string.h>

#include "serve/serve_int.h"

/* Text released to the client: streamed as a chunk, or kept for the whole response. */
static int s_release(serve_job *job, const char *p, size_t n, json_t *lp)
{
    if (job->req.stream) {
        if (n == 0 && !lp)
            return 0;
        return job_emit_sse(job, api_chunk(job, p, n, lp, NULL));
    }
    if (lp)
        json_array_append_new(job->lp, lp);
    if (job->text_len + n + 1 > job->text_cap) {
        size_t cap = job->text_cap ? job->text_cap * 2 : 256;
        while (cap < job->text_len + n + 1)
            cap *= 2;
        char *t = realloc(job->text, cap);
        if (!t)
            return -1;
        job->text = t;
        job->text_cap = cap;
    }
    memcpy(job->text + job->text_len, p, n);
    job->text_len += n;
    job->text[job->text_len] = 0;
    return 0;
}

/* Where a stop string starts in hold (-1: none), and how many trailing bytes of hold could
 * still begin one (*keep): those are held until the next token decides. */
static long s_stop_scan(const serve_req *r, const char *hold, size_t n, size_t *keep)
{
    long at = -1;
    *keep = 0;
    for (uint32_t i = 0; i < r->n_stop; i++) {
        const char *s = r->stop[i];
        size_t sl = strlen(s);
        const char *f = sl <= n ? memmem(hold, n, s, sl) : NULL;
        if (f && (at < 0 || f - hold < at))
            at = f - hold;
        for (size_t k = sl - 1 < n ? sl - 1 : n; k > *keep; k--)
            if (!memcmp(hold + n - k, s, k)) {
                *keep = k;
                break;
            }
    }
    return at;
}

int loop_run(serve *srv, llm_session *sess, serve_job *job, uint32_t n_batch)
{
    serve_req *r = &job->req;
    uint32_t nv = (uint32_t)tokenizer_n_vocab(srv->tok);
    float *logits = malloc((size_t)nv * sizeof *logits);
    int32_t *hist = malloc(((size_t)r->n_prompt + r->max_tokens) * sizeof *hist);
    char *hold = NULL;
    size_t hold_len = 0, hold_cap = 0;
    tokenizer_decoder dec;
    tokenizer_decoder_init(&dec, srv->tok, 0);
    sampler_t *smp = NULL;
    job->finish = FINISH_ERROR;
    if (!logits || !hist) {
        snprintf(job->err, sizeof job->err, "out of memory");
        goto out;
    }
    smp = sampler_new(&r->so, nv, job->err, sizeof job->err);
    if (!smp)
        goto out;
    if (r->stream && job_emit_sse(job, api_chunk(job, "", 0, NULL, NULL)))
        goto out;
    memcpy(hist, r->prompt, (size_t)r->n_prompt * sizeof *hist);
    /* Prefill in batches; a client gone while its prompt runs costs at most one batch more. */
    for (uint32_t i = 0; i < r->n_prompt; i += n_batch) {
        if (atomic_load(&job->cancel)) {
            job->finish = FINISH_CANCELLED;
            goto out;
        }
        uint32_t n = r->n_prompt - i < n_batch ? r->n_prompt - i : n_batch;
        int last = i + n == r->n_prompt;
        if (llm_eval(sess, r->prompt + i, n, last ? logits : NULL, 0, job->err, sizeof job->err))
            goto out;
    }
    for (uint32_t k = 0;; k++) {
        sampler_step_info info = { .n_top = r->top_logprobs };
        int32_t id = sampler_sample(smp, logits, hist, r->n_prompt + k, &info);
        if (id < 0) {
            snprintf(job->err, sizeof job->err, "sampler: %s", sampler_error(smp));
            goto out;
        }
        double t = serve_now();
        if (k == 0) {
            job->t_first = t;
            metrics_ttft(srv->metrics, t - job->t_recv);
        } else {
            metrics_itl(srv->metrics, t - job->t_last);
        }
        job->t_last = t;
        hist[r->n_prompt + k] = id;
        job->n_gen = k + 1;
        json_t *lp = r->logprobs ? api_logprob(srv, &info, id, 1) : NULL;
        if (tokenizer_is_eog(srv->tok, id)) {
            job->finish = FINISH_EOG;
            if (lp && s_release(job, "", 0, lp))
                goto out;
            break;
        }
        size_t pl = 0;
        const char *p = tokenizer_decoder_push(&dec, id, &pl, job->err, sizeof job->err);
        if (!p) {
            json_decref(lp);
            goto out;
        }
        if (hold_len + pl > hold_cap) {
            hold_cap = (hold_len + pl) * 2 + 64;
            char *h = realloc(hold, hold_cap);
            if (!h) {
                json_decref(lp);
                goto out;
            }
            hold = h;
        }
        memcpy(hold + hold_len, p, pl);
        hold_len += pl;
        size_t keep = 0;
        long at = s_stop_scan(r, hold, hold_len, &keep);
        size_t give = at >= 0 ? (size_t)at : hold_len - keep;
        if (s_release(job, hold, give, lp))
            goto out;
        if (at >= 0) {
            job->finish = FINISH_STOP;
            hold_len = 0;
            break;
        }
        memmove(hold, hold + give, hold_len - give);
        hold_len -= give;
        if (atomic_load(&job->cancel)) {
            job->finish = FINISH_CANCELLED;
            goto out;
        }
        if (k + 1 == r->max_tokens) {
            job->finish = FINISH_LENGTH;
            break;
        }
        if (llm_eval(sess, &id, 1, logits, 0, job->err, sizeof job->err))
            goto out;
    }
    /* Whatever is held was not a stop string after all (or a truncated UTF-8 sequence). */
    if (job->finish != FINISH_STOP) {
        size_t fl = 0;
        const char *f = tokenizer_decoder_flush(&dec, &fl);
        if (s_release(job, hold, hold_len, NULL) || s_release(job, f, fl, NULL))
            job->finish = FINISH_ERROR;
    }
out:
    tokenizer_decoder_free(&dec);
    sampler_destroy(&smp);
    free(hold);
    free(hist);
    free(logits);
    return job->finish == FINISH_ERROR ? -1 : 0;
}

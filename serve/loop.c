/* loop.c — one job on one slot's engine: the request as an engine_request, each token the
 * engine reports turned into a stream chunk (or kept for the whole response). serve/
 *
 * Generation itself (prefill, sampling, stop strings held back across tokens, end of
 * generation, cancellation) is text/engine.c's: this file only translates. The client's hang-up
 * reaches the engine two ways: job->cancel is its cancel flag (read between prefill batches and
 * tokens), and the token callback returns "stop" once it is set.
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

static int s_on_token(void *user, const engine_token *t)
{
    serve_job *job = user;
    serve *srv = job->srv;
    json_t *lp = NULL;
    if (t->id >= 0) {
        double now = serve_now();
        if (t->index == 0) {
            job->t_first = now;
            metrics_ttft(srv->metrics, now - job->t_recv);
        } else {
            metrics_itl(srv->metrics, now - job->t_last);
        }
        job->t_last = now;
        job->n_gen = t->index + 1;
        if (job->req.logprobs) {
            sampler_step_info info = { .n_top = t->n_top, .logprob = t->logprob };
            memcpy(info.top, t->top, t->n_top * sizeof *t->top);
            lp = api_logprob(srv, &info, t->id, 1);
        }
    }
    if (s_release(job, t->text, t->len, lp))
        return 1;
    return atomic_load(&job->cancel) != 0;
}

int loop_run(serve *srv, engine *e, serve_job *job)
{
    (void)srv;
    serve_req *r = &job->req;
    job->finish = FINISH_ERROR;
    if (r->stream && job_emit_sse(job, api_chunk(job, "", 0, NULL, NULL)))
        return -1;
    engine_request q = {
        .prompt = r->prompt, .n_prompt = r->n_prompt, .max_tokens = r->max_tokens,
        .sampling = r->so, .stop = (const char *const *)r->stop, .n_stop = r->n_stop,
        .logprobs = r->logprobs, .top_logprobs = r->top_logprobs, .on_token = s_on_token,
        .user = job, .cancel = &job->cancel, .no_cache = r->no_cache,
    };
    engine_stats st;
    int rc = engine_generate(e, &q, &st, job->err, sizeof job->err);
    job->n_cached = st.n_cached;
    job->ids_digest = st.ids_digest;
    job->logits_digest = st.logits_digest;
    if (rc)
        return -1;
    switch (st.finish) {
    case ENGINE_FINISH_STOP: job->finish = FINISH_STOP; break;
    case ENGINE_FINISH_LENGTH: job->finish = FINISH_LENGTH; break;
    case ENGINE_FINISH_EOG: job->finish = FINISH_EOG; break;
    case ENGINE_FINISH_CANCELLED: job->finish = FINISH_CANCELLED; break;
    default: job->finish = FINISH_ERROR; break;
    }
    return job->finish == FINISH_ERROR ? -1 : 0;
}

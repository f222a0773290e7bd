/* loop.c — one job on one slot's engine: the request as an engine_request, each token the
 * engine reports turned into a stream chunk (or kept for the whole response). serve/
 *
 * A request of n choices runs them in turn on the one engine (loop_run below).
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
    serve_choice *c = &job->ch[job->cur];
    if (job->req.stream) {
        int t = tools_release(job, p, n);
        if (t) {
            json_decref(lp);
            return t < 0 ? -1 : 0;
        }
        if (n == 0 && !lp)
            return 0;
        return job_emit_sse(job, api_chunk(job, p, n, lp, NULL));
    }
    if (lp) {
        if (!c->lp)
            c->lp = json_array();
        json_array_append_new(c->lp, lp);
    }
    return job_keep(c, p, n);
}

static int s_on_token(void *user, const engine_token *t)
{
    serve_job *job = user;
    serve *srv = job->srv;
    json_t *lp = NULL;
    if (t->id >= 0) {
        double now = serve_now();
        if (job->n_gen == 0) {
            job->t_first = now;
            metrics_ttft(srv->metrics, now - job->t_recv);
        } else {
            metrics_itl(srv->metrics, now - job->t_last);
        }
        job->t_last = now;
        job->n_gen++;
        job->ch[job->cur].n_gen = t->index + 1;
        atomic_store(&job->decoded, job->n_gen);
        atomic_store(&job->cached, job->req.n_prompt + t->index + 1);
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

static serve_finish s_finish_of(engine_finish f)
{
    switch (f) {
    case ENGINE_FINISH_STOP: return FINISH_STOP;
    case ENGINE_FINISH_LENGTH: return FINISH_LENGTH;
    case ENGINE_FINISH_EOG: return FINISH_EOG;
    case ENGINE_FINISH_CANCELLED: return FINISH_CANCELLED;
    default: return FINISH_ERROR;
    }
}

/* The request's n choices one after another on this slot's engine: choice i draws with seed
 * + i, and every choice after the first finds the prompt in the cache (the engine keeps the
 * longest common prefix), so only the first pays for the prefill. A stream sends each
 * choice's chunks (its index on each) and its finish chunk before the next begins. */
int loop_run(serve *srv, engine *e, serve_job *job)
{
    serve_req *r = &job->req;
    job->finish = FINISH_ERROR;
    for (job->cur = 0; job->cur < r->n; job->cur++) {
        serve_choice *c = &job->ch[job->cur];
        /* a failure in any choice fails the request (a whole reply is then a 500, not a 200
         * carrying the choices before it) */
        c->finish = job->finish = FINISH_ERROR;
        if (r->stream && job_emit_sse(job, api_chunk(job, "", 0, NULL, NULL)))
            return -1;
        engine_request q = {
            .prompt = r->prompt, .n_prompt = r->n_prompt, .max_tokens = r->max_tokens,
            .sampling = r->so, .stop = (const char *const *)r->stop, .n_stop = r->n_stop,
            .ignore_eog = r->ignore_eos, .logprobs = r->logprobs,
            .top_logprobs = r->top_logprobs, .on_token = s_on_token, .user = job,
            .cancel = &job->cancel,
            /* "cache_prompt": false runs the prompt once; the choices after the first reuse
             * what the first computed for this request */
            .no_cache = r->no_cache && job->cur == 0,
            .draft = r->spec ? &r->dopt : NULL,
        };
        q.sampling.seed = r->so.seed + job->cur;
        /* each choice its own grammar state: constrained from the start of its own reply */
        grammar_state *gs = tools_state(srv, job, job->err, sizeof job->err);
        if (r->tl.g && !gs)
            return -1;
        q.grammar = gs;
        engine_stats st;
        int rc = engine_generate(e, &q, &st, job->err, sizeof job->err);
        grammar_state_free(&gs);
        job->grammar_ms += st.grammar_ms;
        job->n_masked += st.n_masked;
        job->n_drafted += st.n_drafted;
        job->n_accepted += st.n_accepted;
        job->n_passes += st.n_passes;
        job->draft_ms += st.draft_ms;
        if (job->cur == 0) { /* the request's prompt cache use and digests: its first choice */
            job->n_cached = st.n_cached;
            job->ids_digest = st.ids_digest;
            job->logits_digest = st.logits_digest;
        }
        if (rc)
            return -1;
        c->finish = job->finish = s_finish_of(st.finish);
        if (job->finish == FINISH_CANCELLED || job->finish == FINISH_ERROR)
            return job->finish == FINISH_ERROR ? -1 : 0;
        tools_finish(job);
        if (r->stream) {
            tools_stream_end(job);
            if (job_emit_sse(job, api_chunk(job, "", 0, NULL, tools_finish_name(job, job->cur))))
                return -1;
        }
    }
    job->cur = r->n - 1;
    return 0;
}

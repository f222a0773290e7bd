/* metrics.c — the server's counters and histograms, in Prometheus' text format. serve/
 *
 * Requests by endpoint and status, tokens in and out, the aggregate generation rate over the
 * last complete seconds, time to first token and inter-token latency histograms, sessions
 * active and queued. One mutex: a few updates per generated token, far below the cost of a
 * token (milliseconds).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_int.h"

/* Status codes the server sends; anything else would be counted as "other". */
static const unsigned s_codes[] = { 200, 204, 400, 401, 404, 405, 408, 413, 429, 500, 503 };
#define N_CODES (sizeof s_codes / sizeof s_codes[0])
static const char *const s_ep_names[EP_COUNT] = {
    [EP_MODELS] = "/v1/models", [EP_CHAT] = "/v1/chat/completions",
    [EP_COMPLETIONS] = "/v1/completions", [EP_HEALTH] = "/health", [EP_METRICS] = "/metrics",
    [EP_PAGE] = "/", [EP_TOKENIZE] = "/tokenize", [EP_DETOKENIZE] = "/detokenize",
    [EP_APPLY_TEMPLATE] = "/apply-template", [EP_PROPS] = "/props", [EP_SLOTS] = "/slots",
    [EP_OTHER] = "other" };
/* Seconds: 1 ms to 10 s covers a token on a small model up to a long prefill. */
static const double s_bounds[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                   1, 2.5, 5, 10 };
#define N_BOUNDS (sizeof s_bounds / sizeof s_bounds[0])
#define RATE_WINDOW 10            /* seconds averaged by the tokens/s gauge */

typedef struct {
    uint64_t b[N_BOUNDS + 1];     /* per bucket (not cumulative); last: above every bound */
    uint64_t n;
    double sum;
} s_hist;

struct serve_metrics {
    pthread_mutex_t mu;
    uint64_t req[EP_COUNT][N_CODES + 1];
    uint64_t tok_in, tok_out;
    uint64_t tok_cached;          /* prompt tokens taken from slots' caches */
    uint64_t passes, pass_rows;   /* continuous batching: forward passes, positions in them */
    uint64_t pass_cuts;           /* prompt chunks cut while others decoded */
    s_hist ttft, itl;
    uint64_t sec_tok[RATE_WINDOW + 2]; /* tokens generated in second t, ring by t mod size */
    long long sec_of[RATE_WINDOW + 2];
};

serve_metrics *metrics_new(void)
{
    serve_metrics *m = calloc(1, sizeof *m);
    if (m)
        pthread_mutex_init(&m->mu, NULL);
    return m;
}

void metrics_free(serve_metrics **m)
{
    if (!*m)
        return;
    pthread_mutex_destroy(&(*m)->mu);
    free(*m);
    *m = NULL;
}

void metrics_request(serve_metrics *m, serve_endpoint ep, unsigned status)
{
    size_t c = N_CODES;
    for (size_t i = 0; i < N_CODES; i++)
        if (s_codes[i] == status)
            c = i;
    pthread_mutex_lock(&m->mu);
    m->req[ep][c]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_tokens(serve_metrics *m, uint32_t in, uint32_t out)
{
    pthread_mutex_lock(&m->mu);
    m->tok_in += in;
    m->tok_out += out;
    pthread_mutex_unlock(&m->mu);
}

void metrics_cached(serve_metrics *m, uint32_t cached)
{
    pthread_mutex_lock(&m->mu);
    m->tok_cached += cached;
    pthread_mutex_unlock(&m->mu);
}

void metrics_batch(serve_metrics *m, uint64_t passes, uint64_t rows, uint64_t cuts)
{
    pthread_mutex_lock(&m->mu);
    m->passes = passes;
    m->pass_rows = rows;
    m->pass_cuts = cuts;
    pthread_mutex_unlock(&m->mu);
}

static void s_observe(s_hist *h, double v)
{
    size_t i = 0;
    while (i < N_BOUNDS && v > s_bounds[i])
        i++;
    h->b[i]++;
    h->n++;
    h->sum += v;
}

/* Every generated token passes here (first or not): the rate ring counts it. */
static void s_tick(serve_metrics *m)
{
    long long sec = (long long)serve_now();
    size_t k = (size_t)(sec % (RATE_WINDOW + 2));
    if (m->sec_of[k] != sec) {
        m->sec_of[k] = sec;
        m->sec_tok[k] = 0;
    }
    m->sec_tok[k]++;
}

void metrics_ttft(serve_metrics *m, double s)
{
    pthread_mutex_lock(&m->mu);
    s_observe(&m->ttft, s);
    s_tick(m);
    pthread_mutex_unlock(&m->mu);
}

void metrics_itl(serve_metrics *m, double s)
{
    pthread_mutex_lock(&m->mu);
    s_observe(&m->itl, s);
    s_tick(m);
    pthread_mutex_unlock(&m->mu);
}

static void s_hist_out(FILE *f, const char *name, const char *help, const s_hist *h)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i < N_BOUNDS; i++) {
        cum += h->b[i];
        fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, s_bounds[i], (unsigned long long)cum);
    }
    fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
            (unsigned long long)h->n, name, h->sum, name, (unsigned long long)h->n);
}

char *metrics_render(serve_metrics *m, uint32_t active, uint32_t queued, uint32_t slots,
                     const char *arm, int state, llm_swarm *swarm)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    pthread_mutex_lock(&m->mu);
    fprintf(f, "# HELP swarm_serve_requests_total HTTP requests by endpoint and status.\n"
               "# TYPE swarm_serve_requests_total counter\n");
    for (int e = 0; e < EP_COUNT; e++)
        for (size_t c = 0; c <= N_CODES; c++)
            if (m->req[e][c]) {
                char code[8];
                snprintf(code, sizeof code, "%u", c < N_CODES ? s_codes[c] : 0);
                fprintf(f, "swarm_serve_requests_total{endpoint=\"%s\",status=\"%s\"} %llu\n",
                        s_ep_names[e], c < N_CODES ? code : "other",
                        (unsigned long long)m->req[e][c]);
            }
    fprintf(f, "# HELP swarm_serve_prompt_tokens_total Prompt tokens of finished requests.\n"
               "# TYPE swarm_serve_prompt_tokens_total counter\n"
               "swarm_serve_prompt_tokens_total %llu\n"
               "# HELP swarm_serve_prompt_tokens_cached_total Of those, taken from a slot's "
               "prompt cache (not evaluated).\n"
               "# TYPE swarm_serve_prompt_tokens_cached_total counter\n"
               "swarm_serve_prompt_tokens_cached_total %llu\n"
               "# HELP swarm_serve_generated_tokens_total Tokens generated.\n"
               "# TYPE swarm_serve_generated_tokens_total counter\n"
               "swarm_serve_generated_tokens_total %llu\n",
            (unsigned long long)m->tok_in, (unsigned long long)m->tok_cached,
            (unsigned long long)m->tok_out);
    /* The last RATE_WINDOW complete seconds (the current one is partial). */
    long long now = (long long)serve_now();
    uint64_t n = 0;
    for (size_t k = 0; k < RATE_WINDOW + 2; k++)
        if (m->sec_of[k] < now && m->sec_of[k] >= now - RATE_WINDOW)
            n += m->sec_tok[k];
    fprintf(f, "# HELP swarm_serve_tokens_per_second Tokens generated per second, all sessions, "
               "over the last %d s.\n# TYPE swarm_serve_tokens_per_second gauge\n"
               "swarm_serve_tokens_per_second %.3f\n", RATE_WINDOW,
            (double)n / RATE_WINDOW);
    s_hist_out(f, "swarm_serve_ttft_seconds", "Request received to first token sampled.",
               &m->ttft);
    s_hist_out(f, "swarm_serve_itl_seconds", "Between consecutive tokens of one request.",
               &m->itl);
    if (m->passes)
        fprintf(f, "# HELP swarm_serve_batch_passes_total Forward passes run (continuous "
                   "batching: every active session's next positions in one pass).\n"
                   "# TYPE swarm_serve_batch_passes_total counter\n"
                   "swarm_serve_batch_passes_total %llu\n"
                   "# HELP swarm_serve_batch_rows_total Positions those passes carried.\n"
                   "# TYPE swarm_serve_batch_rows_total counter\n"
                   "swarm_serve_batch_rows_total %llu\n"
                   "# HELP swarm_serve_batch_cut_chunks_total Prompt chunks cut below the "
                   "batch while other sessions decoded.\n"
                   "# TYPE swarm_serve_batch_cut_chunks_total counter\n"
                   "swarm_serve_batch_cut_chunks_total %llu\n",
                (unsigned long long)m->passes, (unsigned long long)m->pass_rows,
                (unsigned long long)m->pass_cuts);
    pthread_mutex_unlock(&m->mu);
    fprintf(f, "# HELP swarm_serve_sessions_active Requests generating now.\n"
               "# TYPE swarm_serve_sessions_active gauge\nswarm_serve_sessions_active %u\n"
               "# HELP swarm_serve_sessions_queued Requests waiting for a slot.\n"
               "# TYPE swarm_serve_sessions_queued gauge\nswarm_serve_sessions_queued %u\n"
               "# HELP swarm_serve_slots Sessions that can generate at once.\n"
               "# TYPE swarm_serve_slots gauge\nswarm_serve_slots %u\n"
               "# HELP swarm_serve_up 0 loading, 1 serving, 2 draining.\n"
               "# TYPE swarm_serve_up gauge\nswarm_serve_up{arm=\"%s\"} %d\n",
            active, queued, slots, arm, state);
    /* Per-worker state and failovers belong to the resident arm: a single-process arm has
     * no workers, so none are listed. */
    if (swarm) {
        llm_worker_status ws[8];
        uint32_t fo = 0, nw = llm_swarm_status(swarm, ws, 8, &fo);
        fprintf(f, "# HELP swarm_serve_worker_up 1 while the worker's process serves its layers, "
                   "0 while they run in the coordinator.\n# TYPE swarm_serve_worker_up gauge\n");
        for (uint32_t i = 0; i < nw && i < 8; i++)
            fprintf(f, "swarm_serve_worker_up{worker=\"%s\",layers=\"%u-%u\"} %d\n", ws[i].id,
                    ws[i].first, ws[i].last, ws[i].live);
        fprintf(f, "# HELP swarm_serve_respawns_total Fresh processes started (or hellos to a "
                   "listed worker) after a loss, by worker.\n"
                   "# TYPE swarm_serve_respawns_total counter\n");
        for (uint32_t i = 0; i < nw && i < 8; i++)
            fprintf(f, "swarm_serve_respawns_total{worker=\"%s\"} %u\n", ws[i].id,
                    ws[i].respawns);
        fprintf(f, "# HELP swarm_serve_respawn_failures_total Of those, the ones that did not "
                   "start or join (each tried again after a backoff).\n"
                   "# TYPE swarm_serve_respawn_failures_total counter\n");
        for (uint32_t i = 0; i < nw && i < 8; i++)
            fprintf(f, "swarm_serve_respawn_failures_total{worker=\"%s\"} %u\n", ws[i].id,
                    ws[i].respawn_fails);
        fprintf(f, "# HELP swarm_serve_failovers_total Workers lost since start (their layers "
                   "moved to the coordinator, every live session's caches rebuilt).\n"
                   "# TYPE swarm_serve_failovers_total counter\nswarm_serve_failovers_total %u\n",
                fo);
    }
    fclose(f);
    return buf;
}

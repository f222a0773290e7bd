/* serve_inproc.c — swarm serve's load submitted in-process: the same request parser, scheduler,
 * slots and generation loop, with no HTTP in between, so an HTTP figure has its in-process
 * twin. tests/tools/ (used by experiments/serve_bench.sh)
 *
 * usage: serve_inproc MODEL PARALLEL CLIENTS SECONDS MAX_TOKENS PROMPT
 * CLIENTS threads each submit one streamed completion at a time (greedy) until SECONDS have
 * passed; prints one JSON line: requests, tokens, aggregate tokens/s, time to first token
 * (request parsed to first token sampled, ms) median and p90.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve/serve_int.h"

static serve s_srv;
static const char *s_body;
static double s_end;
static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER;
static double *s_ttft;
static size_t s_n, s_cap;
static uint64_t s_tokens;

static void *s_client(void *arg)
{
    (void)arg;
    char err[256];
    while (serve_now() < s_end) {
        serve_job *job = job_new(&s_srv, err, sizeof err);
        int status = 0;
        json_t *ej = NULL;
        if (!job || api_parse(&s_srv, EP_COMPLETIONS, s_body, strlen(s_body), &job->req, &status,
                              &ej)) {
            fprintf(stderr, "serve_inproc: request refused (%d)\n", status);
            json_decref(ej);
            job_unref(job);
            exit(1);
        }
        while (sched_submit(s_srv.sched, job))
            usleep(1000); /* full: the HTTP server would answer 429 */
        for (;;) {
            pthread_mutex_lock(&job->mu);
            job->out_off = job->out_len; /* the bytes a client would read */
            int done = job->done;
            pthread_mutex_unlock(&job->mu);
            if (done)
                break;
            struct pollfd p = { .fd = job->efd, .events = POLLIN };
            poll(&p, 1, -1);
            uint64_t v;
            if (read(job->efd, &v, sizeof v) < 0) {
                /* EAGAIN: re-check */
            }
        }
        pthread_mutex_lock(&s_mu);
        if (s_n == s_cap) {
            s_cap = s_cap ? s_cap * 2 : 256;
            s_ttft = realloc(s_ttft, s_cap * sizeof *s_ttft);
        }
        s_ttft[s_n++] = (job->t_first - job->t_recv) * 1e3;
        s_tokens += job->n_gen;
        pthread_mutex_unlock(&s_mu);
        job_unref(job);
    }
    return NULL;
}

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: serve_inproc MODEL PARALLEL CLIENTS SECONDS MAX_TOKENS PROMPT\n");
        return 2;
    }
    char err[512];
    int k = atoi(argv[2]), nc = atoi(argv[3]);
    double secs = atof(argv[4]);
    s_srv.model_path = argv[1];
    snprintf(s_srv.model_id, sizeof s_srv.model_id, "inproc");
    s_srv.arm = "reference";
    s_srv.n_slots = (uint32_t)k;
    s_srv.n_queue = (uint32_t)nc;
    s_srv.nthreads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (!(s_srv.model = llm_model_open(argv[1], err, sizeof err)) ||
        !(s_srv.tok = tokenizer_open(llm_model_gguf(s_srv.model), err, sizeof err))) {
        fprintf(stderr, "serve_inproc: %s\n", err);
        return 1;
    }
    s_srv.n_vocab = (uint32_t)tokenizer_n_vocab(s_srv.tok);
    uint32_t train = llm_model_arch(s_srv.model)->hp.n_ctx_train;
    s_srv.n_ctx = train < 2048 ? train : 2048;
    s_srv.metrics = metrics_new();
    if (!(s_srv.sched = sched_new(&s_srv, s_srv.n_slots, s_srv.n_queue, s_srv.n_ctx,
                                  s_srv.nthreads, err, sizeof err))) {
        fprintf(stderr, "serve_inproc: %s\n", err);
        return 1;
    }
    json_t *b = json_pack("{s:s,s:i,s:i,s:b}", "prompt", argv[6], "max_tokens", atoi(argv[5]),
                          "temperature", 0, "stream", 1);
    char *body = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    s_body = body;
    pthread_t th[256];
    if (nc < 1 || nc > 256)
        return 2;
    double t0 = serve_now();
    s_end = t0 + secs;
    for (int i = 0; i < nc; i++)
        pthread_create(&th[i], NULL, s_client, NULL);
    for (int i = 0; i < nc; i++)
        pthread_join(th[i], NULL);
    double wall = serve_now() - t0;
    qsort(s_ttft, s_n, sizeof *s_ttft, s_cmp);
    printf("{\"parallel\":%d,\"clients\":%d,\"requests\":%zu,\"tokens\":%llu,\"wall_s\":%.3f,"
           "\"tok_s\":%.1f,\"ttft_ms_p50\":%.3f,\"ttft_ms_p90\":%.3f}\n", k, nc, s_n,
           (unsigned long long)s_tokens, wall, (double)s_tokens / wall,
           s_n ? s_ttft[s_n / 2] : 0.0, s_n ? s_ttft[s_n * 9 / 10] : 0.0);
    sched_free(&s_srv.sched);
    metrics_free(&s_srv.metrics);
    tokenizer_free(&s_srv.tok);
    llm_model_free(&s_srv.model);
    free(body);
    free(s_ttft);
    return 0;
}

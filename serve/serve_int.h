/* serve_int.h — what the parts of `swarm serve` share: the server, a request, a job, the
 * scheduler, the metrics. serve/
 *
 * Threads. libmicrohttpd runs one thread per connection (MHD_USE_THREAD_PER_CONNECTION): a
 * connection's thread parses and validates its request, tokenizes it, queues a job, then sits
 * in the response's reader callback waiting for the job's output (an eventfd) or the client's
 * hang-up (POLLRDHUP on its socket), whichever comes first. K generation threads ("slots")
 * each own one llm session (its KV cache) and take jobs from one bounded FIFO. Evals of
 * several sessions run at once: llm.c keeps all per-session state in the session, the model
 * is read-only after opening, and quant's thread pool serialises every call (the products and
 * llama.c's attention both go through it) with one mutex (quant/matvec.c, s_call_mu): the
 * pool's work of different sessions takes turns while the rest (norms, sampling, decoding,
 * HTTP) overlaps. On the reference and SSD arms the slots' steps are batched instead
 * (llm_model_batching, turned on by sched_new): one pass carries every slot's next positions
 * and reads each weight once for all of them.
 */
#ifndef SWARM_SERVE_INT_H
#define SWARM_SERVE_INT_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/llm.h"
#include "dist/llm_swarm.h"
#include "text/engine.h"
#include "text/sample.h"
#include "text/tokenizer.h"

#define SERVE_MAX_STOP 4          /* OpenAI's limit on stop strings */
#define SERVE_MAX_STOP_LEN 256    /* bytes of one stop string */
#define SERVE_ID_LEN 48

/* Endpoints as the metrics count them (a fixed set: a client cannot grow the label space). */
typedef enum {
    EP_MODELS, EP_CHAT, EP_COMPLETIONS, EP_HEALTH, EP_METRICS, EP_PAGE, EP_OTHER, EP_COUNT
} serve_endpoint;

/* A validated request: everything generation needs. */
typedef struct {
    int chat;                     /* 1: /v1/chat/completions, 0: /v1/completions */
    int stream, include_usage;
    uint32_t max_tokens;          /* >= 1; n_prompt + max_tokens <= n_ctx */
    sampler_opts so;
    char *stop[SERVE_MAX_STOP];   /* owned */
    uint32_t n_stop;
    int logprobs;                 /* 1: report the chosen token's logprob */
    uint32_t top_logprobs;        /* 0..SAMPLER_TOP_MAX (completions: 0..5) */
    int32_t *prompt;              /* owned (tokenizer_encode's), BOS included */
    uint32_t n_prompt;
    int no_cache;                 /* "cache_prompt": false: reuse no cached prefix */
} serve_req;

typedef enum { FINISH_NONE, FINISH_STOP, FINISH_LENGTH, FINISH_EOG, FINISH_CANCELLED,
               FINISH_ERROR } serve_finish;

/* One request in flight. Two owners: the connection (until libmicrohttpd frees the response)
 * and the scheduler (until its slot is done with it); the last to let go frees it. */
typedef struct serve_job {
    struct serve_job *next;       /* the queue */
    struct serve *srv;
    serve_req req;
    char id[SERVE_ID_LEN];        /* "chatcmpl-..." or "cmpl-..." */
    long long created;            /* unix seconds */
    int sock;                     /* the client's socket, polled for hang-up (not owned) */
    int efd;                      /* eventfd: output appended or job done */
    atomic_int cancel;            /* set by the connection when the client has gone */
    pthread_mutex_t mu;           /* guards out*, done, refs */
    char *out;                    /* bytes for the client not yet taken by the reader */
    size_t out_len, out_cap, out_off;
    int done;                     /* no more output will come */
    int refs;
    /* filled by the slot, read by the slot only until done */
    serve_finish finish;
    uint32_t n_gen;
    uint32_t n_cached;            /* prompt tokens taken from the slot's cache */
    uint64_t ids_digest, logits_digest; /* engine_stats' (to compare runs bit for bit) */
    double t_recv, t_start, t_first, t_last; /* monotonic seconds: received, slot took it, tokens */
    char *text;                   /* whole text (non-streamed responses) */
    size_t text_len, text_cap;
    json_t *lp;                   /* logprobs collected (non-streamed), NULL if not asked */
    char err[256];
} serve_job;

typedef struct serve serve;

/* ---- sched.c: slots, queue, jobs ---- */
typedef struct serve_sched serve_sched;
serve_sched *sched_new(serve *srv, uint32_t n_slots, uint32_t n_queue, uint32_t n_ctx,
                       int nthreads, char *err, size_t errlen);
/* Cancel everything, join the slots, free the sessions. */
void sched_free(serve_sched **s);
/* Admit job (the scheduler takes a reference): 0, or -1 when slots and queue are full. */
int sched_submit(serve_sched *s, serve_job *job);
/* Bytes of every slot's KV cache together. */
uint64_t sched_kv_bytes(serve_sched *s);
/* A queued job whose client has gone leaves the queue at once (a running one stops at its next
 * token through job->cancel): a dead client never holds a queue place. */
void sched_withdraw(serve_sched *s, serve_job *job);
void sched_counts(serve_sched *s, uint32_t *active, uint32_t *queued);
/* Mean seconds a finished job held its slot (1 before any finished): for Retry-After. */
double sched_mean_job_s(serve_sched *s);
/* Cancel every job (queued ones finish at once as cancelled). */
void sched_cancel_all(serve_sched *s);
/* The prompt cache: positions slot (0..n_slots-1) holds in its KV cache, as of the end of its
 * last job (0 for a slot out of range or never used). */
uint32_t sched_slot_cached(serve_sched *s, uint32_t slot);

serve_job *job_new(serve *srv, char *err, size_t errlen);
void job_unref(serve_job *job);
/* Append bytes for the client and wake the reader. -1 on out of memory. */
int job_emit(serve_job *job, const char *p, size_t n);
/* Append "data: JSON\n\n" (steals j). */
int job_emit_sse(serve_job *job, json_t *j);
void job_set_done(serve_job *job);

/* ---- loop.c: one job on one slot's engine (0, or -1 with job->err) ---- */
int loop_run(serve *srv, engine *e, serve_job *job);

/* ---- api.c: requests in, responses out ---- */
/* Parse and validate body for endpoint ep into r. 0, or -1 with *status (400/404/...), an
 * OpenAI error json in *errj (caller frees). */
int api_parse(serve *srv, serve_endpoint ep, const char *body, size_t len, serve_req *r,
              int *status, json_t **errj);
void api_req_free(serve_req *r);
json_t *api_error(const char *message, const char *type, const char *param, const char *code);
json_t *api_models(serve *srv);
/* A text/ token piece as a JSON string, invalid UTF-8 replaced by U+FFFD. */
json_t *api_string(const char *p, size_t n);
/* Stream chunks: the opening (role), a piece of text with its token's logprobs (may be NULL),
 * the finish, and usage. */
json_t *api_chunk(serve_job *job, const char *text, size_t n, json_t *lp, const char *finish);
json_t *api_usage_chunk(serve_job *job);
/* The whole response of a non-streamed request. */
json_t *api_response(serve_job *job);
/* One token's logprobs entry (chat format, or completions' parts). */
json_t *api_logprob(serve *srv, const sampler_step_info *info, int32_t id, int top);
const char *api_finish_name(serve_finish f);

/* ---- metrics.c ---- */
typedef struct serve_metrics serve_metrics;
serve_metrics *metrics_new(void);
void metrics_free(serve_metrics **m);
void metrics_request(serve_metrics *m, serve_endpoint ep, unsigned status);
void metrics_tokens(serve_metrics *m, uint32_t in, uint32_t out);
/* Prompt tokens a finished request took from a slot's cache (not evaluated). */
void metrics_cached(serve_metrics *m, uint32_t cached);
/* Continuous batching's counters as of now (llm_model_batch_counts), for the next render. */
void metrics_batch(serve_metrics *m, uint64_t passes, uint64_t rows);
void metrics_ttft(serve_metrics *m, double s);
void metrics_itl(serve_metrics *m, double s);
/* Prometheus text exposition (malloc'd). */
char *metrics_render(serve_metrics *m, uint32_t active, uint32_t queued, uint32_t slots,
                     const char *arm, int state, llm_swarm *swarm);

/* ---- page.c: the chat page, built into the binary ---- */
const char *page_html(size_t *len);

/* ---- serve.c: the server's shared state ---- */
typedef enum { STATE_LOADING = 0, STATE_SERVING = 1, STATE_DRAINING = 2 } serve_state;

struct serve {
    /* options */
    const char *model_path;
    char model_id[128];           /* file name without .gguf: /v1/models' id */
    const char *arm;
    uint32_t n_ctx, n_slots, n_queue;
    int nthreads;
    size_t max_body;              /* bytes; larger bodies get 413 */
    const char *api_key;          /* NULL: no auth */
    char chat_template[64];       /* "" if none: chat requests then get a clear 400 */
    /* resources */
    llm_model *model;
    llm_swarm *swarm;             /* the resident arm's workers (NULL otherwise) */
    tokenizer *tok;
    serve_sched *sched;
    serve_metrics *metrics;
    atomic_int state;
};

double serve_now(void);           /* CLOCK_MONOTONIC seconds */
/* One HTTP daemon over srv (http.c). */
struct MHD_Daemon;
struct MHD_Daemon *http_start(serve *srv, const char *host, unsigned port, unsigned timeout_s,
                              unsigned *bound_port, char *err, size_t errlen);

#endif

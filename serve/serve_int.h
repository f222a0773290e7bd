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
 * HTTP) overlaps. On every arm the slots' steps are batched instead
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
#include "dist/llm_cli.h"
#include "dist/llm_swarm.h"
#include "text/engine.h"
#include "text/grammar.h"
#include "text/sample.h"
#include "text/tokenizer.h"
#include "text/tool_call.h"

#define SERVE_MAX_STOP 4          /* OpenAI's limit on stop strings */
#define SERVE_MAX_STOP_LEN 256    /* bytes of one stop string */
#define SERVE_ID_LEN 48
#define SERVE_MAX_N 16            /* choices per request (n): each is generated in turn */
#define SERVE_MAX_BIAS 1024       /* logit_bias entries (OpenAI allows 300) */
#define SERVE_MAX_ALIAS 8         /* --alias names */
#define SERVE_MAX_CORS 8          /* --cors origins */

/* Endpoints as the metrics count them (a fixed set: a client cannot grow the label space). */
typedef enum {
    EP_MODELS, EP_CHAT, EP_COMPLETIONS, EP_HEALTH, EP_METRICS, EP_PAGE, EP_TOKENIZE,
    EP_DETOKENIZE, EP_APPLY_TEMPLATE, EP_PROPS, EP_SLOTS, EP_OTHER, EP_COUNT
} serve_endpoint;

/* Structured output and tool calls of one request (tools.c). */
typedef struct {
    grammar *g;                   /* the constraint (owned); NULL = none */
    char *trig[GRAMMAR_MAX_TRIGGERS]; /* lazy until one of these appears (tool_choice auto,
                                     llama.cpp's grammar_lazy); owned; none = at once */
    size_t n_trig;
    tool_format fmt;              /* NONE: the reply is text; else it is parsed for calls */
    int forced;                   /* tool_choice required or a function: nothing but calls */
} serve_tools;

/* A validated request: everything generation needs. */
typedef struct {
    int chat;                     /* 1: /v1/chat/completions, 0: /v1/completions */
    int stream, include_usage;
    uint32_t max_tokens;          /* >= 1; n_prompt + max_tokens <= n_ctx */
    int max_set;                  /* max_tokens was asked (else: what the context leaves) */
    uint32_t n;                   /* choices, 1..SERVE_MAX_N; choice i draws with seed + i */
    sampler_opts so;              /* so.bias points into bias */
    sampler_bias *bias;           /* owned, so.n_bias entries */
    int ignore_eos;               /* llama.cpp's: generate past end-of-generation tokens */
    char model[128];              /* the model name echoed in the response */
    char *stop[SERVE_MAX_STOP];   /* owned */
    uint32_t n_stop;
    int logprobs;                 /* 1: report the chosen token's logprob */
    uint32_t top_logprobs;        /* 0..SAMPLER_TOP_MAX (completions: 0..5) */
    int32_t *prompt;              /* owned (tokenizer_encode's), BOS included */
    uint32_t n_prompt;
    serve_tools tl;
    int no_cache;                 /* "cache_prompt": false: reuse no cached prefix */
    int spec;                     /* speculative decoding with dopt ("speculative", or the
                                     server's --draft / --draft-lookup) */
    draft_opts dopt;
} serve_req;

typedef enum { FINISH_NONE, FINISH_STOP, FINISH_LENGTH, FINISH_EOG, FINISH_CANCELLED,
               FINISH_ERROR } serve_finish;

/* One choice of a request: what the slot made of it. */
typedef struct {
    serve_finish finish;
    uint32_t n_gen;
    char *text;                   /* whole text (non-streamed responses) */
    size_t text_len, text_cap;
    json_t *lp;                   /* logprobs collected (non-streamed), NULL if not asked */
    /* tools.c: a streamed tool reply is kept in text too (held, parsed at the end) */
    json_t *calls;                /* tool calls parsed from this choice's reply; NULL: none */
    char *content;                /* the reply's text outside them */
    size_t streamed;              /* bytes of text streamed as content so far */
} serve_choice;

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
    atomic_int shutdown;          /* cancelled because the server's --grace ran out */
    atomic_uint decoded, cached;  /* for /slots while it runs: tokens generated (every choice),
                                     positions in its slot's cache (prompt + this choice's) */
    /* filled by the slot, read by the slot only until done */
    serve_finish finish;          /* the request's: the last choice's, or error / cancelled */
    uint32_t n_gen;               /* tokens of every choice together */
    uint32_t cur;                 /* the choice being generated */
    serve_choice ch[SERVE_MAX_N];
    uint32_t n_cached;            /* prompt tokens taken from the slot's cache (first choice) */
    uint64_t ids_digest, logits_digest; /* engine_stats' (to compare runs bit for bit; the
                                         * first choice's) */
    double t_recv, t_start, t_first, t_last; /* monotonic seconds: received, slot took it, tokens */
    double grammar_ms;            /* time the grammar took, every choice together */
    uint32_t n_masked;            /* tokens drawn again from a masked vocabulary (every choice) */
    uint32_t n_drafted, n_accepted, n_passes; /* speculation, every choice together */
    double draft_ms;
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
/* Cancel every job (queued ones finish at once as cancelled); shutdown: because the server is
 * stopping (a stream then ends with an error event and [DONE], a whole response is a 503). */
void sched_cancel_all(serve_sched *s, int shutdown);
/* One slot's state for /slots. */
typedef struct {
    int busy;
    char id[SERVE_ID_LEN];        /* its job's, "" when idle */
    uint32_t n_prompt, n_decoded, n_cached, n_ctx;
    sampler_opts so;
    uint32_t max_tokens;
} sched_slot_info;
/* Slot i's state (i < n_slots). */
void sched_slot(serve_sched *s, uint32_t i, sched_slot_info *out);
/* The prompt cache: positions slot (0..n_slots-1) holds in its KV cache, as of the end of its
 * last job (0 for a slot out of range or never used). */
uint32_t sched_slot_cached(serve_sched *s, uint32_t slot);

serve_job *job_new(serve *srv, char *err, size_t errlen);
void job_unref(serve_job *job);
/* Append bytes for the client and wake the reader. -1 on out of memory. */
int job_emit(serve_job *job, const char *p, size_t n);
/* Append n bytes to choice c's whole text (kept NUL-terminated). -1 on out of memory. */
int job_keep(serve_choice *c, const char *p, size_t n);
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
/* Render a chat request's "messages" with the server's template (the generation prompt
 * appended). *out is malloc'd. 0, or -1 with *status and *errj as api_parse. */
int api_render_chat(serve *srv, json_t *msgs, char **out, size_t *len, int *status,
                    json_t **errj);
/* Generation settings as llama-server names them (its /props, /slots and responses). */
json_t *api_params(const sampler_opts *so, int max_tokens, int stream);
/* A text/ token piece as a JSON string, invalid UTF-8 replaced by U+FFFD. */
json_t *api_string(const char *p, size_t n);
/* Stream chunks: the opening (role), a piece of text with its token's logprobs (may be NULL),
 * the finish, and usage. */
json_t *api_chunk(serve_job *job, const char *text, size_t n, json_t *lp, const char *finish);
/* The error event a stream ends with when the server stops under it. */
json_t *api_shutdown_error(void);
json_t *api_usage_chunk(serve_job *job);
/* The whole response of a non-streamed request. */
json_t *api_response(serve_job *job);
/* One token's logprobs entry (chat format, or completions' parts). */
json_t *api_logprob(serve *srv, const sampler_step_info *info, int32_t id, int top);
const char *api_finish_name(serve_finish f);

/* ---- tools.c: response_format, grammar, json_schema, tools (hooks in api.c, loop.c, sched.c) ---- */
/* Read the request's constraint and tool fields into r->tl (400s name the field). */
int tools_parse(serve *srv, json_t *root, serve_req *r, int *status, json_t **errj);
/* The chat prompt when tools or tool history are in the request: 0 rendered into r->prompt,
 * 1 not a tool conversation (the plain path renders it), -1 with the error. */
int tools_prompt_chat(serve *srv, json_t *root, serve_req *r, int *status, json_t **errj);
/* The same text, untokenized (/apply-template): 0 with *out (malloc'd), 1, or -1. */
int tools_render_chat(serve *srv, json_t *root, char **out, int *status, json_t **errj);
void tools_req_free(serve_req *r);
/* A grammar state for one choice of the job (NULL when it has no constraint; *err on failure):
 * each choice is constrained from the start of its own reply. */
grammar_state *tools_state(serve *srv, serve_job *job, char *err, size_t errlen);
/* Streamed text of the current choice's tool reply: held while it may be a call. 1 when
 * taken, 0 when the caller streams it as usual, -1 on failure. */
int tools_release(serve_job *job, const char *p, size_t n);
/* After the current choice's generation: its reply parsed into calls / content (tool replies
 * only). */
void tools_finish(serve_job *job);
/* Stream: the current choice's held content and calls as deltas, before its finish chunk. */
void tools_stream_end(serve_job *job);
/* Choice i's non-streamed message ({role, content, tool_calls}) and finish reason. */
json_t *tools_message(serve_job *job, uint32_t i, json_t *text);
const char *tools_finish_name(serve_job *job, uint32_t i);
/* The grammar's cost in the timings object (grammar_ms, grammar_masked), when it had one. */
void tools_timings(serve_job *job, json_t *timings);

/* ---- metrics.c ---- */
typedef struct serve_metrics serve_metrics;
serve_metrics *metrics_new(void);
void metrics_free(serve_metrics **m);
void metrics_request(serve_metrics *m, serve_endpoint ep, unsigned status);
void metrics_tokens(serve_metrics *m, uint32_t in, uint32_t out);
/* Prompt tokens a finished request took from a slot's cache (not evaluated). */
void metrics_cached(serve_metrics *m, uint32_t cached);
/* Continuous batching's counters as of now (llm_model_batch_counts, llm_model_batch_cuts),
 * for the next render. */
void metrics_batch(serve_metrics *m, uint64_t passes, uint64_t rows, uint64_t cuts);
void metrics_ttft(serve_metrics *m, double s);
void metrics_itl(serve_metrics *m, double s);
/* Prometheus text exposition (malloc'd). */
char *metrics_render(serve_metrics *m, uint32_t active, uint32_t queued, uint32_t slots,
                     const char *arm, int state, llm_swarm *swarm);

/* ---- native.c: llama-server's own endpoints ---- */
/* /tokenize, /detokenize, /apply-template (POST bodies), /props, /slots: 0 with *out (the
 * response), or -1 with *status and *out an error object. */
int native_handle(serve *srv, serve_endpoint ep, const char *body, size_t len, json_t **out,
                  int *status);

/* ---- page.c: the chat page, built into the binary ---- */
const char *page_html(size_t *len);

/* ---- serve.c: the server's shared state ---- */
typedef enum { STATE_LOADING = 0, STATE_SERVING = 1, STATE_DRAINING = 2 } serve_state;

struct serve {
    /* options */
    const char *model_path;
    char model_id[128];           /* file name without .gguf: /v1/models' id */
    const char *alias[SERVE_MAX_ALIAS]; /* --alias names, also accepted as the model */
    uint32_t n_alias;
    int strict_model;             /* 1: a request naming another model is a 404 */
    const char *cors[SERVE_MAX_CORS]; /* --cors origins ("*": any) */
    uint32_t n_cors;
    int log_prompts;              /* the access log shows request bodies */
    uint32_t n_vocab;             /* the tokenizer's */
    const char *arm;
    uint32_t n_ctx, n_slots, n_queue;
    int nthreads;
    size_t max_body;              /* bytes; larger bodies get 413 */
    const char *api_key;          /* NULL: no auth */
    char chat_template[64];       /* "" if none: chat requests then get a clear 400 */
    const char *tool_system;      /* the template's default system text with tools (tools.c) */
    llm_cli_draft draft;          /* --draft (its model draft.o.model, owned), --draft-lookup,
                                   * --draft-max: the drafter requests get unless they say
                                   * otherwise (draft.o) */
    int spec_on;                  /* --draft or --draft-lookup given: speculation by default */
    /* resources */
    llm_model *model;
    llm_swarm *swarm;             /* the resident arm's workers (NULL otherwise) */
    tokenizer *tok;
    serve_sched *sched;
    serve_metrics *metrics;
    grammar_vocab *gvocab;        /* built on the first constrained request (tools.c) */
    atomic_int state;
    atomic_int n_live;            /* generation responses not yet fully sent (a drain waits) */
};

double serve_now(void);           /* CLOCK_MONOTONIC seconds */
/* One HTTP daemon over srv (http.c). */
struct MHD_Daemon;
struct MHD_Daemon *http_start(serve *srv, const char *host, unsigned port, unsigned timeout_s,
                              unsigned *bound_port, char *err, size_t errlen);

#endif

/* engine.h — text generation on one llm session: prefill in batches, then one token at a time,
 * each token reported as it is sampled, stop strings, end-of-generation tokens, timings. text/
 *
 * A request is prompt tokens + sampling options + max_tokens + stop strings + what to report;
 * engine_generate runs it to a finish reason (stop, length, eog, cancelled, error) and measures
 * time to first token, every inter-token latency, prompt and generation tokens/s, and two
 * digests (XXH3-64 of the generated ids, and of the f32 logits every token was drawn from), so
 * two runs can be compared bit for bit.
 *
 * Stop strings may span tokens: text that could still become a stop string is held back and
 * never reaches the callback once it does; what is held when generation ends any other way is
 * released in a last callback with id -1.
 *
 * No allocation per token: every buffer (logits, the ids so far, latencies, held text) is sized
 * by engine_new for the session's context. A request allocates once (its sampler's scratch).
 *
 * Threads. An engine is one conversation and belongs to one thread at a time. The model and
 * tokenizer it borrows are read-only after opening, so a server runs several engines, one per
 * connection or worker thread, over one llm_model and one tokenizer. The matrix products of all
 * sessions share quant's one thread pool, whose calls are serialised by a mutex: several
 * engines are safe at once but their products take turns (aggregate tokens/s of N sessions is
 * that of one, not N times it), unless the model batches them (llm_model_batching: the engine
 * marks its session active for the length of a request, and its llm_eval calls join shared
 * passes with the bits they have alone). To stop a request from another thread (a client gone while its
 * prompt is processed) set *req->cancel; it is read between prefill batches and tokens.
 */
#ifndef SWARM_ENGINE_H
#define SWARM_ENGINE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/llm.h"
#include "text/draft.h"
#include "text/grammar.h"
#include "text/sample.h"
#include "text/tokenizer.h"

#define ENGINE_MAX_STOP 8         /* OpenAI allows 4 stop strings; a little room beyond */
#define ENGINE_MAX_STOP_LEN 256   /* bytes of one stop string */

typedef enum {
    ENGINE_FINISH_NONE = 0,
    ENGINE_FINISH_STOP,           /* a stop string was generated (not reported) */
    ENGINE_FINISH_LENGTH,         /* max_tokens reached */
    ENGINE_FINISH_EOG,            /* an end-of-generation token (EOS, EOT, EOM) was sampled */
    ENGINE_FINISH_CANCELLED,      /* the callback returned non-zero, or *cancel was set */
    ENGINE_FINISH_ERROR,          /* a forward pass or the sampler failed (err says which) */
} engine_finish;

/* One generated token, as the callback sees it. Pointers are valid during the call only. */
typedef struct {
    int32_t id;                   /* -1: no token, the held-back text released at the end */
    uint32_t index;               /* 0 for the first generated token */
    const char *text;             /* text released now (may be empty: held, or a partial UTF-8
                                     sequence, or the stop string itself) */
    size_t len;
    int is_eog;                   /* id is an end-of-generation token (its text is empty) */
    float logprob;                /* log-softmax of the raw logits (when req->logprobs) */
    uint32_t n_top;               /* req->top_logprobs entries in top */
    const sampler_logprob *top;
    const float *logits;          /* the n_vocab logits this token was drawn from */
} engine_token;

/* Return 0 to go on, anything else to stop now (the client has gone): finish "cancelled". */
typedef int (*engine_token_fn)(void *user, const engine_token *tok);

typedef struct {
    const int32_t *prompt;        /* the whole prompt (conversation so far), BOS included */
    uint32_t n_prompt;            /* >= 1 */
    uint32_t max_tokens;          /* >= 1; n_prompt + max_tokens <= the context, or an error */
    sampler_opts sampling;
    const char *const *stop;      /* n_stop strings, each 1..ENGINE_MAX_STOP_LEN bytes */
    uint32_t n_stop;
    int ignore_eog;               /* 1: keep generating past end-of-generation tokens */
    int logprobs;                 /* 1: fill logprob (and top when top_logprobs > 0) */
    uint32_t top_logprobs;        /* 0..SAMPLER_TOP_MAX */
    engine_token_fn on_token;     /* may be NULL */
    void *user;
    const atomic_int *cancel;     /* may be NULL; non-zero = stop at the next check */
    grammar_state *grammar;       /* may be NULL: constrain every token to the grammar (at its
                                     start, or inactive if lazy; the caller resets it). The
                                     drawn token is checked first; only a refused one costs a
                                     mask of the vocabulary and a second draw from what is
                                     left, within the budget of max_tokens (text/grammar.h).
                                     logprobs are then those of the masked logits. */
    int no_cache;                 /* 1: evaluate the whole prompt, reusing nothing cached
                                   * (a server's "cache_prompt": false) */
    const draft_opts *draft;      /* may be NULL: speculative decoding with this drafter (the
                                   * engine keeps one across requests asking for the same).
                                   * Every generated token is still drawn by the sampler from
                                   * the target's logits, in order, with the same PRNG stream;
                                   * a draft is accepted when the drawn token equals it. So the
                                   * ids and logits are those of the same request without
                                   * speculation, greedy or seeded sampling alike (for a draft
                                   * that is one token, drawing from p and comparing is the
                                   * speculative-sampling rule: accept x with probability p(x),
                                   * else draw from p without x). Grammars, stop strings,
                                   * logprobs work unchanged: each is applied to the drawn
                                   * token, whose row of logits is the one it would have had.
                                   * That holds for prompt lookup, greedy requests, a grammar
                                   * and draft_opts.greedy. Otherwise, when the request samples,
                                   * the draft model draws each draft from its distribution q
                                   * (text/draft.h) and a drafted position's token follows the
                                   * speculative-sampling rule (sampler_sample_spec): the tokens
                                   * are distributed as plain generation's, each row of logits
                                   * is the one its token would have had, but the draws differ
                                   * from plain generation's for the same seed. */
    const int32_t *force;         /* may be NULL: max_tokens ids taken as tokens 0, 1, ... in
                                   * place of drawing (teacher forcing: a parity check replays
                                   * a sampled speculative run's tokens through plain passes);
                                   * logprobs are then not reported */
} engine_request;

typedef struct {
    engine_finish finish;
    uint32_t n_prompt;            /* prompt tokens of the request */
    uint32_t n_prompt_eval;       /* of those, evaluated now (the rest were cached from the last
                                     request on this engine: a common prefix) */
    uint32_t n_cached;            /* n_prompt - n_prompt_eval: positions taken from the cache */
    uint32_t n_gen;               /* tokens sampled, the end-of-generation token included */
    double prompt_ms;             /* prefill time (n_prompt_eval positions) */
    double ttft_ms;               /* request start to the first token sampled and reported */
    double gen_ms;                /* first token to last token */
    double itl_ms_p50, itl_ms_p95, itl_ms_p99; /* between consecutive tokens; NaN if n_gen < 2 */
    double prompt_tok_s;          /* n_prompt_eval / prompt_ms */
    double gen_tok_s;             /* (n_gen - 1) / gen_ms: the steady rate, 1 / mean ITL */
    uint64_t ids_digest;          /* XXH3-64 of the generated ids (int32, in order) */
    uint64_t logits_digest;       /* XXH3-64 of the f32 logits of every generated position */
    uint32_t n_masked;            /* grammar: tokens drawn again from a masked vocabulary */
    double grammar_ms;            /* grammar: time spent checking, masking and advancing */
    uint32_t n_passes;            /* target passes after the prefill (each verifies a draft) */
    uint32_t n_drafted, n_accepted; /* speculation: tokens drafted, of those accepted */
    double draft_ms;              /* speculation: the drafter's time (what generation waited
                                   * for it: drafting ahead hides the rest) */
    uint32_t n_ahead_hits;        /* speculation: passes whose drafts were made ahead, during
                                   * the pass before (draft_opts.overlap) */
} engine_stats;

typedef struct engine engine;

/* An engine over model m and tokenizer t (both borrowed, outliving it) with a session of
 * n_ctx positions processing n_batch at a time, nthreads threads. NULL with err. */
engine *engine_new(llm_model *m, const tokenizer *t, uint32_t n_ctx, uint32_t n_batch,
                   int nthreads, char *err, size_t errlen);
void engine_free(engine **e);
uint32_t engine_n_ctx(const engine *e);
llm_session *engine_session(engine *e);
/* Forget the conversation (the next request evaluates its whole prompt). */
void engine_reset(engine *e);
/* The prompt cache: the ids whose positions the session's KV cache holds now (*ids, valid
 * until the engine's next request or reset; may be NULL), how many. A server picks the slot
 * whose cache shares the longest prefix with a prompt by it; read it only while no request
 * runs on e. */
uint32_t engine_cached(const engine *e, const int32_t **ids);
/* How many leading ids of prompt (n of them) a request would take from the cache: the
 * common prefix, less the last prompt token (always run again for its logits). */
uint32_t engine_reusable(const engine *e, const int32_t *prompt, uint32_t n);
/* The last request's latencies (stats->n_gen - 1 of them, ms, in order); valid until the
 * next request. */
const double *engine_itl_ms(const engine *e);

/* Run req. The longest common prefix of the tokens in the cache and req->prompt is kept (a
 * conversation grows turn by turn; at least the last prompt token is run again; nothing with
 * req->no_cache). Positions are written by index and a pass's bits do not depend on how the
 * prompt was cut into batches (docs/design.md, "Determinism"), so the ids and logits of a
 * request served from the cache equal those of the same request on an empty one. Returns 0 when it finished with stop,
 * length, eog or cancelled (stats->finish says which), -1 with err before any work for a bad
 * request (context overflow, a bad option, an empty prompt, a token outside the vocabulary)
 * or, with stats->finish = error, when a forward pass fails midway. */
int engine_generate(engine *e, const engine_request *req, engine_stats *stats, char *err,
                    size_t errlen);

const char *engine_finish_name(engine_finish f);

#endif

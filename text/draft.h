/* draft.h — the drafter of speculative decoding: guesses the next few tokens of a context
 * cheaply, on the coordinator, for the target model to verify in one pass. text/
 *
 * Two sources:
 *   - a draft model with the target's vocabulary (a small model of the same family, or the
 *     target's own quantized copy: `swarm quantize MODEL.gguf Q4_0 DRAFT.gguf`), run on the
 *     reference arm in this process with a session of its own. It drafts its argmax token
 *     by token (a point mass), or, when the request samples, draws from its distribution
 *     (sampled drafts, below); its session keeps
 *     the longest common prefix of the last context it saw and the next one, so the accepted
 *     tokens are not run again and the rejected ones are dropped (llm_session_rewind).
 *   - prompt lookup: no model. The last n tokens of the context (n = ngram down to 1) are
 *     looked for earlier in the context (the latest match wins) and the tokens that followed
 *     that match are the draft. Free to compute; it pays where the output repeats its input
 *     (code edits, quotes, summaries, repetitive text).
 *
 * How many tokens (draft_update, after every target pass): k is the one of 0..k_max that
 * maximises the expected tokens per millisecond, (1 - a^(k+1)) / (1 - a) tokens for
 * t_pass + k (t_row + t_draft) ms, from what this request measured: a, the chance a draft
 * is accepted when the one before it was (accepted / (accepted + rejections), both decayed
 * by 0.8 a pass); t_pass, a pass of one position; t_row, each further position of a pass;
 * t_draft, the drafter's time per token drafted (a draft model's: one single-position pass
 * of it, the catch-up of what it missed left out). So over a slow link (t_pass large) a poor
 * drafter still drafts, and on one machine with a drafter that costs more than it wins (by
 * more than 10%: the times are noisy samples, and a paused drafter learns slowly) k falls to 0: plain generation, with a probe of one draft every 16 passes to see whether
 * the text turned predictable (the gap doubles after each probe that fails, up to 256). The
 * first pass of a request is plain (the baseline), the second drafts 2 (the drafter's and a
 * row's cost), and the rule decides from the third on.
 *
 * Drafting ahead (draft_ahead): while the target verifies k drafts — over a WAN mostly link
 * delay, the coordinator's cores idle — the draft model continues, on a thread of the draft's
 * own, as if all k were accepted: its guess of the token the target draws after them, then
 * the next pass's drafts. When the target did accept all k and drew that guess, the next
 * draft_propose returns those drafts at once (drafting more only if it wants more); on any
 * other outcome the work is dropped and draft_propose drafts as before (its session keeps the
 * common prefix). The drafts are the draft model's greedy tokens either way, so what the
 * target accepts, and the output, do not change; only when the drafter's time is spent does.
 * Prompt lookup costs nothing and never drafts ahead.
 *
 * Sampled drafts (draft_sampling): when a request samples, a draft model draws each draft
 * from its own distribution q (its logits through the request's sampler chain, on a sampler
 * of its own seeded from the request's seed, DRAFT_SEED_MIX) and keeps q for the target's
 * rule (sampler_sample_spec: accept with min(1, p/q), else draw from max(0, p - q)). Its
 * drafts then agree with the target's draw as often as the two distributions overlap
 * (sum min(p, q)), not only when the target's draw is the draft model's argmax. Sampled
 * drafting does not draft ahead (the guess of the target's next token would be a draw too).
 *
 * Fixed k (draft_opts.fixed): k = k_max on every pass, nothing adapted; with sampled drafts
 * the tokens then depend only on the seeds, not on this machine's timings (docs/cli.md).
 *
 * A draft is a struct per conversation (one engine): not shared between threads (its
 * drafting-ahead thread is internal: every call but draft_k waits for it first). The draft
 * model itself (llm_model) is read-only and may be shared by every engine of a server.
 */
#ifndef SWARM_DRAFT_H
#define SWARM_DRAFT_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/llm.h"
#include "text/sample.h"

#define DRAFT_K_MAX 32            /* the most tokens one verification may carry beyond its first */
#define DRAFT_K_MODEL 8           /* default k_max with a draft model */
#define DRAFT_K_LOOKUP 6          /* default k_max with prompt lookup */
#define DRAFT_NGRAM 3             /* default longest n-gram prompt lookup matches */

typedef struct {
    llm_model *model;             /* the draft model (borrowed; NULL: prompt lookup) */
    int lookup;                   /* 1: prompt lookup (no model) */
    uint32_t k_max;               /* 1..DRAFT_K_MAX; 0: the default of the source */
    uint32_t ngram;               /* lookup: the longest n-gram matched (1..8; 0: 3) */
    int overlap;                  /* a draft model drafts ahead during the target's pass:
                                   * DRAFT_OVERLAP_AUTO (0) when the target's layers run
                                   * elsewhere (the resident arm: the pass waits on links),
                                   * _ON always, _OFF never (on one machine the pass's own
                                   * compute wants the cores, and a rejection wastes the work) */
    int greedy;                   /* 1: a draft model drafts its argmax even when the request
                                   * samples (the output is then plain generation's, seed for
                                   * seed); 0: it samples (draft_sampling) */
    int fixed;                    /* 1: k = k_max every pass (no adaptation, no plain first pass) */
} draft_opts;

/* The draft model's sampler seed is the request's XOR this: another stream than the target's. */
#define DRAFT_SEED_MIX 0xd1b54a32d192ed03ull

#define DRAFT_OVERLAP_AUTO 0
#define DRAFT_OVERLAP_ON 1
#define DRAFT_OVERLAP_OFF (-1)

typedef struct draft draft;

/* 0, or -1 with err naming both files and the first difference: the draft model's
 * vocabulary (size and token strings) must be the target's, or its ids mean other words. */
int draft_check_vocab(const llm_model *target, const llm_model *dm, char *err, size_t errlen);

/* A drafter for o (exactly one of model and lookup) over contexts of up to n_ctx tokens,
 * nthreads for the draft model's products. NULL with err. */
draft *draft_new(const draft_opts *o, uint32_t n_ctx, int nthreads, char *err, size_t errlen);
void draft_free(draft **d);
/* Same source and k_max as o (an engine keeps its drafter across requests that ask for it). */
int draft_same(const draft *d, const draft_opts *o);
/* The k to ask for now (the adaptive rule above). */
uint32_t draft_k(const draft *d);
/* Start of a request: the measurements forgotten, k 0 (the first pass is the baseline). */
void draft_restart(draft *d);
/* How the next drafts are made, for a request: so NULL, the draft model's argmax; else drawn
 * from its distribution under so (seed so->seed ^ DRAFT_SEED_MIX), each draft's distribution
 * kept for draft_dist. so is borrowed until the next call (its bias array too). Prompt lookup
 * ignores it. 0, or -1 with err (a bad option, out of memory). Call after draft_restart. */
int draft_sampling(draft *d, const sampler_opts *so, char *err, size_t errlen);
/* The distribution draft j (0-based) of the last draft_propose was drawn from; NULL when the
 * drafts were not sampled. Valid until the next draft_propose. */
const sampler_dist *draft_dist(const draft *d, uint32_t j);
/* Up to k tokens likely to follow ctx (n >= 1 tokens) into out; how many (0: no guess), or
 * -1 with err (the draft model's pass failed). */
int draft_propose(draft *d, const int32_t *ctx, uint32_t n, uint32_t k, int32_t *out,
                  char *err, size_t errlen);
/* Start drafting ahead of ctx (n tokens: the context of the pass about to run, then its
 * drafts) on the drafter's thread: the draft model's next 1 + k tokens. Returns at once; 0,
 * or -1 with err (no thread). Nothing with prompt lookup. The next draft_propose uses the
 * result when its context is ctx followed by the first of those tokens. */
int draft_ahead(draft *d, const int32_t *ctx, uint32_t n, uint32_t k, char *err, size_t errlen);
/* Wait until no drafting ahead runs (the end of a request). */
void draft_wait(draft *d);
/* Passes since draft_restart whose drafts came (at least in part) from drafting ahead. */
uint32_t draft_ahead_hits(const draft *d);
/* A target pass carried `drafted` drafts (0: a plain one) and took pass_ms; `accepted` of
 * them were kept; the drafter spent draft_ms making them (the time the caller waited for
 * them: drafts made ahead cost only what was left when it asked). Adapts k. */
void draft_update(draft *d, uint32_t drafted, uint32_t accepted, double pass_ms,
                  double draft_ms);

#endif

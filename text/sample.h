/* sample.h — picks the next token from a logits vector: penalties, top-k, top-p, min-p, temperature, a seeded draw. text/
 *
 * The chain is llama.cpp's default order (common/sampling.cpp upstream), applied to the logits
 * of one position:
 *
 *   logit_bias -> penalties -> top_k -> top_p -> min_p -> temperature -> distribution
 *
 * so top_p and min_p see the temperature-1 probabilities, and temperature only reshapes what
 * survived them. temperature 0 is greedy: the largest logit after the penalties (the filters
 * always keep the largest, so they cannot change that choice). Ties between equal logits go to
 * the lowest token id everywhere (greedy, top_k's cut, the order of candidates), so a result
 * never depends on a sort's whims.
 *
 * Deterministic: one thread, a fixed order of every sum, double-precision probabilities, and
 * our own PRNG (xoshiro256** seeded through splitmix64). The same seed, logits and history give
 * the same tokens on every run and every machine with the same libm exp(). The draws are not
 * llama.cpp's (it uses std::mt19937 and std::discrete_distribution): same semantics, another
 * random stream.
 *
 * No allocation per call: the scratch (28 bytes per vocabulary entry, 4.1 MiB for a
 * 152064-token vocabulary) is sized once by sampler_new.
 *
 * Speculative sampling (sampler_sample_dist, sampler_sample_spec): a drafter draws x from its
 * own distribution q (its logits through this same chain, with its own sampler) and the
 * target's sampler accepts x with probability min(1, p(x)/q(x)), p being the target's
 * distribution after the chain, else draws from max(0, p - q) normalised (Leviathan et al.
 * 2023; Chen et al. 2023). The token is then distributed exactly as p, whatever q is
 * (tests/test_spec_sample.c checks it with a chi-square over many draws).
 */
#ifndef SWARM_SAMPLE_H
#define SWARM_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

/* OpenAI's top_logprobs goes up to 20. */
#define SAMPLER_TOP_MAX 20
/* A bias at or below this bans the token (its logit becomes -inf): OpenAI's "-100 should
 * result in a ban", made exact, as llama.cpp's server does for a bias of false. */
#define SAMPLER_BIAS_BAN (-100.0f)

/* One logit bias: added to the token's logit before anything else. */
typedef struct {
    int32_t token;
    float bias;               /* finite; <= SAMPLER_BIAS_BAN bans the token */
} sampler_bias;

typedef struct {
    float temperature;        /* 0 = greedy; > 0 divides the logits (llama.cpp default 0.8) */
    int32_t top_k;            /* keep the k largest logits; 0 = off (default 40) */
    float top_p;              /* keep the smallest prefix whose probability reaches p; (0,1], 1 = off (0.95) */
    float min_p;              /* drop tokens below min_p x the top token's probability; [0,1], 0 = off (0.05) */
    float repeat_penalty;     /* > 0; 1 = off. Tokens in the window: logit > 0 divided, <= 0 multiplied (1.0) */
    uint32_t repeat_last_n;   /* the window: the last N tokens of `recent`; 0 = off (64) */
    float frequency_penalty;  /* logit -= count x this, count in the window; [-2,2], 0 = off (OpenAI's) */
    float presence_penalty;   /* logit -= this once a token is in the window; [-2,2], 0 = off */
    uint64_t seed;            /* PRNG seed; the same seed gives the same draws */
    const sampler_bias *bias; /* n_bias entries (borrowed: must outlive the sampler); NULL = none */
    uint32_t n_bias;
} sampler_opts;

/* One (token, log-probability) pair for logprobs reporting. */
typedef struct {
    int32_t token;
    float logprob;            /* natural log */
} sampler_logprob;

typedef struct {
    uint32_t n_top;           /* in: how many top logprobs to report, 0..SAMPLER_TOP_MAX */
    float prob;               /* out: the chosen token's probability in the distribution it was
                                 drawn from (after penalties, filters, temperature; 1 when greedy) */
    float logprob;            /* out: the chosen token's log-probability under the model: the
                                 log-softmax of the logits as passed in, before any penalty */
    uint32_t n_kept;          /* out: candidates left after the filters (1 when greedy) */
    sampler_logprob top[SAMPLER_TOP_MAX]; /* out: the n_top likeliest tokens under the model
                                 (same log-softmax), descending; ties by lower id */
} sampler_step_info;

typedef struct sampler sampler_t;

/* llama.cpp's defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, no penalties
 * (repeat_penalty 1, window 64), seed 0. */
void sampler_opts_default(sampler_opts *o);

/* Checks every option (a clear error naming it, e.g. "top_p 1.5 must be in (0,1]") and sizes
 * the scratch for n_vocab tokens (1..INT32_MAX). Returns NULL and fills err on failure. The
 * caller owns the sampler; free it with sampler_destroy. */
sampler_t *sampler_new(const sampler_opts *o, uint32_t n_vocab, char *err, size_t errlen);
void sampler_destroy(sampler_t **s);

/* The next token from logits (n_vocab,), given the tokens so far (`recent`, oldest first, may
 * be NULL when n_recent is 0; only the last repeat_last_n count). info may be NULL; when given,
 * info->n_top is read and the other fields are filled. Returns the token id, or -1 on bad input
 * (a NaN or +inf logit, every logit -inf, a recent id outside the vocabulary, n_top too large):
 * sampler_error says which. Advances the PRNG by one draw unless greedy. */
int32_t sampler_sample(sampler_t *s, const float *logits, const int32_t *recent,
                       uint32_t n_recent, sampler_step_info *info);

/* One distribution over tokens: the candidates the chain kept, with their probabilities. */
typedef struct {
    int32_t *id;              /* (n,) caller's arrays with room for n_vocab */
    double *p;                /* (n,) summing to 1 */
    uint32_t n;
} sampler_dist;

/* sampler_sample that also writes the distribution it drew from (after the whole chain;
 * greedy: the one token, probability 1) into *q when q is not NULL. */
int32_t sampler_sample_dist(sampler_t *s, const float *logits, const int32_t *recent,
                            uint32_t n_recent, sampler_step_info *info, sampler_dist *q);

/* The speculative-sampling rule at one position: x was drawn from q (sampler_sample_dist of
 * the drafter's logits with the same options, its own PRNG); p is this sampler's chain over
 * logits. Accepts x with probability min(1, p(x)/q(x)), else draws from max(0, p - q)
 * normalised; returns the token (x when accepted: the residual never holds x), -1 on bad
 * input as sampler_sample. One draw of the PRNG, two on a rejection. When x is not in q
 * (no rule applies) the token is drawn from p as sampler_sample does. info as there (prob:
 * p of the token). */
int32_t sampler_sample_spec(sampler_t *s, const float *logits, const int32_t *recent,
                            uint32_t n_recent, const sampler_dist *q, int32_t x,
                            sampler_step_info *info);

/* The message of the last failed sampler_sample ("" if none). Owned by the sampler. */
const char *sampler_error(const sampler_t *s);

/* Restart the PRNG from seed (a new request with its own seed reuses the sampler). */
void sampler_reseed(sampler_t *s, uint64_t seed);

#endif

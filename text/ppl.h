/* ppl.h — perplexity as llama.cpp's perplexity tool defines it, and the KL divergence of a
 * model against a base model of the same vocabulary on the same tokens. text/
 *
 * llama.cpp's tools/perplexity/perplexity.cpp (function perplexity()): the tokens are cut into
 * n_chunk = n_tokens / n_ctx chunks of n_ctx (the tail that fills no chunk is dropped, and
 * fewer than 2 x n_ctx tokens is an error); each chunk starts a fresh cache, its first token is
 * replaced by BOS when the vocabulary adds BOS; only the second half is scored
 * (first = n_ctx / 2: the logits at positions first .. n_ctx - 2 predict the tokens after
 * them, n_ctx - 1 - first per chunk), so every scored token has at least n_ctx / 2 of context.
 * Each token's log-probability is llama.cpp's log_softmax: max subtracted, expf summed in
 * double. PPL = exp(mean NLL).
 *
 * With a base model, at the same scored positions: KL(base || model) =
 * sum_i p_base(i) (log p_base(i) - log p_model(i)) in double, and whether both put the same
 * token first (llama.cpp's "Same top p", its --kl-divergence mode, which reads the base's
 * logits from a file where we run both models side by side).
 */
#ifndef SWARM_PPL_H
#define SWARM_PPL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/llm.h"

typedef struct {
    uint32_t n_ctx, n_chunk;
    uint64_t n_scored;            /* tokens scored: n_chunk x (n_ctx - 1 - n_ctx / 2) */
    double nll_mean;              /* mean negative log-likelihood, nats */
    double ppl;                   /* exp(nll_mean) */
    double ppl_base;              /* the base model's, NaN without one */
    double kl_mean, kl_p99, kl_max; /* NaN without a base */
    double top1_agree;            /* fraction of scored positions with the same argmax */
    double ms;                    /* wall time */
} ppl_result;

/* Score tokens[0..n) with model m (and base, or NULL) at n_ctx positions per chunk, n_batch
 * per pass, nthreads threads. bos >= 0: the token each chunk starts with (the vocabulary adds
 * BOS); -1: chunks start as the text does. 0, or -1 with err (too few tokens, vocabularies of
 * different sizes, a failed pass). */
int ppl_compute(llm_model *m, llm_model *base, const int32_t *tokens, size_t n, uint32_t n_ctx,
                uint32_t n_batch, int nthreads, int32_t bos, ppl_result *r, char *err,
                size_t errlen);

/* KL(base || m) and top-1 agreement at positions from .. n-1 of one sequence tokens[0..n)
 * run through both models from an empty cache (a generation's tokens: the positions whose
 * logits drew them). kl_mean/kl_p99/kl_max/top1_agree of r are filled, n_scored = n - from. */
int ppl_kl_span(llm_model *m, llm_model *base, const int32_t *tokens, uint32_t n, uint32_t from,
                uint32_t n_batch, int nthreads, ppl_result *r, char *err, size_t errlen);

/* llama.cpp's log_softmax of token tok under logits (n_vocab): natural log. */
double ppl_log_softmax(const float *logits, uint32_t n_vocab, int32_t tok);

#endif

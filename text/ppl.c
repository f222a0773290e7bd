/* ppl.c — perplexity in llama.cpp's chunks, and KL divergence against a base model. text/ */
#include "text/ppl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

double ppl_log_softmax(const float *logits, uint32_t n_vocab, int32_t tok)
{
    float max = logits[0];
    for (uint32_t i = 1; i < n_vocab; i++)
        max = logits[i] > max ? logits[i] : max;
    double sum = 0;
    for (uint32_t i = 0; i < n_vocab; i++)
        sum += expf(logits[i] - max);
    return logits[tok] - max - log(sum);
}

/* KL(p || q) for logits a (base, p) and b (model, q), in double. */
static double s_kl(const float *a, const float *b, uint32_t nv)
{
    double ma = a[0], mb = b[0], sa = 0, sb = 0, kl = 0;
    for (uint32_t i = 1; i < nv; i++) {
        ma = a[i] > ma ? a[i] : ma;
        mb = b[i] > mb ? b[i] : mb;
    }
    for (uint32_t i = 0; i < nv; i++) {
        sa += exp(a[i] - ma);
        sb += exp(b[i] - mb);
    }
    double la = log(sa), lb = log(sb);
    for (uint32_t i = 0; i < nv; i++) {
        double lpa = a[i] - ma - la, lpb = b[i] - mb - lb;
        kl += exp(lpa) * (lpa - lpb);
    }
    /* Rounding can leave -1e-17 for identical inputs; KL is never negative. */
    return kl > 0 ? kl : 0;
}

static uint32_t s_argmax(const float *l, uint32_t nv)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < nv; i++)
        best = l[i] > l[best] ? i : best;
    return best;
}

/* All n_ctx positions' logits of one chunk into out. */
static int s_chunk(llm_session *s, const int32_t *toks, uint32_t n_ctx, float *out, char *err,
                   size_t errlen)
{
    llm_session_reset(s);
    return llm_eval(s, toks, n_ctx, out, 1, err, errlen);
}

int ppl_compute(llm_model *m, llm_model *base, const int32_t *tokens, size_t n, uint32_t n_ctx,
                uint32_t n_batch, int nthreads, int32_t bos, ppl_result *r, char *err,
                size_t errlen)
{
    const char *path = llm_model_gguf(m)->path;
    uint32_t nv = llm_model_arch(m)->hp.n_vocab;
    llm_session *s = NULL, *sb = NULL;
    float *lg = NULL, *lb = NULL;
    int32_t *buf = NULL;
    double *kls = NULL;
    int rc = -1;
    memset(r, 0, sizeof *r);
    r->ppl_base = r->kl_mean = r->kl_p99 = r->kl_max = r->top1_agree = NAN;
    if (n_ctx < 4) {
        util_errf(err, errlen, "perplexity", "a context of %u: at least 4 positions (half are scored)",
                  n_ctx);
        return -1;
    }
    if (n < 2ull * n_ctx) {
        /* llama.cpp's own rule: one chunk's first half is context only, so a text shorter
         * than two chunks would score too little to mean anything. */
        util_errf(err, errlen, path, "%zu tokens: perplexity with a context of %u needs at least "
                  "%u (2 x the context), as llama.cpp's perplexity does", n, n_ctx, 2 * n_ctx);
        return -1;
    }
    if (base && llm_model_arch(base)->hp.n_vocab != nv) {
        util_errf(err, errlen, path, "%u tokens, the base %s has %u: KL divergence needs the "
                  "same vocabulary", nv, llm_model_gguf(base)->path,
                  llm_model_arch(base)->hp.n_vocab);
        return -1;
    }
    uint32_t first = n_ctx / 2, per = n_ctx - 1 - first;
    r->n_ctx = n_ctx;
    r->n_chunk = (uint32_t)(n / n_ctx);
    r->n_scored = (uint64_t)r->n_chunk * per;
    uint64_t t0 = util_now_ns();
    if (!(s = llm_session_new(m, n_ctx, n_batch, err, errlen)) ||
        (base && !(sb = llm_session_new(base, n_ctx, n_batch, err, errlen))))
        goto out;
    llm_session_set_threads(s, nthreads);
    if (sb)
        llm_session_set_threads(sb, nthreads);
    lg = malloc((size_t)n_ctx * nv * sizeof *lg);
    lb = base ? malloc((size_t)n_ctx * nv * sizeof *lb) : NULL;
    buf = malloc((size_t)n_ctx * sizeof *buf);
    kls = base ? malloc(r->n_scored * sizeof *kls) : NULL;
    if (!lg || !buf || (base && (!lb || !kls))) {
        util_errf(err, errlen, "perplexity", "out of memory for %u x %u logits", n_ctx, nv);
        goto out;
    }
    double nll = 0, nll_b = 0, kl_sum = 0;
    uint64_t k = 0, same = 0;
    for (uint32_t c = 0; c < r->n_chunk; c++) {
        memcpy(buf, tokens + (size_t)c * n_ctx, n_ctx * sizeof *buf);
        if (bos >= 0)
            buf[0] = bos;
        if (s_chunk(s, buf, n_ctx, lg, err, errlen) ||
            (sb && s_chunk(sb, buf, n_ctx, lb, err, errlen)))
            goto out;
        for (uint32_t j = first; j < n_ctx - 1; j++) {
            const float *a = lg + (size_t)j * nv;
            nll -= ppl_log_softmax(a, nv, buf[j + 1]);
            if (!sb)
                continue;
            const float *b = lb + (size_t)j * nv;
            nll_b -= ppl_log_softmax(b, nv, buf[j + 1]);
            kls[k] = s_kl(b, a, nv);
            kl_sum += kls[k++];
            same += s_argmax(a, nv) == s_argmax(b, nv);
        }
    }
    r->nll_mean = nll / (double)r->n_scored;
    r->ppl = exp(r->nll_mean);
    if (sb) {
        r->ppl_base = exp(nll_b / (double)r->n_scored);
        r->kl_mean = kl_sum / (double)k;
        util_sort_doubles(kls, k);
        r->kl_p99 = util_percentile(kls, k, 99);
        r->kl_max = kls[k - 1];
        r->top1_agree = (double)same / (double)k;
    }
    r->ms = (double)(util_now_ns() - t0) / 1e6;
    rc = 0;
out:
    llm_session_free(&s);
    llm_session_free(&sb);
    free(lg);
    free(lb);
    free(buf);
    free(kls);
    return rc;
}

int ppl_kl_span(llm_model *m, llm_model *base, const int32_t *tokens, uint32_t n, uint32_t from,
                uint32_t n_batch, int nthreads, ppl_result *r, char *err, size_t errlen)
{
    uint32_t nv = llm_model_arch(m)->hp.n_vocab;
    llm_session *s = NULL, *sb = NULL;
    float *lg = NULL, *lb = NULL;
    double *kls = NULL;
    int rc = -1;
    memset(r, 0, sizeof *r);
    r->ppl = r->ppl_base = r->nll_mean = NAN;
    if (llm_model_arch(base)->hp.n_vocab != nv) {
        util_errf(err, errlen, llm_model_gguf(m)->path, "%u tokens, the base %s has %u: KL "
                  "divergence needs the same vocabulary", nv, llm_model_gguf(base)->path,
                  llm_model_arch(base)->hp.n_vocab);
        return -1;
    }
    if (!n || from >= n) {
        util_errf(err, errlen, "kl", "no positions to compare (%u tokens, from %u)", n, from);
        return -1;
    }
    uint64_t t0 = util_now_ns();
    r->n_scored = n - from;
    if (!(s = llm_session_new(m, n, n_batch, err, errlen)) ||
        !(sb = llm_session_new(base, n, n_batch, err, errlen)))
        goto out;
    llm_session_set_threads(s, nthreads);
    llm_session_set_threads(sb, nthreads);
    lg = malloc((size_t)n * nv * sizeof *lg);
    lb = malloc((size_t)n * nv * sizeof *lb);
    kls = malloc(r->n_scored * sizeof *kls);
    if (!lg || !lb || !kls) {
        util_errf(err, errlen, "kl", "out of memory for %u x %u logits", n, nv);
        goto out;
    }
    if (llm_eval(s, tokens, n, lg, 1, err, errlen) || llm_eval(sb, tokens, n, lb, 1, err, errlen))
        goto out;
    double sum = 0;
    uint64_t same = 0;
    for (uint32_t j = from; j < n; j++) {
        const float *a = lg + (size_t)j * nv, *b = lb + (size_t)j * nv;
        kls[j - from] = s_kl(b, a, nv);
        sum += kls[j - from];
        same += s_argmax(a, nv) == s_argmax(b, nv);
    }
    r->kl_mean = sum / (double)r->n_scored;
    util_sort_doubles(kls, r->n_scored);
    r->kl_p99 = util_percentile(kls, r->n_scored, 99);
    r->kl_max = kls[r->n_scored - 1];
    r->top1_agree = (double)same / (double)r->n_scored;
    r->ms = (double)(util_now_ns() - t0) / 1e6;
    rc = 0;
out:
    llm_session_free(&s);
    llm_session_free(&sb);
    free(lg);
    free(lb);
    free(kls);
    return rc;
}

/* sample.c — the sampler: llama.cpp's default chain over one logits vector, a seeded xoshiro256** draw. text/ */
#include "text/sample.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One candidate: its (penalised) logit and its id. 8 bytes, so the whole vocabulary is one
 * contiguous array that the heap and the sort move cheaply. */
typedef struct {
    float logit;
    int32_t id;
} s_cand;

struct sampler {
    sampler_opts o;
    uint32_t n_vocab;
    s_cand *cand;             /* (n_vocab,) candidates, rebuilt every call */
    s_cand *spare;            /* (n_vocab,) the radix sort's other buffer (swapped with cand) */
    uint32_t *count;          /* (n_vocab,) occurrences in the penalty window; all zero between calls */
    double *dense;            /* (n_vocab,) the speculative rule's p - q by id; all zero between calls */
    uint64_t rng[4];          /* xoshiro256** state */
    char error[256];          /* the last sampler_sample failure */
};

static void s_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void s_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- PRNG: xoshiro256** 1.0 (Blackman and Vigna, 2018, public domain), seeded by expanding the
 * 64-bit seed with splitmix64 as its authors recommend, so no seed gives the all-zero state. */

static uint64_t s_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t s_next(uint64_t st[4])
{
    uint64_t result = s_rotl(st[1] * 5, 7) * 9;
    uint64_t t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = s_rotl(st[3], 45);
    return result;
}

void sampler_reseed(sampler_t *s, uint64_t seed)
{
    uint64_t z = seed;
    for (int i = 0; i < 4; i++) {
        /* splitmix64 step */
        z += 0x9e3779b97f4a7c15ull;
        uint64_t x = z;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        s->rng[i] = x ^ (x >> 31);
    }
}

/* Uniform in [0, 1): the top 53 bits, exactly representable. */
static double s_uniform(sampler_t *s)
{
    return (double)(s_next(s->rng) >> 11) * 0x1.0p-53;
}

/* ---- options */

void sampler_opts_default(sampler_opts *o)
{
    memset(o, 0, sizeof *o);
    o->temperature = 0.8f;
    o->top_k = 40;
    o->top_p = 0.95f;
    o->min_p = 0.05f;
    o->repeat_penalty = 1.0f;
    o->repeat_last_n = 64;
}

static int s_check_opts(const sampler_opts *o, uint32_t n_vocab, char *err, size_t errlen)
{
    /* Written as !(in range) so that NaN fails every check. */
    if (!(o->temperature >= 0.0f) || isinf(o->temperature)) {
        s_fail(err, errlen, "sampler: temperature %g must be >= 0 and finite (0 = greedy)",
               (double)o->temperature);
        return -1;
    }
    if (o->top_k < 0) {
        s_fail(err, errlen, "sampler: top_k %d must be >= 0 (0 = off)", (int)o->top_k);
        return -1;
    }
    if (!(o->top_p > 0.0f && o->top_p <= 1.0f)) {
        s_fail(err, errlen, "sampler: top_p %g must be in (0,1] (1 = off)", (double)o->top_p);
        return -1;
    }
    if (!(o->min_p >= 0.0f && o->min_p <= 1.0f)) {
        s_fail(err, errlen, "sampler: min_p %g must be in [0,1] (0 = off)", (double)o->min_p);
        return -1;
    }
    if (!(o->repeat_penalty > 0.0f) || isinf(o->repeat_penalty)) {
        s_fail(err, errlen, "sampler: repeat_penalty %g must be > 0 and finite (1 = off)",
               (double)o->repeat_penalty);
        return -1;
    }
    if (!(o->frequency_penalty >= -2.0f && o->frequency_penalty <= 2.0f)) {
        s_fail(err, errlen, "sampler: frequency_penalty %g must be in [-2,2] (0 = off)",
               (double)o->frequency_penalty);
        return -1;
    }
    if (!(o->presence_penalty >= -2.0f && o->presence_penalty <= 2.0f)) {
        s_fail(err, errlen, "sampler: presence_penalty %g must be in [-2,2] (0 = off)",
               (double)o->presence_penalty);
        return -1;
    }
    if (o->n_bias && !o->bias) {
        s_fail(err, errlen, "sampler: %u logit biases and no array", o->n_bias);
        return -1;
    }
    for (uint32_t i = 0; i < o->n_bias; i++) {
        if (o->bias[i].token < 0 || (uint32_t)o->bias[i].token >= n_vocab) {
            s_fail(err, errlen, "sampler: logit_bias token %d is outside the vocabulary 0..%u",
                   (int)o->bias[i].token, n_vocab - 1);
            return -1;
        }
        if (isnan(o->bias[i].bias) || isinf(o->bias[i].bias)) {
            s_fail(err, errlen, "sampler: logit_bias for token %d must be finite",
                   (int)o->bias[i].token);
            return -1;
        }
    }
    if (n_vocab == 0 || n_vocab > INT32_MAX) {
        s_fail(err, errlen, "sampler: vocabulary size %u must be in 1..%d", n_vocab, INT32_MAX);
        return -1;
    }
    return 0;
}

sampler_t *sampler_new(const sampler_opts *o, uint32_t n_vocab, char *err, size_t errlen)
{
    sampler_t *s = NULL;
    if (!o) {
        s_fail(err, errlen, "sampler: no options");
        goto err;
    }
    if (s_check_opts(o, n_vocab, err, errlen))
        goto err;
    s = calloc(1, sizeof *s);
    if (!s)
        goto oom;
    s->o = *o;
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->spare = malloc((size_t)n_vocab * sizeof *s->spare);
    s->count = calloc(n_vocab, sizeof *s->count);
    s->dense = calloc(n_vocab, sizeof *s->dense);
    if (!s->cand || !s->spare || !s->count || !s->dense)
        goto oom;
    sampler_reseed(s, o->seed);
    return s;
oom:
    s_fail(err, errlen, "sampler: out of memory for a %u-token vocabulary", n_vocab);
err:
    sampler_destroy(&s);
    return NULL;
}

void sampler_destroy(sampler_t **sp)
{
    if (!sp || !*sp)
        return;
    sampler_t *s = *sp;
    free(s->cand);
    free(s->spare);
    free(s->count);
    free(s->dense);
    free(s);
    *sp = NULL;
}

const char *sampler_error(const sampler_t *s)
{
    return s ? s->error : "";
}

/* ---- the chain */

/* The one order every step uses: larger logit first, then lower id. A total order, so the heap,
 * the sort and greedy all agree and no result depends on how qsort treats equal keys. */
static int s_before(const s_cand *a, const s_cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int s_cmp(const void *pa, const void *pb)
{
    const s_cand *a = pa, *b = pb;
    return s_before(a, b) ? -1 : s_before(b, a) ? 1 : 0;
}

/* Min-heap on s_before (root = the worst kept candidate), for top-k in O(n log k). */
static void s_sift_down(s_cand *h, uint32_t n, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && s_before(&h[w], &h[l]))
            w = l;
        if (r < n && s_before(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        s_cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* A float's bits turned into an unsigned key that sorts descending by value: the radix sort's
 * key. -0 is taken as +0, as s_before takes them equal. */
static uint32_t s_key(float f)
{
    uint32_t u;
    if (f == 0.0f)
        f = 0.0f;
    memcpy(&u, &f, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending by value */
    return ~u;
}

/* The whole vocabulary in s_before's order. An LSD radix sort on the 32-bit key, 3 passes of
 * 11 bits, is stable, and the candidates arrive in id order, so equal logits stay in id order:
 * exactly qsort's order under s_cmp. A sampler call with top_k off over 152064 tokens took
 * 18.6-19.1 ms with qsort and 2.7 ms with this (fastest of 20 calls, test_sample's cost line,
 * 2-core development machine, 2026-12-01). */
static void s_sort_all(sampler_t *s, uint32_t n)
{
    s_cand *a = s->cand, *b = s->spare;
    for (int pass = 0; pass < 3; pass++) {
        uint32_t shift = 11u * (uint32_t)pass, hist[2048] = {0}, sum = 0;
        for (uint32_t i = 0; i < n; i++)
            hist[(s_key(a[i].logit) >> shift) & 0x7ff]++;
        for (uint32_t d = 0; d < 2048; d++) {
            uint32_t c = hist[d];
            hist[d] = sum;
            sum += c;
        }
        for (uint32_t i = 0; i < n; i++)
            b[hist[(s_key(a[i].logit) >> shift) & 0x7ff]++] = a[i];
        s_cand *t = a;
        a = b;
        b = t;
    }
    s->cand = a; /* three passes: the sorted copy is the other buffer */
    s->spare = b;
}

/* Leaves the k best of the candidates in cand[0..k), sorted. */
static void s_top_k(sampler_t *s, uint32_t n, uint32_t k)
{
    s_cand *cand = s->cand;
    if (k >= n) {
        s_sort_all(s, n);
        return;
    }
    for (uint32_t i = k / 2; i-- > 0;)
        s_sift_down(cand, k, i);
    for (uint32_t i = k; i < n; i++) {
        if (s_before(&cand[i], &cand[0])) {
            cand[0] = cand[i];
            s_sift_down(cand, k, 0);
        }
    }
    qsort(cand, k, sizeof *cand, s_cmp);
}

/* llama.cpp's penalties sampler: for each distinct token in the window, a positive logit is
 * divided by the repetition penalty and a non-positive one multiplied (so the penalty always
 * lowers it), then logit -= count x frequency + presence. count[] is left all zero. */
static int s_penalise(sampler_t *s, const int32_t *win, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (win[i] < 0 || (uint32_t)win[i] >= s->n_vocab) {
            for (uint32_t j = 0; j < i; j++)
                s->count[win[j]] = 0;
            snprintf(s->error, sizeof s->error,
                     "sampler: recent token %d (window position %u) is outside the vocabulary 0..%u",
                     (int)win[i], i, s->n_vocab - 1);
            return -1;
        }
        s->count[win[i]]++;
    }
    int rc = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t c = s->count[win[i]];
        if (c == 0)
            continue; /* already applied for an earlier occurrence */
        s->count[win[i]] = 0;
        float *l = &s->cand[win[i]].logit;
        if (*l <= 0.0f)
            *l *= s->o.repeat_penalty;
        else
            *l /= s->o.repeat_penalty;
        *l -= (float)c * s->o.frequency_penalty + s->o.presence_penalty;
        if (isnan(*l) || *l == INFINITY) {
            snprintf(s->error, sizeof s->error,
                     "sampler: token %d's logit is %g after the penalties", (int)win[i], (double)*l);
            rc = -1; /* keep going: count[] must end all zero */
        }
    }
    return rc;
}

/* The model's own distribution (log-softmax of the logits as given) for logprobs reporting. */
static void s_logprobs(const sampler_t *s, const float *logits, int32_t tok, sampler_step_info *info)
{
    uint32_t n = s->n_vocab, k = info->n_top, have = 0;
    double mx = -INFINITY;
    for (uint32_t i = 0; i < n; i++)
        if (logits[i] > mx)
            mx = logits[i];
    double sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    info->logprob = (float)((double)logits[tok] - lse);
    /* Insertion into a sorted list of at most 20: most tokens fail the first comparison. */
    s_cand top[SAMPLER_TOP_MAX];
    for (uint32_t i = 0; i < n && k > 0; i++) {
        s_cand c = {logits[i], (int32_t)i};
        if (have == k && !s_before(&c, &top[k - 1]))
            continue;
        uint32_t j = have < k ? have++ : k - 1;
        while (j > 0 && s_before(&c, &top[j - 1])) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = c;
    }
    for (uint32_t i = 0; i < have; i++) {
        info->top[i].token = top[i].id;
        info->top[i].logprob = (float)((double)top[i].logit - lse);
    }
    for (uint32_t i = have; i < k; i++) {
        info->top[i].token = -1;
        info->top[i].logprob = -INFINITY;
    }
}

/* Candidate i's weight after the temperature, exp((l_i - l_0) / T): the exponent is <= 0 and
 * never NaN, even for a temperature so small that l / T alone would overflow (1e-30 stays
 * near-greedy). Greedy: the one candidate, weight 1. */
static double s_weight(const sampler_t *s, uint32_t i)
{
    if (s->o.temperature == 0.0f)
        return i == 0;
    return exp(((double)s->cand[i].logit - s->cand[0].logit) / s->o.temperature);
}

/* The chain up to the draw: the candidates kept in cand[0..*kept), best first (greedy: the
 * largest logit alone), and the sum of their weights (s_weight). 0, or -1 with s->error. */
static int s_chain(sampler_t *s, const float *logits, const int32_t *recent, uint32_t n_recent,
                   uint32_t *kept_out, double *sum_out)
{
    s->error[0] = '\0';
    if (!logits || (n_recent > 0 && !recent)) {
        snprintf(s->error, sizeof s->error, "sampler: no logits or no recent tokens");
        return -1;
    }
    uint32_t n = s->n_vocab;
    int any = 0;
    for (uint32_t i = 0; i < n; i++) {
        float l = logits[i];
        if (isnan(l) || l == INFINITY) {
            snprintf(s->error, sizeof s->error, "sampler: logit %u is %g", i, (double)l);
            return -1;
        }
        any |= l != -INFINITY;
        s->cand[i].logit = l;
        s->cand[i].id = (int32_t)i;
    }
    if (!any) {
        snprintf(s->error, sizeof s->error, "sampler: every one of %u logits is -inf", n);
        return -1;
    }

    /* 0. logit bias (llama.cpp's chain starts with it): a ban is -inf, so no later step and
     * no draw can pick the token. */
    for (uint32_t i = 0; i < s->o.n_bias; i++) {
        float *l = &s->cand[s->o.bias[i].token].logit;
        *l = s->o.bias[i].bias <= SAMPLER_BIAS_BAN ? -INFINITY : *l + s->o.bias[i].bias;
    }

    /* 1. penalties, over the last repeat_last_n tokens */
    uint32_t w = n_recent < s->o.repeat_last_n ? n_recent : s->o.repeat_last_n;
    int penalise = s->o.repeat_penalty != 1.0f || s->o.frequency_penalty != 0.0f ||
                   s->o.presence_penalty != 0.0f;
    if (w > 0 && penalise && s_penalise(s, recent + (n_recent - w), w))
        return -1;

    if (s->o.temperature == 0.0f) {
        /* Greedy: the largest logit, lowest id on ties (top_k/top_p/min_p all keep it). */
        uint32_t best = 0;
        for (uint32_t i = 1; i < n; i++)
            if (s->cand[i].logit > s->cand[best].logit)
                best = i;
        if (s->cand[best].logit == -INFINITY)
            goto all_masked;
        s->cand[0] = s->cand[best];
        *kept_out = 1;
        *sum_out = 1;
        return 0;
    }
    /* 2. top_k (0 = off): the k best, sorted; otherwise the whole vocabulary sorted */
    uint32_t kept = s->o.top_k > 0 && (uint32_t)s->o.top_k < n ? (uint32_t)s->o.top_k : n;
    s_top_k(s, n, kept);
    s_cand *c = s->cand;
    double l0 = c[0].logit;
    if (l0 == -INFINITY)
        goto all_masked;

    /* 3. top_p at temperature 1: the shortest prefix whose probability reaches top_p */
    if (s->o.top_p < 1.0f) {
        double sum = 0, cum = 0;
        for (uint32_t i = 0; i < kept; i++)
            sum += exp((double)c[i].logit - l0);
        for (uint32_t i = 0; i < kept; i++) {
            cum += exp((double)c[i].logit - l0) / sum;
            if (cum >= (double)s->o.top_p) {
                kept = i + 1;
                break;
            }
        }
    }
    /* 4. min_p: keep p_i >= min_p x p_max, i.e. logit_i >= logit_max + log(min_p) */
    if (s->o.min_p > 0.0f) {
        double floor_logit = l0 + log((double)s->o.min_p);
        uint32_t m = 1;
        while (m < kept && (double)c[m].logit >= floor_logit)
            m++;
        kept = m;
    }
    /* 5. temperature: weights exp((l_i - l_0) / T) */
    double sum = 0;
    for (uint32_t i = 0; i < kept; i++)
        sum += s_weight(s, i);
    *kept_out = kept;
    *sum_out = sum;
    return 0;
all_masked:
    /* A multiplied repetition penalty can push the last finite logit to -inf. */
    snprintf(s->error, sizeof s->error, "sampler: every logit is -inf after the logit bias and the penalties");
    return -1;
}

/* 6. the draw: the first candidate whose cumulative weight passes u (in [0, sum)); if u
 * rounds up to sum, the last candidate of non-zero weight. */
static uint32_t s_pick(const sampler_t *s, uint32_t kept, double u)
{
    double cum = 0;
    uint32_t pick = 0;
    for (uint32_t i = 0; i < kept; i++) {
        double e = s_weight(s, i);
        if (e > 0)
            pick = i;
        cum += e;
        if (u < cum)
            break;
    }
    return pick;
}

static void s_info(const sampler_t *s, const float *logits, int32_t tok, double prob,
                   uint32_t kept, sampler_step_info *info)
{
    if (!info)
        return;
    info->prob = (float)prob;
    info->n_kept = kept;
    s_logprobs(s, logits, tok, info);
}

static int s_check_call(sampler_t *s, const float *logits, sampler_step_info *info)
{
    if (!s)
        return -1;
    s->error[0] = '\0';
    if (!logits) {
        snprintf(s->error, sizeof s->error, "sampler: no logits or no recent tokens");
        return -1;
    }
    if (info && info->n_top > SAMPLER_TOP_MAX) {
        snprintf(s->error, sizeof s->error, "sampler: %u top logprobs asked, at most %d",
                 info->n_top, SAMPLER_TOP_MAX);
        return -1;
    }
    return 0;
}

int32_t sampler_sample(sampler_t *s, const float *logits, const int32_t *recent,
                       uint32_t n_recent, sampler_step_info *info)
{
    return sampler_sample_dist(s, logits, recent, n_recent, info, NULL);
}

int32_t sampler_sample_dist(sampler_t *s, const float *logits, const int32_t *recent,
                            uint32_t n_recent, sampler_step_info *info, sampler_dist *q)
{
    uint32_t kept;
    double sum;
    if (s_check_call(s, logits, info) || s_chain(s, logits, recent, n_recent, &kept, &sum))
        return -1;
    /* greedy draws nothing: its PRNG stays where it was */
    uint32_t pick = s->o.temperature == 0.0f ? 0 : s_pick(s, kept, s_uniform(s) * sum);
    if (q) {
        for (uint32_t i = 0; i < kept; i++) {
            q->id[i] = s->cand[i].id;
            q->p[i] = s_weight(s, i) / sum;
        }
        q->n = kept;
    }
    s_info(s, logits, s->cand[pick].id, s_weight(s, pick) / sum, kept, info);
    return s->cand[pick].id;
}

/* The rejected draft's residual, max(0, p - q) normalised, drawn with u in [0, 1); p is in
 * dense by id over cand[0..kept) (its support: q's mass elsewhere does not count). -1 when
 * it has no mass (p = q, up to rounding: then a rejection had probability 0). */
static int32_t s_residual(sampler_t *s, uint32_t kept, const sampler_dist *q, double u,
                          double *prob)
{
    for (uint32_t j = 0; j < q->n; j++)
        s->dense[q->id[j]] -= q->p[j];
    double rsum = 0;
    for (uint32_t i = 0; i < kept; i++)
        rsum += fmax(0, s->dense[s->cand[i].id]);
    int32_t tok = -1;
    if (rsum > 0) {
        double cum = 0, ut = u * rsum;
        for (uint32_t i = 0; i < kept; i++) {
            double r = fmax(0, s->dense[s->cand[i].id]);
            if (r > 0)
                tok = s->cand[i].id;
            cum += r;
            if (ut < cum)
                break;
        }
    }
    for (uint32_t j = 0; j < q->n; j++) /* back to p on p's support, zero elsewhere */
        s->dense[q->id[j]] += q->p[j];
    *prob = tok >= 0 ? s->dense[tok] : 0;
    return tok;
}

int32_t sampler_sample_spec(sampler_t *s, const float *logits, const int32_t *recent,
                            uint32_t n_recent, const sampler_dist *q, int32_t x,
                            sampler_step_info *info)
{
    double qx = 0;
    for (uint32_t j = 0; q && j < q->n; j++)
        if (q->id[j] == x)
            qx = q->p[j];
    if (!(qx > 0)) /* not a draw from q: no rule applies, the token is drawn from p */
        return sampler_sample(s, logits, recent, n_recent, info);
    uint32_t kept;
    double sum;
    if (s_check_call(s, logits, info) || s_chain(s, logits, recent, n_recent, &kept, &sum))
        return -1;
    for (uint32_t i = 0; i < kept; i++)
        s->dense[s->cand[i].id] = s_weight(s, i) / sum;
    double px = (uint32_t)x < s->n_vocab ? s->dense[x] : 0, prob = px;
    int32_t tok = x;
    /* accept with probability min(1, p(x) / q(x)) */
    if (!(s_uniform(s) * qx < px)) {
        int32_t r = s_residual(s, kept, q, s_uniform(s), &prob);
        if (r >= 0)
            tok = r;
    }
    for (uint32_t i = 0; i < kept; i++)
        s->dense[s->cand[i].id] = 0;
    s_info(s, logits, tok, prob, kept, info);
    return tok;
}

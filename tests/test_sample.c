/* test_sample.c — the sampler: greedy, fixed-seed sequences vs a Python reference, draw statistics, filters, penalties, logprobs, bad input. tests/ */
#include "text/sample.h"
#include "base/util.h"
#include "tests/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A 1e-6 false-failure rate per statistical check: z is the standard normal's 1 - 1e-6 quantile.
 * Every draw below is seeded, so a run is reproducible; the bound says how far from the
 * probabilities an honest sampler may land with this many draws. */
#define S_Z 4.753424

static sampler_t *s_new(const sampler_opts *o, uint32_t n)
{
    char err[256] = "";
    sampler_t *s = sampler_new(o, n, err, sizeof err);
    CHECK(s != NULL, "sampler_new: %s", err);
    return s;
}

static sampler_opts s_opts(float temp, int32_t top_k, float top_p, float min_p, uint64_t seed)
{
    sampler_opts o;
    sampler_opts_default(&o);
    o.temperature = temp;
    o.top_k = top_k;
    o.top_p = top_p;
    o.min_p = min_p;
    o.seed = seed;
    return o;
}

static void s_test_validation(void)
{
    struct {
        const char *what, *needle;
        sampler_opts o;
        uint32_t n;
    } bad[] = {
        {"negative temperature", "temperature", s_opts(-0.5f, 40, 0.95f, 0.05f, 0), 100},
        {"NaN temperature", "temperature", s_opts(NAN, 40, 0.95f, 0.05f, 0), 100},
        {"top_p 0", "top_p", s_opts(0.8f, 40, 0.0f, 0.05f, 0), 100},
        {"top_p 1.5", "top_p", s_opts(0.8f, 40, 1.5f, 0.05f, 0), 100},
        {"min_p -0.1", "min_p", s_opts(0.8f, 40, 0.95f, -0.1f, 0), 100},
        {"min_p 2", "min_p", s_opts(0.8f, 40, 0.95f, 2.0f, 0), 100},
        {"top_k -1", "top_k", s_opts(0.8f, -1, 0.95f, 0.05f, 0), 100},
        {"empty vocabulary", "vocabulary", s_opts(0.8f, 40, 0.95f, 0.05f, 0), 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        sampler_t *s = sampler_new(&bad[i].o, bad[i].n, err, sizeof err);
        CHECK(s == NULL, "%s accepted", bad[i].what);
        CHECK(strstr(err, bad[i].needle) != NULL, "%s: error '%s' does not name %s", bad[i].what,
              err, bad[i].needle);
        sampler_destroy(&s);
    }
    sampler_opts o = s_opts(0.8f, 40, 0.95f, 0.05f, 0);
    o.repeat_penalty = 0.0f;
    char err[256] = "";
    sampler_t *s = sampler_new(&o, 10, err, sizeof err);
    CHECK(s == NULL && strstr(err, "repeat_penalty"), "repeat_penalty 0: '%s'", err);
    o.repeat_penalty = 1.0f;
    o.frequency_penalty = 3.0f;
    s = sampler_new(&o, 10, err, sizeof err);
    CHECK(s == NULL && strstr(err, "frequency_penalty"), "frequency_penalty 3: '%s'", err);
    CHECK(sampler_new(NULL, 10, err, sizeof err) == NULL, "NULL options accepted");
}

/* Bad input at sample time: -1 and a message naming the problem, and the sampler still works. */
static void s_test_bad_input(void)
{
    sampler_opts o = s_opts(0.8f, 40, 0.95f, 0.05f, 1);
    o.repeat_penalty = 1.1f;
    sampler_t *s = s_new(&o, 8);
    if (!s)
        return;
    float l[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    l[3] = NAN;
    CHECK(sampler_sample(s, l, NULL, 0, NULL) == -1 && strstr(sampler_error(s), "logit 3"),
          "NaN logit: '%s'", sampler_error(s));
    l[3] = INFINITY;
    CHECK(sampler_sample(s, l, NULL, 0, NULL) == -1, "+inf logit accepted");
    for (int i = 0; i < 8; i++)
        l[i] = -INFINITY;
    CHECK(sampler_sample(s, l, NULL, 0, NULL) == -1 && strstr(sampler_error(s), "-inf"),
          "all -inf: '%s'", sampler_error(s));
    for (int i = 0; i < 8; i++)
        l[i] = (float)i;
    int32_t recent[3] = {1, 8, 2};
    CHECK(sampler_sample(s, l, recent, 3, NULL) == -1 && strstr(sampler_error(s), "token 8"),
          "recent id 8 of 8: '%s'", sampler_error(s));
    recent[1] = -1;
    CHECK(sampler_sample(s, l, recent, 3, NULL) == -1, "recent id -1 accepted");
    sampler_step_info info = {.n_top = SAMPLER_TOP_MAX + 1};
    CHECK(sampler_sample(s, l, NULL, 0, &info) == -1, "n_top 21 accepted");
    /* The one finite logit penalised to -inf: refused, greedy or not. */
    for (int g = 0; g < 2; g++) {
        sampler_opts big = s_opts(g ? 0.0f : 0.8f, 40, 0.95f, 0.05f, 1);
        big.repeat_penalty = 1e30f;
        sampler_t *t = s_new(&big, 8);
        if (!t)
            break;
        float m[8];
        for (int i = 0; i < 8; i++)
            m[i] = -INFINITY;
        m[2] = -1e20f;
        int32_t two[1] = {2};
        CHECK(sampler_sample(t, m, two, 1, NULL) == -1 && strstr(sampler_error(t), "penalties"),
              "greedy=%d: penalised to -inf: '%s'", g, sampler_error(t));
        sampler_destroy(&t);
    }
    /* The failed calls left no penalty counts behind: greedy on the same sampler is unaffected. */
    sampler_destroy(&s);
    o.temperature = 0;
    s = s_new(&o, 8);
    if (!s)
        return;
    recent[0] = 7, recent[1] = 99, recent[2] = 7;
    CHECK(sampler_sample(s, l, recent, 3, NULL) == -1, "id 99 accepted");
    CHECK(sampler_sample(s, l, NULL, 0, NULL) == 7, "a failed call left counts: %d",
          sampler_sample(s, l, NULL, 0, NULL));
    CHECK(sampler_error(s)[0] == '\0', "error not cleared: '%s'", sampler_error(s));
    sampler_destroy(&s);
}

/* Greedy is the argmax, lowest id on ties; top_k = 1 at any temperature is greedy. */
static void s_test_greedy(void)
{
    enum { N = 32000 };
    float *l = malloc(N * sizeof *l);
    sampler_opts g = s_opts(0.0f, 40, 0.95f, 0.05f, 0);
    sampler_t *s = s_new(&g, N);
    if (!l || !s)
        goto out;
    uint64_t st = 99;
    for (int trial = 0; trial < 20; trial++) {
        for (int i = 0; i < N; i++)
            l[i] = (float)(util_splitmix64(&st) % 1000) / 100.0f; /* many ties */
        int32_t want = 0;
        for (int i = 1; i < N; i++)
            if (l[i] > l[want])
                want = i;
        int32_t got = sampler_sample(s, l, NULL, 0, NULL);
        CHECK(got == want, "greedy trial %d: %d, argmax %d", trial, got, want);
        for (int seed = 0; seed < 3; seed++) {
            sampler_opts k1 = s_opts(1.3f, 1, 0.5f, 0.0f, (uint64_t)seed);
            sampler_t *t = s_new(&k1, N);
            if (!t)
                break;
            got = sampler_sample(t, l, NULL, 0, NULL);
            CHECK(got == want, "top_k=1 seed %d: %d, argmax %d", seed, got, want);
            sampler_destroy(&t);
        }
    }
    /* A temperature so small that logit / T overflows still samples the top token, prob 1. */
    for (int i = 0; i < N; i++)
        l[i] = (float)(i % 97) - 40.0f;
    l[12345] = 60.0f;
    sampler_opts tiny = s_opts(1e-30f, 0, 1.0f, 0.0f, 4);
    sampler_t *t = s_new(&tiny, N);
    if (t) {
        sampler_step_info info = {0};
        int32_t got = sampler_sample(t, l, NULL, 0, &info);
        CHECK(got == 12345 && info.prob == 1.0f, "temperature 1e-30: %d prob %g", got,
              (double)info.prob);
        sampler_destroy(&t);
    }
    /* Ties: all equal gives id 0; equal maxima at 5 and 9 give 5. */
    for (int i = 0; i < N; i++)
        l[i] = 1.0f;
    CHECK(sampler_sample(s, l, NULL, 0, NULL) == 0, "all equal: not id 0");
    l[9] = 2.0f, l[5] = 2.0f;
    CHECK(sampler_sample(s, l, NULL, 0, NULL) == 5, "tie 5/9: not 5");
out:
    sampler_destroy(&s);
    free(l);
}

/* The logits sample_ref.py's logits_for() makes: a multiplicative hash of (id, step). */
static void s_ref_logits(float *l, uint32_t n, uint32_t step)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t h = i * 2654435761u + step * 40503u + 12345u;
        l[i] = (float)((double)h / 4294967296.0 * 12.0 - 6.0);
    }
}

/* Fixed seed -> fixed ids: the three scenarios of text/sample_ref.py, an independent Python
 * reference (`python3 text/sample_ref.py` printed the expected ids below). */
static void s_test_sequence(void)
{
    static const struct {
        const char *name;
        float temp, top_p, min_p, repeat, freq, pres;
        int32_t top_k;
        uint32_t last_n, n_vocab, steps, n_prompt;
        uint64_t seed;
        int32_t prompt[3];
        int32_t want[16];
    } sc[] = {
        {"llama_defaults_penalty", 0.8f, 0.95f, 0.05f, 1.1f, 0, 0, 40, 64, 1000, 16, 3, 42,
         {1, 2, 3},
         {754, 576, 542, 131, 652, 76, 309, 364, 830, 631, 919, 432, 508, 199, 597, 563}},
        {"full_vocab_hot", 1.5f, 1.0f, 0.0f, 1.0f, 0, 0, 0, 64, 32000, 12, 0, 7, {0},
         {12457, 2859, 14460, 1004, 28292, 6784, 1652, 10302, 6218, 25107, 22552, 11813}},
        {"top_p_freq_pres", 0.7f, 0.9f, 0.0f, 1.0f, 0.5f, 0.3f, 0, 8, 500, 16, 3, 123, {5, 5, 9},
         {343, 346, 131, 55, 309, 477, 453, 351, 461, 364, 207, 372, 144, 398, 440, 343}},
    };
    for (size_t k = 0; k < sizeof sc / sizeof sc[0]; k++) {
        sampler_opts o = s_opts(sc[k].temp, sc[k].top_k, sc[k].top_p, sc[k].min_p, sc[k].seed);
        o.repeat_penalty = sc[k].repeat;
        o.repeat_last_n = sc[k].last_n;
        o.frequency_penalty = sc[k].freq;
        o.presence_penalty = sc[k].pres;
        float *l = malloc(sc[k].n_vocab * sizeof *l);
        int32_t recent[32];
        sampler_t *s = s_new(&o, sc[k].n_vocab);
        if (!s || !l) {
            free(l);
            sampler_destroy(&s);
            continue;
        }
        /* Twice: the second run after sampler_reseed must repeat the first exactly. */
        for (int run = 0; run < 2; run++) {
            uint32_t n_recent = sc[k].n_prompt;
            memcpy(recent, sc[k].prompt, sizeof sc[k].prompt);
            int same = 1;
            for (uint32_t step = 0; step < sc[k].steps; step++) {
                s_ref_logits(l, sc[k].n_vocab, step);
                int32_t t = sampler_sample(s, l, recent, n_recent, NULL);
                recent[n_recent++] = t;
                if (t != sc[k].want[step]) {
                    same = 0;
                    CHECK(0, "%s run %d step %u: %d, reference %d", sc[k].name, run, step, t,
                          sc[k].want[step]);
                }
            }
            CHECK(same, "%s run %d differs from the reference", sc[k].name, run);
            sampler_reseed(s, sc[k].seed);
        }
        sampler_destroy(&s);
        free(l);
    }
}

/* The full-vocabulary sort (radix) and top_k's heap + qsort order candidates the same way, ties
 * (+0 and -0 included) by id: with the one -inf candidate cut by top_k = n - 1 (weight 0 either
 * way), both samplers draw the same tokens from the same seed. */
static void s_test_sort_paths(void)
{
    enum { N = 5000, DRAWS = 300 };
    float *l = malloc(N * sizeof *l);
    sampler_opts all = s_opts(1.0f, 0, 1.0f, 0.0f, 31), cut = s_opts(1.0f, N - 1, 1.0f, 0.0f, 31);
    sampler_t *a = s_new(&all, N), *b = s_new(&cut, N);
    if (!l || !a || !b)
        goto out;
    for (int i = 0; i < N; i++)
        l[i] = (float)(i % 7) * 0.25f - 1.0f; /* seven values, ~714 ties each */
    for (int i = 0; i < N; i += 11)
        l[i] = (i % 2) ? -0.0f : 0.0f;
    l[100] = -INFINITY;
    int same = 0;
    for (int i = 0; i < DRAWS; i++) {
        int32_t x = sampler_sample(a, l, NULL, 0, NULL), y = sampler_sample(b, l, NULL, 0, NULL);
        same += x == y && x >= 0;
    }
    CHECK(same == DRAWS, "radix and heap orders disagree: %d of %d draws equal", same, DRAWS);
out:
    sampler_destroy(&a);
    sampler_destroy(&b);
    free(l);
}

/* Pearson's chi-square of n draws against p (k categories). Returns the statistic. */
static double s_chi2(sampler_t *s, const float *logits, const double *p, int k, int n)
{
    int count[16] = {0};
    for (int i = 0; i < n; i++) {
        int32_t t = sampler_sample(s, logits, NULL, 0, NULL);
        if (t >= 0 && t < k)
            count[t]++;
    }
    double x2 = 0;
    for (int i = 0; i < k; i++) {
        double e = n * p[i];
        x2 += (count[i] - e) * (count[i] - e) / e;
        /* Each count is binomial(n, p_i): within S_Z standard deviations of n p_i. */
        double sd = sqrt(n * p[i] * (1 - p[i]));
        CHECK(fabs(count[i] - e) <= S_Z * sd, "token %d drawn %d times, expected %.1f +- %.1f", i,
              count[i], e, S_Z * sd);
    }
    return x2;
}

/* The chi-square quantile by Wilson and Hilferty's approximation (good to a few percent for
 * df >= 3 in the tail used here). */
static double s_chi2_bound(int df)
{
    double a = 2.0 / (9.0 * df);
    return df * pow(1 - a + S_Z * sqrt(a), 3);
}

static void s_test_distribution(void)
{
    enum { K = 6, DRAWS = 60000 };
    const double p[K] = {0.40, 0.25, 0.15, 0.10, 0.07, 0.03};
    float l[K];
    for (int i = 0; i < K; i++)
        l[i] = (float)log(p[i]) + 3.0f; /* a shift changes nothing after softmax */
    /* The probabilities the draws must follow, from the float logits actually passed. */
    double q[K], sum = 0;
    for (int i = 0; i < K; i++)
        sum += (q[i] = exp((double)l[i]));
    for (int i = 0; i < K; i++)
        q[i] /= sum;
    sampler_opts o = s_opts(1.0f, 0, 1.0f, 0.0f, 2024);
    sampler_t *s = s_new(&o, K);
    if (!s)
        return;
    double x2 = s_chi2(s, l, q, K, DRAWS), bound = s_chi2_bound(K - 1);
    CHECK(x2 <= bound, "temperature 1: chi-square %.2f > %.2f (df %d, %d draws)", x2, bound, K - 1,
          DRAWS);
    printf("temperature 1: chi-square %.2f, bound %.2f (df %d, %d draws)\n", x2, bound, K - 1, DRAWS);
    /* The check has power: the same draws against a uniform distribution fail it. */
    double uni[K];
    for (int i = 0; i < K; i++)
        uni[i] = 1.0 / K;
    double xu = 0;
    int cnt[K] = {0};
    for (int i = 0; i < DRAWS; i++) {
        int32_t t = sampler_sample(s, l, NULL, 0, NULL);
        if (t >= 0 && t < K)
            cnt[t]++;
    }
    for (int i = 0; i < K; i++)
        xu += (cnt[i] - DRAWS * uni[i]) * (cnt[i] - DRAWS * uni[i]) / (DRAWS * uni[i]);
    CHECK(xu > bound, "draws also fit a uniform distribution (chi-square %.2f)", xu);
    sampler_destroy(&s);

    /* Temperature 2: probabilities proportional to q^(1/2). */
    o = s_opts(2.0f, 0, 1.0f, 0.0f, 77);
    s = s_new(&o, K);
    if (!s)
        return;
    double r[K];
    sum = 0;
    for (int i = 0; i < K; i++)
        sum += (r[i] = exp((double)l[i] / 2.0));
    for (int i = 0; i < K; i++)
        r[i] /= sum;
    x2 = s_chi2(s, l, r, K, DRAWS);
    CHECK(x2 <= bound, "temperature 2: chi-square %.2f > %.2f", x2, bound);
    printf("temperature 2: chi-square %.2f, bound %.2f\n", x2, bound);
    sampler_destroy(&s);
}

/* top_p and min_p exclude exactly the tokens they should; n_kept and prob say so. */
static void s_test_filters(void)
{
    enum { K = 4, DRAWS = 4000 };
    const double p[K] = {0.5, 0.3, 0.15, 0.05};
    float l[K];
    for (int i = 0; i < K; i++)
        l[i] = (float)log(p[i]);
    struct {
        const char *what;
        float top_p, min_p;
        int32_t top_k;
        uint32_t kept;
    } c[] = {
        {"top_p 0.75 keeps 0.5+0.3", 0.75f, 0.0f, 0, 2},
        {"top_p 0.5 keeps the top token", 0.5f, 0.0f, 0, 1},
        {"top_p 0.9 keeps three", 0.9f, 0.0f, 0, 3},
        {"min_p 0.2 drops p < 0.1", 1.0f, 0.2f, 0, 3},
        {"min_p 0.5 drops p < 0.25", 1.0f, 0.5f, 0, 2},
        {"top_k 3 then top_p 0.99", 0.99f, 0.0f, 3, 3},
        {"min_p 1 keeps the top token", 1.0f, 1.0f, 0, 1},
        {"all off keeps four", 1.0f, 0.0f, 0, 4},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        sampler_opts o = s_opts(1.0f, c[k].top_k, c[k].top_p, c[k].min_p, 5 + k);
        sampler_t *s = s_new(&o, K);
        if (!s)
            continue;
        int seen[K] = {0}, bad_kept = 0, bad_prob = 0;
        double kept_sum = 0;
        for (uint32_t i = 0; i < c[k].kept; i++)
            kept_sum += p[i];
        for (int i = 0; i < DRAWS; i++) {
            sampler_step_info info = {0};
            int32_t t = sampler_sample(s, l, NULL, 0, &info);
            if (t < 0 || t >= K)
                continue;
            seen[t]++;
            bad_kept |= info.n_kept != c[k].kept;
            /* renormalised over the kept tokens */
            bad_prob |= fabs(info.prob - p[t] / kept_sum) > 1e-5;
        }
        for (uint32_t i = 0; i < K; i++) {
            if (i < c[k].kept)
                CHECK(seen[i] > 0, "%s: token %u never drawn in %d", c[k].what, i, DRAWS);
            else
                CHECK(seen[i] == 0, "%s: excluded token %u drawn %d times", c[k].what, i, seen[i]);
        }
        CHECK(!bad_kept, "%s: n_kept not %u", c[k].what, c[k].kept);
        CHECK(!bad_prob, "%s: info.prob not renormalised over the kept tokens", c[k].what);
        sampler_destroy(&s);
    }
}

/* llama.cpp's repetition penalty: positive logits divided, negative multiplied, once per token
 * whatever its count, only inside the last-N window; frequency and presence subtract. Seen
 * through greedy, which shows the order of the penalised logits. */
static void s_test_penalties(void)
{
    sampler_opts o = s_opts(0.0f, 40, 0.95f, 0.05f, 0);
    o.repeat_penalty = 1.1f;
    o.repeat_last_n = 4;
    sampler_t *s = s_new(&o, 4);
    if (!s)
        return;
    float pos[4] = {2.0f, 1.9f, 0.0f, -5.0f};  /* 2 / 1.1 = 1.818 < 1.9 */
    float neg[4] = {-1.0f, -1.05f, -9.0f, -9.0f}; /* -1 x 1.1 = -1.1 < -1.05 */
    float edge[4] = {2.0f, 1.83f, 0.0f, 0.0f};  /* 1.818 < 1.83 */
    int32_t r0[1] = {0};
    CHECK(sampler_sample(s, pos, NULL, 0, NULL) == 0, "no history: not 0");
    CHECK(sampler_sample(s, pos, r0, 1, NULL) == 1, "positive logit not divided");
    CHECK(sampler_sample(s, neg, r0, 1, NULL) == 1, "negative logit not multiplied");
    int32_t many[4] = {0, 0, 0, 0};
    CHECK(sampler_sample(s, edge, many, 4, NULL) == 1, "repeated 4 times: not penalised");
    /* Applied once, not per occurrence: 2/1.1 = 1.818 > 1.81 wins even with four repeats. */
    float once[4] = {2.0f, 1.81f, 0.0f, 0.0f};
    CHECK(sampler_sample(s, once, many, 4, NULL) == 0, "penalty applied per occurrence");
    /* The window: token 0 is five back with repeat_last_n 4. */
    int32_t old[5] = {0, 2, 2, 3, 3};
    CHECK(sampler_sample(s, pos, old, 5, NULL) == 0, "token outside the window penalised");
    int32_t inside[5] = {2, 2, 3, 0, 3};
    CHECK(sampler_sample(s, pos, inside, 5, NULL) == 1, "token inside the window not penalised");
    sampler_destroy(&s);

    /* Frequency: logit - count x 0.5; presence: logit - 0.3 once. */
    o.repeat_penalty = 1.0f;
    o.frequency_penalty = 0.5f;
    s = s_new(&o, 4);
    if (!s)
        return;
    float f[4] = {3.0f, 2.2f, 0.0f, 0.0f};
    int32_t one[1] = {0}, two[2] = {0, 0};
    CHECK(sampler_sample(s, f, one, 1, NULL) == 0, "frequency x1: 2.5 > 2.2, want 0");
    CHECK(sampler_sample(s, f, two, 2, NULL) == 1, "frequency x2: 2.0 < 2.2, want 1");
    sampler_destroy(&s);
    o.frequency_penalty = 0.0f;
    o.presence_penalty = 0.3f;
    s = s_new(&o, 4);
    if (!s)
        return;
    float pr[4] = {3.0f, 2.75f, 0.0f, 0.0f};
    int32_t thrice[3] = {0, 0, 0};
    CHECK(sampler_sample(s, pr, thrice, 3, NULL) == 1, "presence: 2.7 < 2.75, want 1");
    pr[1] = 2.65f;
    CHECK(sampler_sample(s, pr, thrice, 3, NULL) == 0, "presence counted per occurrence");
    sampler_destroy(&s);
}

/* info.logprob and info.top against a direct log-softmax in double, on a real-size vocabulary;
 * the logprobs describe the model (logits as passed), not the penalised or filtered ones. */
static void s_test_logprobs(void)
{
    enum { N = 32000 };
    float *l = malloc(N * sizeof *l);
    double *lp = malloc(N * sizeof *lp);
    sampler_opts o = s_opts(0.8f, 40, 0.95f, 0.05f, 3);
    o.repeat_penalty = 1.3f;
    sampler_t *s = s_new(&o, N);
    if (!l || !lp || !s)
        goto out;
    s_ref_logits(l, N, 5);
    l[17] = 9.0f, l[18] = 9.0f; /* a tie at the top: lower id first */
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < N; i++)
        mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < N; i++)
        sum += exp((double)l[i] - mx);
    for (int i = 0; i < N; i++)
        lp[i] = (double)l[i] - mx - log(sum);
    int32_t recent[2] = {17, 18};
    for (uint32_t n_top = 0; n_top <= SAMPLER_TOP_MAX; n_top += 5) {
        sampler_step_info info = {.n_top = n_top};
        int32_t t = sampler_sample(s, l, recent, 2, &info);
        CHECK(t >= 0, "%s", sampler_error(s));
        if (t < 0)
            continue;
        CHECK(fabs(info.logprob - lp[t]) < 1e-5, "chosen %d: logprob %.7f, direct %.7f", t,
              (double)info.logprob, lp[t]);
        CHECK(info.prob > 0 && info.prob <= 1, "prob %g", (double)info.prob);
        for (uint32_t i = 0; i < n_top; i++) {
            int32_t id = info.top[i].token;
            CHECK(id >= 0 && id < N, "top[%u] id %d", i, id);
            if (id < 0 || id >= N)
                continue;
            CHECK(fabs(info.top[i].logprob - lp[id]) < 1e-5, "top[%u] %d: %.7f vs %.7f", i, id,
                  (double)info.top[i].logprob, lp[id]);
            /* descending, and nothing outside the list is likelier than its last entry */
            if (i > 0)
                CHECK(info.top[i].logprob <= info.top[i - 1].logprob, "top[%u] out of order", i);
        }
        if (n_top >= 2)
            CHECK(info.top[0].token == 17 && info.top[1].token == 18, "tie order %d %d",
                  info.top[0].token, info.top[1].token);
        if (n_top > 0) {
            int beyond = 0;
            for (int i = 0; i < N; i++) {
                int listed = 0;
                for (uint32_t j = 0; j < n_top; j++)
                    listed |= info.top[j].token == i;
                beyond += !listed && lp[i] > info.top[n_top - 1].logprob + 1e-6;
            }
            CHECK(beyond == 0, "n_top %u: %d unlisted tokens are likelier than the last listed",
                  n_top, beyond);
        }
    }
out:
    sampler_destroy(&s);
    free(l);
    free(lp);
}

/* Not a gate: what one call costs on the largest vocabulary the issue names (Qwen2.5's), the
 * fastest of 20 calls (the machine is shared: the minimum is the call's own cost). */
static void s_report_cost(void)
{
    enum { N = 152064, CALLS = 20 };
    float *l = malloc(N * sizeof *l);
    if (!l)
        return;
    s_ref_logits(l, N, 1);
    struct {
        const char *what;
        int32_t top_k;
        float temp;
    } c[] = {{"greedy", 40, 0.0f}, {"top_k 40 (llama.cpp default)", 40, 0.8f},
             {"top_k off (whole vocabulary sorted)", 0, 0.8f}};
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        sampler_opts o = s_opts(c[k].temp, c[k].top_k, 0.95f, 0.05f, 1);
        sampler_t *s = s_new(&o, N);
        if (!s)
            continue;
        double best[2] = {1e30, 1e30};
        for (int with = 0; with < 2; with++) {
            sampler_step_info info = {.n_top = 5};
            sampler_sample(s, l, NULL, 0, with ? &info : NULL); /* first touch, untimed */
            for (int i = 0; i < CALLS; i++) {
                uint64_t t0 = util_now_ns();
                sampler_sample(s, l, NULL, 0, with ? &info : NULL);
                double ms = (double)(util_now_ns() - t0) / 1e6;
                best[with] = ms < best[with] ? ms : best[with];
            }
        }
        printf("cost, vocabulary %d, %s: %.2f ms per call, %.2f ms with 5 top logprobs\n", N,
               c[k].what, best[0], best[1]);
        sampler_destroy(&s);
    }
    free(l);
}

/* logit_bias: first in the chain; -100 (or below) bans, any other value is added; a bad entry is
 * refused by sampler_new naming it. */
static void s_test_bias(void)
{
    enum { N = 10, DRAWS = 2000 };
    float l[N];
    for (int i = 0; i < N; i++)
        l[i] = (float)i * 0.1f; /* token 9 is the greedy one */
    sampler_bias ban[2] = { { 9, -100.0f }, { 8, -250.0f } };
    sampler_opts o = s_opts(0.0f, 0, 1.0f, 0.0f, 1);
    o.bias = ban;
    o.n_bias = 2;
    sampler_t *s = s_new(&o, N);
    CHECK(sampler_sample(s, l, NULL, 0, NULL) == 7, "greedy with 9 and 8 banned: not 7");
    sampler_destroy(&s);
    o.temperature = 2.0f;
    s = s_new(&o, N);
    int seen[N] = {0};
    for (int i = 0; i < DRAWS; i++) {
        int32_t t = sampler_sample(s, l, NULL, 0, NULL);
        if (t >= 0 && t < N)
            seen[t]++;
    }
    CHECK(seen[9] == 0 && seen[8] == 0 && seen[0] > 0, "temperature 2: banned drawn %d, %d times",
          seen[9], seen[8]);
    sampler_destroy(&s);
    sampler_bias up = { 2, 5.0f };
    o = s_opts(0.0f, 0, 1.0f, 0.0f, 1);
    o.bias = &up;
    o.n_bias = 1;
    s = s_new(&o, N);
    sampler_step_info info = { .n_top = 1 };
    int32_t t = sampler_sample(s, l, NULL, 0, &info);
    /* logprobs stay the model's: the bias changes the choice, not what is reported */
    CHECK(t == 2 && info.top[0].token == 9, "+5 on token 2: %d (top %d)", t, info.top[0].token);
    sampler_destroy(&s);
    /* a ban of every token leaves nothing to draw: a clear error, not a pick */
    sampler_bias all[N];
    for (int i = 0; i < N; i++)
        all[i] = (sampler_bias){ i, -100.0f };
    o.bias = all;
    o.n_bias = N;
    s = s_new(&o, N);
    CHECK(sampler_sample(s, l, NULL, 0, NULL) == -1 && strstr(sampler_error(s), "-inf"),
          "every token banned: '%s'", sampler_error(s));
    sampler_destroy(&s);
    char err[256] = "";
    sampler_bias bad = { N, 1.0f };
    o.bias = &bad;
    o.n_bias = 1;
    CHECK(sampler_new(&o, N, err, sizeof err) == NULL && strstr(err, "logit_bias token 10"),
          "bias of token 10 of 10: '%s'", err);
    bad = (sampler_bias){ 1, NAN };
    CHECK(sampler_new(&o, N, err, sizeof err) == NULL && strstr(err, "finite"),
          "NaN bias: '%s'", err);
}

int main(void)
{
    s_test_validation();
    s_test_bad_input();
    s_test_greedy();
    s_test_sequence();
    s_test_sort_paths();
    s_test_distribution();
    s_test_filters();
    s_test_penalties();
    s_test_logprobs();
    s_test_bias();
    s_report_cost();
    return CHECK_DONE("test_sample");
}

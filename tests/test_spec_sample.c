/* test_spec_sample.c — the speculative-sampling rule on small synthetic distributions: a draft
 * x drawn from q (the drafter's logits through the sampler's chain), accepted with probability
 * min(1, p(x)/q(x)), else a draw from max(0, p - q) normalised, gives tokens distributed
 * exactly as p (the target's logits through the same chain) for every option set the sampler
 * has, including q's support wider or narrower than p's and a point-mass q; the acceptance
 * rate is sum min(p, q); a seed gives the same tokens twice. tests/ */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "tests/chisq.h"
#include "text/sample.h"

#define NV 12         /* vocabulary */
#define TRIALS 100000 /* draws per case: every cell of p expects >= 400 of them */
/* The false-failure rate of every statistical check (the draws are seeded, so a run is
 * reproducible: this says how unlikely an honest rule is to fail on the seed chosen) and the
 * standard normal's 1 - ALPHA quantile for the acceptance rate's two-sided bound. */
#define ALPHA 1e-6
#define Z 4.753424

typedef struct {
    const char *what;
    float temp;
    int32_t top_k;
    float top_p, min_p, repeat_penalty;
    int ban;          /* a logit bias banning token 3 */
    int q_shift;      /* the draft's logits: the target's + this x a fixed perturbation */
    float q_temp;     /* 0: the same options as the target (the rule's premise) */
} s_case;

static const float s_lp[NV] = { 2.0f, 1.7f, 1.5f, 1.4f, 0.9f, 0.8f, 0.2f, 0.1f, -0.3f, -0.9f,
                                -1.5f, -2.0f };
static const float s_pert[NV] = { -1.2f, 0.9f, -0.4f, 1.5f, 0.3f, -0.8f, 1.1f, 0.0f, 0.7f,
                                  -0.5f, 1.9f, 0.4f };

static sampler_t *s_new(const s_case *c, float temp, uint64_t seed, sampler_bias *bias)
{
    char err[256] = "";
    sampler_opts o;
    sampler_opts_default(&o);
    o.temperature = temp;
    o.top_k = c->top_k;
    o.top_p = c->top_p;
    o.min_p = c->min_p;
    o.repeat_penalty = c->repeat_penalty;
    o.seed = seed;
    if (c->ban) {
        bias->token = 3;
        bias->bias = SAMPLER_BIAS_BAN;
        o.bias = bias;
        o.n_bias = 1;
    }
    sampler_t *s = sampler_new(&o, NV, err, sizeof err);
    CHECK(s != NULL, "sampler_new: %s", err);
    return s;
}

static void s_case_run(const s_case *c)
{
    int32_t recent[] = { 0, 5, 5, 1 }; /* the penalty window (repeat_penalty != 1 only) */
    float lq[NV];
    for (int i = 0; i < NV; i++)
        lq[i] = s_lp[i] + c->q_shift * s_pert[i];
    sampler_bias bias;
    sampler_t *ps = s_new(c, c->temp, 11, &bias);
    sampler_t *qs = s_new(c, c->q_temp ? c->q_temp : c->temp, 12, &bias);
    sampler_t *ref = s_new(c, c->temp, 13, &bias);
    sampler_t *qref = s_new(c, c->q_temp ? c->q_temp : c->temp, 14, &bias);
    int32_t pid[NV], qid[NV];
    double pp[NV], qp[NV];
    sampler_dist p = { pid, pp, 0 }, q = { qid, qp, 0 };
    if (!ps || !qs || !ref || !qref)
        goto out;
    /* the exact laws: p, q and the acceptance rate sum min(p, q) */
    double pe[NV] = { 0 }, qe[NV] = { 0 }, acc_exp = 0;
    sampler_sample_dist(ref, s_lp, recent, 4, NULL, &p);
    sampler_sample_dist(qref, lq, recent, 4, NULL, &q);
    for (uint32_t i = 0; i < p.n; i++)
        pe[pid[i]] = pp[i];
    for (uint32_t i = 0; i < q.n; i++)
        qe[qid[i]] = qp[i];
    for (int i = 0; i < NV; i++)
        acc_exp += fmin(pe[i], qe[i]);
    uint32_t cnt[NV] = { 0 }, acc = 0, bad = 0;
    for (uint32_t t = 0; t < TRIALS; t++) {
        int32_t x = sampler_sample_dist(qs, lq, recent, 4, NULL, &q);
        int32_t tok = sampler_sample_spec(ps, s_lp, recent, 4, &q, x, NULL);
        if (tok < 0 || tok >= NV || pe[tok] == 0) {
            bad++;
            continue;
        }
        cnt[tok]++;
        acc += tok == x;
    }
    CHECK(bad == 0, "%s: %u draws outside p's support", c->what, bad);
    double chi = 0, chi_q = 0;
    int cells = 0;
    for (int i = 0; i < NV; i++) {
        if (pe[i] == 0)
            continue;
        double ex = pe[i] * TRIALS;
        cells++;
        chi += (cnt[i] - ex) * (cnt[i] - ex) / ex;
        /* what a wrong rule that kept every draft would score on average (the test's power) */
        chi_q += TRIALS * (qe[i] - pe[i]) * (qe[i] - pe[i]) / pe[i];
    }
    double lim = cells > 1 ? chisq_quantile(cells - 1, ALPHA) : 0;
    double rate = (double)acc / TRIALS, sd = sqrt(acc_exp * (1 - acc_exp) / TRIALS);
    printf("%-40s %2d cells: chi-square %6.2f (limit %.2f; keeping every draft would score "
           "%.0f); accepted %.4f, expected %.4f\n", c->what, cells, chi, lim, chi_q, rate,
           acc_exp);
    /* the check has power: a rule keeping every draft would fail it by far (q != p) */
    if (c->q_shift || c->q_temp)
        CHECK(chi_q > 10 * lim, "%s: q is too close to p to tell a wrong rule (%.1f)", c->what,
              chi_q);
    if (cells > 1)
        CHECK(chi < lim, "%s: chi-square %.2f over %d cells, limit %.2f (alpha %g)", c->what,
              chi, cells, lim, ALPHA);
    else
        CHECK(cnt[pid[0]] == TRIALS, "%s: a point mass p, yet other tokens", c->what);
    CHECK(fabs(rate - acc_exp) <= Z * sd + 1e-12, "%s: acceptance %.5f, expected %.5f +- %.5f",
          c->what, rate, acc_exp, Z * sd);
out:
    sampler_destroy(&ps);
    sampler_destroy(&qs);
    sampler_destroy(&ref);
    sampler_destroy(&qref);
}

/* The same seeds give the same tokens; another target seed other tokens. */
static void s_test_seeded(void)
{
    s_case c = { .what = "seeded", .temp = 0.9f, .top_p = 1, .repeat_penalty = 1, .q_shift = 1 };
    float lq[NV];
    for (int i = 0; i < NV; i++)
        lq[i] = s_lp[i] + s_pert[i];
    int32_t out[3][64];
    for (int run = 0; run < 3; run++) {
        sampler_bias b;
        sampler_t *ps = s_new(&c, c.temp, run == 2 ? 99 : 5, &b), *qs = s_new(&c, c.temp, 6, &b);
        int32_t qid[NV];
        double qp[NV];
        sampler_dist q = { qid, qp, 0 };
        for (int t = 0; ps && qs && t < 64; t++) {
            int32_t x = sampler_sample_dist(qs, lq, NULL, 0, NULL, &q);
            out[run][t] = sampler_sample_spec(ps, s_lp, NULL, 0, &q, x, NULL);
        }
        sampler_destroy(&ps);
        sampler_destroy(&qs);
    }
    CHECK(!memcmp(out[0], out[1], sizeof out[0]), "the same seeds drew other tokens");
    CHECK(memcmp(out[0], out[2], sizeof out[0]), "another seed drew the same 64 tokens");
}

/* A draft not drawn from q (not in its support): no rule applies, the token is p's draw, the
 * same as sampler_sample's with the same seed; and info reports p of the token. */
static void s_test_edges(void)
{
    s_case c = { .what = "edges", .temp = 1, .top_k = 4, .top_p = 1, .repeat_penalty = 1 };
    sampler_bias b;
    sampler_t *a = s_new(&c, 1, 7, &b), *z = s_new(&c, 1, 7, &b);
    int32_t qid[NV] = { 0 };
    double qp[NV] = { 1 };
    sampler_dist q = { qid, qp, 1 }; /* a point mass on token 0 */
    sampler_step_info ia = { 0 }, iz = { 0 };
    for (int t = 0; a && z && t < 20; t++) {
        int32_t ta = sampler_sample_spec(a, s_lp, NULL, 0, &q, 7, &ia); /* 7 is not in q */
        int32_t tz = sampler_sample(z, s_lp, NULL, 0, &iz);
        CHECK(ta == tz && ia.prob == iz.prob, "a draft outside q: %d (%g) vs plain %d (%g)",
              ta, (double)ia.prob, tz, (double)iz.prob);
    }
    /* bad logits: -1 with the sampler's message */
    float nan_l[NV];
    memcpy(nan_l, s_lp, sizeof nan_l);
    nan_l[2] = NAN;
    CHECK(a && sampler_sample_spec(a, nan_l, NULL, 0, &q, 0, NULL) == -1 &&
          strstr(sampler_error(a), "logit 2"), "a NaN logit: %s", a ? sampler_error(a) : "");
    sampler_destroy(&a);
    sampler_destroy(&z);
}

int main(void)
{
    static const s_case cases[] = {
        { "T 1, no filters", 1.0f, 0, 1.0f, 0, 1, 0, 1, 0 },
        { "T 0.7, no filters", 0.7f, 0, 1.0f, 0, 1, 0, 1, 0 },
        { "T 0.7, top_k 8, top_p 0.9, min_p 0.05", 0.7f, 8, 0.9f, 0.05f, 1, 0, 1, 0 },
        { "T 1, top_k 5 (supports differ)", 1.0f, 5, 1.0f, 0, 1, 0, 2, 0 },
        { "T 1.3, min_p 0.1, repeat 1.3, ban", 1.3f, 0, 1.0f, 0.1f, 1.3f, 1, 1, 0 },
        { "T 0.8, q far from p", 0.8f, 0, 1.0f, 0, 1, 0, 3, 0 },
        { "q = p (every draft kept)", 0.9f, 6, 1.0f, 0, 1, 0, 0, 0 },
        { "q a point mass (T 1e-4)", 1.0f, 0, 1.0f, 0, 1, 0, 1, 1e-4f },
        { "q sharper (T 0.3) than p (T 1.5)", 1.5f, 0, 1.0f, 0, 1, 0, 1, 0.3f },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        s_case_run(&cases[i]);
    s_test_seeded();
    s_test_edges();
    return CHECK_DONE("test_spec_sample");
}

/* spec_margin.c — why a quantized copy agrees with its target on so few greedy tokens: the
 * target's top-1 minus top-2 logit margin beside the copy's logit error, over a greedy
 * generation of the target (teacher-forced through both). An experiment, not part of swarm;
 * built against build/libswarm.a by experiments/spec_margin.sh.
 *
 * usage: spec_margin TARGET.gguf COPY.gguf N_GEN ID...   (the prompt's ids, BOS first)
 * prints per position: margin, the copy's error on that margin, whether the argmax agrees,
 * then percentiles. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "runtime/llm.h"

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void s_top2(const float *l, uint32_t n, uint32_t *i1, uint32_t *i2)
{
    *i1 = 0, *i2 = 1;
    if (l[1] > l[0])
        *i1 = 1, *i2 = 0;
    for (uint32_t i = 2; i < n; i++)
        if (l[i] > l[*i1])
            *i2 = *i1, *i1 = i;
        else if (l[i] > l[*i2])
            *i2 = i;
}

static void s_pct(const char *name, double *v, uint32_t n)
{
    qsort(v, n, sizeof *v, s_cmp);
    printf("%-28s p10 %8.4f  p25 %8.4f  p50 %8.4f  p75 %8.4f  p90 %8.4f\n", name,
           v[n / 10], v[n / 4], v[n / 2], v[3 * n / 4], v[9 * n / 10]);
}

int main(int argc, char **argv)
{
    char err[512];
    if (argc < 5) {
        fprintf(stderr, "usage: spec_margin TARGET COPY N_GEN ID...\n");
        return 2;
    }
    uint32_t ngen = (uint32_t)atoi(argv[3]), np = (uint32_t)(argc - 4), n = np + ngen;
    int32_t *ids = malloc(n * sizeof *ids);
    for (uint32_t i = 0; i < np; i++)
        ids[i] = atoi(argv[4 + i]);
    llm_model *mt = llm_model_open(argv[1], err, sizeof err), *md = llm_model_open(argv[2], err, sizeof err);
    if (!mt || !md) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    uint32_t V = llm_model_arch(mt)->hp.n_vocab;
    llm_session *st = llm_session_new(mt, n + 8, 64, err, sizeof err);
    llm_session *sd = llm_session_new(md, n + 8, 64, err, sizeof err);
    llm_session_set_threads(st, 2);
    llm_session_set_threads(sd, 2);
    float *lt = malloc(V * sizeof *lt), *ld = malloc(V * sizeof *ld);
    double *marg = malloc(ngen * sizeof *marg), *merr = malloc(ngen * sizeof *merr),
           *rms = malloc(ngen * sizeof *rms), *sd_t = malloc(ngen * sizeof *sd_t),
           *ratio = malloc(ngen * sizeof *ratio);
    uint32_t agree = 0;
    if (llm_eval(st, ids, np, lt, 0, err, sizeof err) || llm_eval(sd, ids, np, ld, 0, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("pos margin copy_margin_err rms_logit_err target_logit_sd agree target_id\n");
    for (uint32_t g = 0; g < ngen; g++) {
        uint32_t a1, a2, b1, b2;
        s_top2(lt, V, &a1, &a2);
        s_top2(ld, V, &b1, &b2);
        double mean = 0, m2 = 0, e2 = 0;
        for (uint32_t i = 0; i < V; i++)
            mean += lt[i];
        mean /= V;
        for (uint32_t i = 0; i < V; i++)
            m2 += (lt[i] - mean) * (lt[i] - mean), e2 += (double)(ld[i] - lt[i]) * (ld[i] - lt[i]);
        marg[g] = lt[a1] - lt[a2];
        merr[g] = fabs((double)(ld[a1] - ld[a2]) - marg[g]);
        rms[g] = sqrt(e2 / V);
        sd_t[g] = sqrt(m2 / V);
        ratio[g] = marg[g] / rms[g];
        agree += a1 == b1;
        printf("%u %.4f %.4f %.4f %.4f %d %u\n", g, marg[g], merr[g], rms[g], sd_t[g], a1 == b1, a1);
        ids[np + g] = (int32_t)a1;
        if (llm_eval(st, ids + np + g, 1, lt, 0, err, sizeof err) ||
            llm_eval(sd, ids + np + g, 1, ld, 0, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
    }
    printf("\npositions %u, top-1 agreement %.3f\n", ngen, (double)agree / ngen);
    s_pct("target top1-top2 margin", marg, ngen);
    s_pct("copy's error on that margin", merr, ngen);
    s_pct("copy's rms logit error", rms, ngen);
    s_pct("target logit sd", sd_t, ngen);
    s_pct("margin / rms error", ratio, ngen);
    return 0;
}

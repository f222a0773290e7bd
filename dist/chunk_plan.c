/* chunk_plan.c — the pipelined prefill's chunk size: per-stage lines fitted to measured act
 * times, and the pipeline's time minimised over the chunk sizes (chunk_plan.h). dist/
 *
 * Why a line: an act of c positions reads the stage's weights once (decoding's cost, the
 * same for c = 1 or 64) and does c positions' arithmetic, so a stage takes about
 * fixed + per_pos x c. Small chunks fill the pipeline sooner (S - 1 chunks' time of
 * fill and drain) but pay the fixed part (and each link's delay) once a chunk; the
 * minimum of the model below is where the two balance, c* ~ sqrt(n x fixed / ((S - 1) x
 * per_pos)) when the stages are alike and the links free.
 */
#include "dist/chunk_plan.h"

void chunk_fit_add(chunk_fit *f, uint32_t n, uint64_t ns)
{
    double x = n, t = (double)ns;
    f->k += 1;
    f->sn += x;
    f->st += t;
    f->snn += x * x;
    f->snt += x * t;
    if (!f->n_lo || n < f->n_lo)
        f->n_lo = n;
    if (n > f->n_hi)
        f->n_hi = n;
}

int chunk_fit_line(const chunk_fit *f, chunk_stage *s)
{
    if (f->k < 2 || f->n_hi < 2 * f->n_lo)
        return -1;
    double den = f->k * f->snn - f->sn * f->sn;
    if (den <= 0)
        return -1;
    double b = (f->k * f->snt - f->sn * f->st) / den;
    double a = (f->st - b * f->sn) / f->k;
    s->per_pos_ns = b > 0 ? b : 0;
    s->fixed_ns = a > 0 ? a : 0;
    return 0;
}

double chunk_plan_time(const chunk_model *m, uint32_t n, uint32_t c)
{
    if (!c || !n)
        return 0;
    uint32_t nc = (n + c - 1) / c;
    double link = m->hop_ns + m->link_ns_per_pos * c;
    double fill = (m->n_st + 1) * link, worst = m->link_ns_per_pos * c;
    for (uint32_t i = 0; i < m->n_st; i++) {
        double t = m->st[i].fixed_ns + m->st[i].per_pos_ns * c;
        fill += t;
        if (t > worst)
            worst = t;
    }
    return fill + (nc - 1) * worst;
}

uint32_t chunk_plan_hosts(const chunk_stage *all, uint32_t S, const chunk_model *m, uint32_t n,
                          uint32_t span, uint32_t lo, uint32_t batch, double *pipe_ns,
                          double *one_ns)
{
    chunk_stage st[16];
    S = S < 1 ? 1 : S > 16 ? 16 : S;
    for (uint32_t i = 0; i < S; i++)
        st[i] = (chunk_stage){ all->fixed_ns / S, all->per_pos_ns / S };
    chunk_model h = *m;
    h.st = st;
    h.n_st = S;
    uint32_t c = batch;
    *pipe_ns = *one_ns = 0;
    for (uint32_t p = 0; p < n; p += span) {
        uint32_t k = n - p < span ? n - p : span;
        double t;
        c = chunk_plan_pick(&h, k, lo, batch, &t);
        *pipe_ns += t;
    }
    *one_ns = (double)((n + batch - 1) / batch) * all->fixed_ns + (double)n * all->per_pos_ns;
    return c;
}

uint32_t chunk_plan_pick(const chunk_model *m, uint32_t n, uint32_t lo, uint32_t hi,
                         double *pred_ns)
{
    if (hi > n)
        hi = n;
    if (lo < 1)
        lo = 1;
    if (lo > hi)
        lo = hi;
    uint32_t best = hi;
    double bt = chunk_plan_time(m, n, hi);
    for (uint32_t c = hi; c-- > lo;) {
        double t = chunk_plan_time(m, n, c);
        if (t < bt) {
            bt = t;
            best = c;
        }
    }
    if (pred_ns)
        *pred_ns = bt;
    return best;
}

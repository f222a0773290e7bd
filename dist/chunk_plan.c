/* chunk_plan.c — the pipelined prefill's chunk size: per-stage models fitted to measured act
 * times, and the pipeline's schedule minimised over the chunk sizes (chunk_plan.h). dist/
 *
 * Why these parts: an act of c positions reads the stage's weights once (decoding's cost,
 * the same for c = 1 or 64), does c positions' matrix arithmetic, and scores each position's
 * query against every key before it: c x pos0 + c (c + 1) / 2 pairs, so late in a long
 * prompt a position costs more. Without the pairs a line fitted early in a prompt
 * under-predicts late calls (measured 2026-12-02 on TinyLlama-shaped Q4_0, 2 workers: 10.0 s
 * predicted for calls that took 28.0 s), and one fitted across a call's growing positions
 * reads the growth as a per-position cost with no fixed part (0 ms + 22.9 ms a position),
 * which picks chunks of 16 where each act's fixed ~250 ms then counts 4 times as often. And a
 * key costs more the longer the window it is read in: with pairs alone the fitted cost of a
 * pair rose call by call (5.7, 6.9, 10.5 us a pair on stage 0 after positions 512, 1024,
 * 1536) and the last calls took 1.25-1.36x their prediction, so a fourth part weighs each
 * pair by its query's window (per key k0 + k1 x window: the sum of the windows squared).
 * Small chunks fill the pipeline sooner (S - 1 chunks' time of fill and drain) but pay the
 * fixed part (and each link's delay) once a chunk; with position-dependent chunks there is
 * no closed form, so each size's schedule is simulated (S x chunks steps, microseconds).
 */
#include <math.h>
#include <string.h>

#include "dist/chunk_plan.h"

double chunk_pairs(uint32_t pos0, uint32_t c)
{
    return (double)c * pos0 + (double)c * (c + 1) / 2;
}

static double s_sq(double m) /* 1^2 + ... + m^2 */
{
    return m * (m + 1) * (2 * m + 1) / 6;
}

double chunk_squares(uint32_t pos0, uint32_t c)
{
    return s_sq((double)pos0 + c) - s_sq(pos0);
}

double chunk_stage_ns(const chunk_stage *s, uint32_t pos0, uint32_t c)
{
    return s->fixed_ns + s->per_pos_ns * c + s->per_pair_ns * chunk_pairs(pos0, c) +
           s->per_sq_ns * chunk_squares(pos0, c);
}

void chunk_fit_add(chunk_fit *f, uint32_t n, double pairs, double squares, uint64_t ns)
{
    double x[CHUNK_PARTS] = { 1, n, pairs, squares }, t = (double)ns;
    for (int i = 0; i < CHUNK_PARTS; i++) {
        for (int j = 0; j < CHUNK_PARTS; j++)
            f->xx[i][j] += x[i] * x[j];
        f->xt[i] += x[i] * t;
    }
    f->tt += t * t;
    if (!f->n_lo || n < f->n_lo)
        f->n_lo = n;
    if (n > f->n_hi)
        f->n_hi = n;
}

/* Least squares over the parts in mask (bit i: part i free, the others 0) into b: the
 * normal equations scaled to a unit diagonal (the parts' sums span 1 to ~1e20) and solved
 * with partial pivoting. -1 when they are singular (a part the acts cannot tell apart from
 * the others, e.g. pairs while every act starts at 0 in two sizes). */
static int s_solve(const chunk_fit *f, unsigned mask, double b[CHUNK_PARTS])
{
    int ix[CHUNK_PARTS], k = 0;
    double a[CHUNK_PARTS][CHUNK_PARTS + 1], d[CHUNK_PARTS];
    for (int i = 0; i < CHUNK_PARTS; i++) {
        b[i] = 0;
        if (mask >> i & 1) {
            if (f->xx[i][i] <= 0)
                return -1;
            d[k] = sqrt(f->xx[i][i]);
            ix[k++] = i;
        }
    }
    for (int r = 0; r < k; r++) {
        for (int c = 0; c < k; c++)
            a[r][c] = f->xx[ix[r]][ix[c]] / (d[r] * d[c]);
        a[r][k] = f->xt[ix[r]] / d[r];
    }
    for (int c = 0; c < k; c++) {
        int p = c;
        for (int r = c + 1; r < k; r++)
            if (fabs(a[r][c]) > fabs(a[p][c]))
                p = r;
        if (fabs(a[p][c]) < 1e-9)
            return -1;
        for (int j = 0; j <= k; j++) {
            double t = a[c][j];
            a[c][j] = a[p][j];
            a[p][j] = t;
        }
        for (int r = 0; r < k; r++) {
            if (r == c)
                continue;
            double q = a[r][c] / a[c][c];
            for (int j = c; j <= k; j++)
                a[r][j] -= q * a[c][j];
        }
    }
    for (int r = 0; r < k; r++)
        b[ix[r]] = a[r][k] / a[r][r] / d[r];
    return 0;
}

int chunk_fit_line(const chunk_fit *f, chunk_stage *s)
{
    if (f->xx[0][0] < 2 || f->n_hi < 2 * f->n_lo)
        return -1;
    /* every part free first, then the later parts (those the acts tell worst: squares,
     * pairs) held at 0, ...: on a tie (two sizes, two points: several exact fits) the
     * earlier one */
    static const unsigned order[] = { 15, 7, 11, 13, 14, 3, 5, 9, 6, 10, 12, 1, 2, 4, 8 };
    double best = INFINITY, bb[CHUNK_PARTS] = { 0 }, tol = 1e-9 * f->tt;
    for (unsigned o = 0; o < sizeof order / sizeof *order; o++) {
        double b[CHUNK_PARTS], sse = f->tt; /* sum (t - x.b)^2 from the sums */
        if (s_solve(f, order[o], b))
            continue;
        int neg = 0;
        for (int i = 0; i < CHUNK_PARTS; i++)
            neg |= b[i] < 0;
        if (neg)
            continue;
        for (int i = 0; i < CHUNK_PARTS; i++) {
            sse -= 2 * b[i] * f->xt[i];
            for (int j = 0; j < CHUNK_PARTS; j++)
                sse += b[i] * b[j] * f->xx[i][j];
        }
        if (sse < best - tol) {
            best = sse;
            memcpy(bb, b, sizeof bb);
        }
    }
    *s = (chunk_stage){ bb[0], bb[1], bb[2], bb[3] };
    return 0;
}

double chunk_plan_time(const chunk_model *m, uint32_t pos0, uint32_t n, uint32_t c)
{
    if (!c || !n)
        return 0;
    uint32_t S = m->n_st < CHUNK_MAX_ST ? m->n_st : CHUNK_MAX_ST, W = m->window;
    double done[2 * CHUNK_MAX_ST + 1] = { 0 }; /* per link, stage, link, ...: busy until */
    double back[2 * CHUNK_MAX_ST + 2];          /* the last W chunks' return times */
    if (W > sizeof back / sizeof *back)
        W = 0;
    double t = 0;
    for (uint32_t p = 0, j = 0; p < n; p += c, j++) {
        uint32_t k = n - p < c ? n - p : c;
        t = W && j >= W ? back[j % W] : 0;
        for (uint32_t r = 0; r < 2 * S + 1; r++) {
            double start = t > done[r] ? t : done[r];
            if (r % 2 == 0) { /* a link: its bytes hold it, its delay does not */
                done[r] = start + m->link_ns_per_pos * k;
                t = done[r] + m->hop_ns;
            } else {
                done[r] = start + chunk_stage_ns(&m->st[r / 2], pos0 + p, k);
                t = done[r];
            }
        }
        if (W)
            back[j % W] = t;
    }
    return t;
}

uint32_t chunk_plan_pick(const chunk_model *m, uint32_t pos0, uint32_t n, uint32_t lo,
                         uint32_t hi, double *pred_ns)
{
    if (hi > n)
        hi = n;
    if (lo < 1)
        lo = 1;
    if (lo > hi)
        lo = hi;
    uint32_t best = hi;
    double bt = chunk_plan_time(m, pos0, n, hi);
    for (uint32_t c = hi; c-- > lo;) {
        double t = chunk_plan_time(m, pos0, n, c);
        if (t < bt) {
            bt = t;
            best = c;
        }
    }
    if (pred_ns)
        *pred_ns = bt;
    return best;
}

uint32_t chunk_plan_hosts(const chunk_stage *all, uint32_t S, const chunk_model *m, uint32_t n,
                          uint32_t span, uint32_t lo, uint32_t batch, double *pipe_ns,
                          double *one_ns)
{
    chunk_stage st[CHUNK_MAX_ST];
    S = S < 1 ? 1 : S > CHUNK_MAX_ST ? CHUNK_MAX_ST : S;
    for (uint32_t i = 0; i < S; i++)
        st[i] = (chunk_stage){ all->fixed_ns / S, all->per_pos_ns / S, all->per_pair_ns / S,
                               all->per_sq_ns / S };
    chunk_model h = *m;
    h.st = st;
    h.n_st = S;
    h.window = S + 1;
    uint32_t c = batch;
    *pipe_ns = *one_ns = 0;
    if (!span || !batch)
        return c;
    for (uint32_t p = 0; p < n; p += span) {
        uint32_t k = n - p < span ? n - p : span;
        double t;
        c = chunk_plan_pick(&h, p, k, lo, batch, &t);
        *pipe_ns += t;
    }
    for (uint32_t p = 0; p < n; p += batch)
        *one_ns += chunk_stage_ns(all, p, n - p < batch ? n - p : batch);
    return c;
}

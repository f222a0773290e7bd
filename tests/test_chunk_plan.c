/* test_chunk_plan.c — the pipelined prefill's chunk size: the fitted model (fixed, per
 * position, per attention pair), the cost model against a brute-force pipeline schedule and
 * the closed form for alike chunks, and the choice's limits. tests/ */
#include <math.h>
#include <stdint.h>

#include "check.h"
#include "dist/chunk_plan.h"

/* A pipeline run chunk by chunk: chunk j leaves stage s (or link) when it has left the one
 * before and the stage has finished chunk j - 1. Equal-size chunks but the last; no window. */
static double s_schedule(const chunk_model *m, uint32_t pos0, uint32_t n, uint32_t c)
{
    double done[2 * 8 + 2] = { 0 }; /* per resource (link, stage, link, ..., link): last finish */
    uint32_t nr = 2 * m->n_st + 1;
    double end = 0;
    for (uint32_t p = 0; p < n; p += c) {
        uint32_t k = n - p < c ? n - p : c;
        double t = 0;
        for (uint32_t r = 0; r < nr; r++) {
            double busy;
            if (r % 2 == 0) { /* a link: its delay does not hold it, its bytes do */
                double ser = m->link_ns_per_pos * k;
                double start = t > done[r] ? t : done[r];
                done[r] = start + ser;
                t = done[r] + m->hop_ns;
                continue;
            }
            const chunk_stage *s = &m->st[r / 2];
            busy = chunk_stage_ns(s, pos0 + p, k);
            double start = t > done[r] ? t : done[r];
            done[r] = start + busy;
            t = done[r];
        }
        end = t;
    }
    return end;
}

/* the old closed form for alike chunks (no pairs, free links): the first crosses every stage
 * and link, each further one follows a bottleneck later */
static double s_closed(const chunk_model *m, uint32_t n, uint32_t c)
{
    double fill = (m->n_st + 1) * m->hop_ns, worst = 0;
    for (uint32_t i = 0; i < m->n_st; i++) {
        double t = m->st[i].fixed_ns + m->st[i].per_pos_ns * c;
        fill += t;
        worst = t > worst ? t : worst;
    }
    return fill + ((n + c - 1) / c - 1) * worst;
}

static void s_fits(void)
{
    chunk_fit f = { 0 };
    chunk_stage s;
    CHECK(chunk_fit_line(&f, &s) == -1, "an empty fit has no model");
    chunk_fit_add(&f, 64, chunk_pairs(0, 64), chunk_squares(0, 64), 64 * 1000 + 20000);
    chunk_fit_add(&f, 64, chunk_pairs(64, 64), chunk_squares(64, 64), 64 * 1000 + 20000);
    CHECK(chunk_fit_line(&f, &s) == -1, "one size has no model");
    /* two sizes from position 0: pairs cannot be told from positions: the line, pairs 0 */
    chunk_fit l = { 0 };
    chunk_fit_add(&l, 64, chunk_pairs(0, 64), chunk_squares(0, 64), 64 * 1000 + 20000);
    chunk_fit_add(&l, 64, chunk_pairs(0, 64), chunk_squares(0, 64), 64 * 1000 + 20000);
    chunk_fit_add(&l, 16, chunk_pairs(0, 16), chunk_squares(0, 16), 16 * 1000 + 20000);
    CHECK(chunk_fit_line(&l, &s) == 0 && fabs(s.per_pos_ns - 1000) < 1e-6 &&
              fabs(s.fixed_ns - 20000) < 1e-3 && s.per_pair_ns == 0 && s.per_sq_ns == 0,
          "line %.3f + %.3f n + %.6f pairs", s.fixed_ns, s.per_pos_ns, s.per_pair_ns);
    chunk_fit g = { 0 }; /* noise below zero: those parts held at 0 */
    chunk_fit_add(&g, 10, chunk_pairs(0, 10), chunk_squares(0, 10), 5000);
    chunk_fit_add(&g, 40, chunk_pairs(0, 40), chunk_squares(0, 40), 100);
    CHECK(chunk_fit_line(&g, &s) == 0 && s.per_pos_ns == 0 && s.per_pair_ns == 0 &&
              s.per_sq_ns == 0 &&
              s.fixed_ns > 0,
          "held at 0: %.1f + %.3f n + %.6f pairs", s.fixed_ns, s.per_pos_ns, s.per_pair_ns);

    /* a prompt's acts (a first chunk of 16, then 64s, then chunks of 58 late) from a known
     * stage, near what TinyLlama's half measured: the four parts come back exactly */
    chunk_stage truth = { 250e6, 4e6, 6e3, 3 };
    chunk_fit p = { 0 };
    uint32_t sizes[] = { 16, 64, 64, 64, 58, 58, 16, 16 };
    for (uint32_t i = 0, pos = 0; pos < 1900; pos += sizes[i % 8], i++)
        chunk_fit_add(&p, sizes[i % 8], chunk_pairs(pos, sizes[i % 8]),
                      chunk_squares(pos, sizes[i % 8]),
                      (uint64_t)chunk_stage_ns(&truth, pos, sizes[i % 8]));
    CHECK(chunk_fit_line(&p, &s) == 0 && fabs(s.fixed_ns - truth.fixed_ns) < 1e-6 * 250e6 &&
              fabs(s.per_pos_ns - truth.per_pos_ns) < 1e-6 * 4e6 &&
              fabs(s.per_pair_ns - truth.per_pair_ns) < 1e-6 * 6e3 &&
              fabs(s.per_sq_ns - truth.per_sq_ns) < 1e-6 * 3,
          "fitted %.1f + %.1f n + %.4f pairs + %.6f squares", s.fixed_ns, s.per_pos_ns,
          s.per_pair_ns, s.per_sq_ns);
    chunk_model tm = { .st = &truth, .n_st = 1 }, fm = { .st = &s, .n_st = 1 };
    double a = chunk_plan_time(&tm, 1536, 463, 58), b = chunk_plan_time(&fm, 1536, 463, 58);
    CHECK(fabs(a - b) < 1e-6 * a, "late call: truth %.0f fitted %.0f", a, b);
    CHECK(chunk_plan_time(&tm, 1536, 512, 64) > 2 * chunk_plan_time(&tm, 0, 512, 64),
          "a late call costs more than an early one");
    /* noise on the same acts (-2%..+2%, a fixed pattern): the parts stay within 10% and >= 0 */
    chunk_fit q = { 0 };
    for (uint32_t i = 0, pos = 0; pos < 1900; pos += sizes[i % 8], i++)
        chunk_fit_add(&q, sizes[i % 8], chunk_pairs(pos, sizes[i % 8]),
                      chunk_squares(pos, sizes[i % 8]),
                      (uint64_t)(chunk_stage_ns(&truth, pos, sizes[i % 8]) *
                                 (1 + 0.01 * ((int)(i * 7 % 5) - 2))));
    CHECK(chunk_fit_line(&q, &s) == 0 && s.fixed_ns >= 0 && s.per_pos_ns >= 0 &&
              fabs(chunk_stage_ns(&s, 1800, 64) / chunk_stage_ns(&truth, 1800, 64) - 1) < 0.1 &&
              fabs(chunk_stage_ns(&s, 0, 16) / chunk_stage_ns(&truth, 0, 16) - 1) < 0.1,
          "noisy: %.1f + %.1f n + %.4f pairs + %.6f squares", s.fixed_ns, s.per_pos_ns,
          s.per_pair_ns, s.per_sq_ns);
}

static void s_schedules(void)
{
    /* the model is the schedule's makespan (no window), with and without pairs and rates,
     * and the closed form where chunks are alike */
    chunk_stage st[3] = { { 2e6, 1e5, 0, 0 }, { 3e6, 1.2e5, 0, 0 }, { 1e6, 0.9e5, 0, 0 } };
    chunk_model m = { .st = st, .n_st = 3, .hop_ns = 2e5 };
    for (uint32_t c = 1; c <= 64; c *= 2) {
        double a = chunk_plan_time(&m, 0, 512, c), b = s_schedule(&m, 0, 512, c);
        CHECK(fabs(a - b) < 1e-9 * b, "c %u: model %.0f schedule %.0f", c, a, b);
        b = s_closed(&m, 512, c);
        CHECK(fabs(a - b) < 1e-9 * b, "c %u: model %.0f closed form %.0f", c, a, b);
        m.window = 4; /* S + 1 in flight hold nothing back here (hop << a stage) */
        b = chunk_plan_time(&m, 0, 512, c);
        CHECK(fabs(a - b) < 1e-9 * a, "c %u: window 4 %.0f, none %.0f", c, b, a);
        m.window = 0;
    }
    st[0].per_pair_ns = 30, st[1].per_pair_ns = 10, st[2].per_pair_ns = 50;
    st[1].per_sq_ns = 0.01;
    m.link_ns_per_pos = 5e3;
    for (uint32_t c = 4; c <= 64; c *= 2) {
        double a = chunk_plan_time(&m, 700, 512, c), b = s_schedule(&m, 700, 512, c);
        CHECK(fabs(a - b) < 1e-9 * b, "c %u, pairs and rate: model %.0f schedule %.0f", c,
              a, b);
    }
    m.window = 1; /* one chunk at a time: every chunk crosses everything alone */
    double one = chunk_plan_time(&m, 0, 256, 64), sum = 0;
    for (uint32_t p = 0; p < 256; p += 64) {
        chunk_model solo = m;
        solo.window = 0;
        sum += chunk_plan_time(&solo, p, 64, 64);
    }
    CHECK(fabs(one - sum) < 1e-9 * sum, "window 1: %.0f, chunks alone %.0f", one, sum);
}

static void s_picks(void)
{
    /* the pick is the minimum over the range, near sqrt(n a / ((S - 1) b)) for alike stages */
    chunk_stage eq[2] = { { 20e6, 13e6, 0, 0 }, { 20e6, 13e6, 0, 0 } };
    chunk_model e = { .st = eq, .n_st = 2, .window = 3 };
    double pred;
    uint32_t c = chunk_plan_pick(&e, 0, 2048, 1, 64, &pred);
    double best = 1e300;
    for (uint32_t k = 1; k <= 64; k++)
        best = fmin(best, chunk_plan_time(&e, 0, 2048, k));
    CHECK(pred == best, "pick %u: %.0f, best %.0f", c, pred, best);
    CHECK(c >= 30 && c <= 64, "alike stages: c %u near sqrt(2048 x 20 / 13) = 56", c);
    CHECK(chunk_plan_pick(&e, 0, 2048, 48, 64, NULL) >= 48, "the lower bound holds");
    CHECK(chunk_plan_pick(&e, 0, 10, 1, 64, NULL) <= 10, "never above the prompt");
    eq[0].fixed_ns = eq[1].fixed_ns = 0; /* no fixed cost: the smallest chunk fills soonest */
    CHECK(chunk_plan_pick(&e, 0, 2048, 8, 64, NULL) == 8, "no fixed cost: the smallest");
    eq[0].fixed_ns = eq[1].fixed_ns = 1e12; /* a huge fixed cost: the fewest chunks */
    CHECK(chunk_plan_pick(&e, 0, 2048, 8, 64, NULL) == 64, "a huge fixed cost: the largest");
    /* late in a prompt with a real fixed part the pick stays large: pairs are no per
     * position cost a smaller chunk saves on (the measured 0 + 22.9 ms line picked 16) */
    chunk_stage late[2] = { { 250e6, 4e6, 6e3, 3 }, { 250e6, 4e6, 6e3, 3 } };
    chunk_model lm = { .st = late, .n_st = 2, .hop_ns = 5e5, .window = 3 };
    c = chunk_plan_pick(&lm, 1024, 512, 16, 64, NULL);
    CHECK(c >= 40, "late, fixed 250 ms: chunks of %u", c);
}

int main(void)
{
    s_fits();
    s_schedules();
    s_picks();

    /* hosts: one process is every batch's cost; S hosts come near 1/S, never under it */
    chunk_stage all = { 40e6, 26e6, 0, 0 };
    chunk_model links = { .hop_ns = 1e5 };
    double pipe, one, last = 1e300;
    for (uint32_t S = 2; S <= 8; S++) {
        chunk_plan_hosts(&all, S, &links, 2000, 4 * S * 64, 16, 64, &pipe, &one);
        CHECK(one == 32 * 40e6 + 2000 * 26e6, "one process %.0f", one);
        CHECK(pipe > one / S && pipe < last, "S %u: %.0f (one %.0f)", S, pipe, one);
        last = pipe;
    }
    all.per_pair_ns = 8e3; /* with attention: one process adds every batch's pairs */
    all.per_sq_ns = 2;
    chunk_plan_hosts(&all, 1, &links, 2000, 4 * 64, 16, 64, &pipe, &one);
    double sq = 2000.0 * 2001 * 4001 / 6;
    CHECK(fabs(one - (32 * 40e6 + 2000 * 26e6 + 8e3 * 2000.0 * 2001 / 2 + 2 * sq)) < 1e-9 * one,
          "one process with pairs %.0f", one);
    last = 1e300;
    for (uint32_t S = 2; S <= 8; S++) {
        chunk_plan_hosts(&all, S, &links, 2000, 4 * S * 64, 16, 64, &pipe, &one);
        CHECK(pipe > one / S && pipe < last, "pairs, S %u: %.0f (one %.0f)", S, pipe, one);
        last = pipe;
    }
    return CHECK_DONE("test_chunk_plan");
}

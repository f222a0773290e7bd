/* test_chunk_plan.c — the pipelined prefill's chunk size: the fitted line, the cost model
 * against a brute-force pipeline schedule, and the choice's limits. tests/ */
#include <math.h>
#include <stdint.h>

#include "check.h"
#include "dist/chunk_plan.h"

/* A pipeline run chunk by chunk: chunk j leaves stage s (or link) when it has left the one
 * before and the stage has finished chunk j - 1. Equal-size chunks but the last. */
static double s_schedule(const chunk_model *m, uint32_t n, uint32_t c)
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
            busy = s->fixed_ns + s->per_pos_ns * k;
            double start = t > done[r] ? t : done[r];
            done[r] = start + busy;
            t = done[r];
        }
        end = t;
    }
    return end;
}

int main(void)
{
    /* a line through exact points */
    chunk_fit f = { 0 };
    chunk_stage s;
    CHECK(chunk_fit_line(&f, &s) == -1, "an empty fit has no line");
    chunk_fit_add(&f, 64, 64 * 1000 + 20000);
    chunk_fit_add(&f, 64, 64 * 1000 + 20000);
    CHECK(chunk_fit_line(&f, &s) == -1, "one size has no line");
    chunk_fit_add(&f, 16, 16 * 1000 + 20000);
    CHECK(chunk_fit_line(&f, &s) == 0 && fabs(s.per_pos_ns - 1000) < 1e-6 &&
              fabs(s.fixed_ns - 20000) < 1e-3,
          "line %.3f + %.3f n", s.fixed_ns, s.per_pos_ns);
    chunk_fit g = { 0 }; /* noise below zero is clamped */
    chunk_fit_add(&g, 10, 5000);
    chunk_fit_add(&g, 40, 100);
    CHECK(chunk_fit_line(&g, &s) == 0 && s.per_pos_ns == 0 && s.fixed_ns > 0, "clamped");

    /* the model is the schedule's makespan when every chunk is whole (no links' bytes), and
     * the bottleneck formula's bound with a rate */
    chunk_stage st[3] = { { 2e6, 1e5 }, { 3e6, 1.2e5 }, { 1e6, 0.9e5 } };
    chunk_model m = { .st = st, .n_st = 3, .hop_ns = 2e5 };
    for (uint32_t c = 1; c <= 64; c *= 2) {
        double a = chunk_plan_time(&m, 512, c), b = s_schedule(&m, 512, c);
        CHECK(fabs(a - b) < 1e-6 * b, "c %u: model %.0f schedule %.0f", c, a, b);
    }
    m.link_ns_per_pos = 5e3;
    for (uint32_t c = 4; c <= 64; c *= 2) {
        double a = chunk_plan_time(&m, 512, c), b = s_schedule(&m, 512, c);
        CHECK(a >= b * (1 - 1e-9), "c %u: model %.0f under the schedule %.0f", c, a, b);
    }
    m.link_ns_per_pos = 0;

    /* the pick is the minimum over the range, near sqrt(n a / ((S - 1) b)) for alike stages */
    chunk_stage eq[2] = { { 20e6, 13e6 }, { 20e6, 13e6 } };
    chunk_model e = { .st = eq, .n_st = 2 };
    double pred;
    uint32_t c = chunk_plan_pick(&e, 2048, 1, 64, &pred);
    double best = 1e300;
    for (uint32_t k = 1; k <= 64; k++)
        best = fmin(best, chunk_plan_time(&e, 2048, k));
    CHECK(pred == best, "pick %u: %.0f, best %.0f", c, pred, best);
    CHECK(c >= 30 && c <= 64, "alike stages: c %u near sqrt(2048 x 20 / 13) = 56", c);
    CHECK(chunk_plan_pick(&e, 2048, 48, 64, NULL) >= 48, "the lower bound holds");
    CHECK(chunk_plan_pick(&e, 10, 1, 64, NULL) <= 10, "never above the prompt");
    eq[0].fixed_ns = eq[1].fixed_ns = 0; /* no fixed cost: the smallest chunk fills soonest */
    CHECK(chunk_plan_pick(&e, 2048, 8, 64, NULL) == 8, "no fixed cost: the smallest");
    eq[0].fixed_ns = eq[1].fixed_ns = 1e12; /* a huge fixed cost: the fewest chunks */
    CHECK(chunk_plan_pick(&e, 2048, 8, 64, NULL) == 64, "a huge fixed cost: the largest");

    /* hosts: one process is every batch's line; S hosts come near 1/S, never under it */
    chunk_stage all = { 40e6, 26e6 };
    chunk_model links = { .hop_ns = 1e5 };
    double pipe, one, last = 1e300;
    for (uint32_t S = 2; S <= 8; S++) {
        chunk_plan_hosts(&all, S, &links, 2000, 4 * S * 64, 16, 64, &pipe, &one);
        CHECK(one == 32 * 40e6 + 2000 * 26e6, "one process %.0f", one);
        CHECK(pipe > one / S && pipe < last, "S %u: %.0f (one %.0f)", S, pipe, one);
        last = pipe;
    }
    return CHECK_DONE("test_chunk_plan");
}

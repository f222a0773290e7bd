/* chunk_plan.h — the pipelined prefill's chunk size from the stages' measured times and the
 * link profile: a least-squares line per stage (time = fixed + per position x positions, fed
 * by the workers' result traces) and a pipeline cost model minimised over the sizes. dist/
 */
#ifndef SWARM_DIST_CHUNK_PLAN_H
#define SWARM_DIST_CHUNK_PLAN_H

#include <stdint.h>

/* Sums over one stage's acts of several positions (n, compute ns): what the line is fitted
 * to. Zeroed = empty. */
typedef struct {
    double k, sn, st, snn, snt;   /* count, sums of n, t, n*n, n*t (t in ns) */
    uint32_t n_lo, n_hi;          /* the smallest and largest n seen */
} chunk_fit;

/* One stage's time for an act of c positions: fixed_ns + per_pos_ns * c. */
typedef struct {
    double fixed_ns;              /* per act: its weights read once, the kernels' set-up */
    double per_pos_ns;            /* per position: the arithmetic */
} chunk_stage;

/* The pipeline a prompt crosses: stages in route order and the links between them. */
typedef struct {
    const chunk_stage *st;        /* n_st stages (borrowed) */
    uint32_t n_st;
    double hop_ns;                /* per act per link: one-way delay plus send/receive work */
    double link_ns_per_pos;       /* per position per link: its bytes / the link's rate (0:
                                   * unlimited) */
} chunk_model;

void chunk_fit_add(chunk_fit *f, uint32_t n, uint64_t ns);

/* The fitted line into *s. 0; -1 while the acts seen span fewer than two sizes (a factor
 * 2 apart at least) and *s is untouched. A negative intercept or slope (noise) is clamped
 * at 0. */
int chunk_fit_line(const chunk_fit *f, chunk_stage *s);

/* Predicted ns for n positions in chunks of c: the first chunk crosses every stage and
 * link, each further one follows a bottleneck (the slowest stage or link) later. */
double chunk_plan_time(const chunk_model *m, uint32_t n, uint32_t c);

/* The c in [lo, hi] with the least chunk_plan_time (ties: the larger c); its time into
 * *pred_ns when not NULL. */
uint32_t chunk_plan_pick(const chunk_model *m, uint32_t n, uint32_t lo, uint32_t hi,
                         double *pred_ns);

/* A prompt of n positions on S hosts that split the whole model's line (*all: every stage's
 * fixed and per-position parts summed) evenly, in calls of span positions (the runner's,
 * drained between calls), each call in the chunk chunk_plan_pick finds in [lo, batch]
 * over links m->hop_ns / m->link_ns_per_pos (m->st ignored). The time into *pipe_ns and
 * one process's (no links, calls in batches one after another) into *one_ns; the last
 * call's chunk is returned. S <= 16. */
uint32_t chunk_plan_hosts(const chunk_stage *all, uint32_t S, const chunk_model *m, uint32_t n,
                          uint32_t span, uint32_t lo, uint32_t batch, double *pipe_ns,
                          double *one_ns);

#endif

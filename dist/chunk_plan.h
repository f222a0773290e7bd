/* chunk_plan.h — the pipelined prefill's chunk size from the stages' measured times and the
 * link profile: a least-squares model per stage (time = fixed + per position x positions +
 * per pair x the (query, key) pairs its attention scores + per pair x window x the pairs
 * weighted by each query's window, fed by the workers' result traces) and the pipeline's
 * schedule simulated over the chunk sizes. dist/
 */
#ifndef SWARM_DIST_CHUNK_PLAN_H
#define SWARM_DIST_CHUNK_PLAN_H

#include <stdint.h>

#define CHUNK_MAX_ST 16           /* stages a model may have */

#define CHUNK_PARTS 4

/* Sums over one stage's acts of several positions: what the model is fitted to. Zeroed =
 * empty. x = (1, n, pairs, squares), t in ns. */
typedef struct {
    double xx[CHUNK_PARTS][CHUNK_PARTS], xt[CHUNK_PARTS], tt; /* sums of x_i x_j, x_i t, t t
                                                                * (xx[0][0]: the count) */
    uint32_t n_lo, n_hi;          /* the smallest and largest n seen */
} chunk_fit;

/* One stage's time for an act of c positions from pos0: fixed_ns + per_pos_ns x c +
 * per_pair_ns x chunk_pairs(pos0, c) + per_sq_ns x chunk_squares(pos0, c). */
typedef struct {
    double fixed_ns;              /* per act: its weights read once, the kernels' set-up */
    double per_pos_ns;            /* per position: the matrices' arithmetic */
    double per_pair_ns;           /* per (query, key) pair: attention over the cache */
    double per_sq_ns;             /* per pair per key of its query's window: a key costs more
                                   * the longer the window it is read in (the cache's rows
                                   * leave the core's caches as it grows) */
} chunk_stage;

/* The pipeline a prompt crosses: stages in route order and the links between them. */
typedef struct {
    const chunk_stage *st;        /* n_st stages (borrowed), n_st <= CHUNK_MAX_ST */
    uint32_t n_st;
    double hop_ns;                /* per act per link: one-way delay plus send/receive work */
    double link_ns_per_pos;       /* per position per link: its bytes / the link's rate (0:
                                   * unlimited) */
    uint32_t window;              /* chunks in flight at most (0: unlimited): chunk j leaves
                                   * when chunk j - window is back */
} chunk_model;

/* The (query, key) pairs a causal act of c positions from pos0 scores: c x pos0 +
 * c (c + 1) / 2 (the sum of its queries' windows, pos0 + 1 .. pos0 + c). */
double chunk_pairs(uint32_t pos0, uint32_t c);

/* The sum of its queries' windows squared: (pos0 + 1)^2 + ... + (pos0 + c)^2. */
double chunk_squares(uint32_t pos0, uint32_t c);

/* A stage's time for an act of c positions from pos0 (ns). */
double chunk_stage_ns(const chunk_stage *s, uint32_t pos0, uint32_t c);

/* One act of n positions that scored pairs (query, key) pairs with squares its windows squared
 * (chunk_pairs, chunk_squares for one session's positions; their sums for several sessions'
 * segments) in ns. */
void chunk_fit_add(chunk_fit *f, uint32_t n, double pairs, double squares, uint64_t ns);

/* The fitted model into *s: least squares with every part >= 0 (the best of the fits with
 * some parts held at 0, where the free fit has one below: noise). 0; -1 while the acts seen
 * span fewer than two sizes (a factor 2 apart at least) and *s is untouched. */
int chunk_fit_line(const chunk_fit *f, chunk_stage *s);

/* Predicted ns for n positions from pos0 in chunks of c (the last one less): the pipeline's
 * schedule, chunk by chunk (a stage takes a chunk when it has finished the one before and
 * the chunk has crossed the link to it; a link's bytes hold it, its delay does not). */
double chunk_plan_time(const chunk_model *m, uint32_t pos0, uint32_t n, uint32_t c);

/* The c in [lo, hi] with the least chunk_plan_time (ties: the larger c); its time into
 * *pred_ns when not NULL. */
uint32_t chunk_plan_pick(const chunk_model *m, uint32_t pos0, uint32_t n, uint32_t lo,
                         uint32_t hi, double *pred_ns);

/* A prompt of n positions on S hosts that split the whole model (*all: every stage's parts
 * summed) evenly, in calls of span positions (the runner's, drained between calls), each
 * call in the chunk chunk_plan_pick finds in [lo, batch] over links m->hop_ns /
 * m->link_ns_per_pos (m->st ignored; S + 1 chunks in flight, as s_prefill_locked). The time
 * into *pipe_ns and one process's (no links, batches one after another) into *one_ns; the
 * last call's chunk is returned. S <= CHUNK_MAX_ST. */
uint32_t chunk_plan_hosts(const chunk_stage *all, uint32_t S, const chunk_model *m, uint32_t n,
                          uint32_t span, uint32_t lo, uint32_t batch, double *pipe_ns,
                          double *one_ns);

#endif

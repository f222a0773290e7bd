/* slice.h — a worker's range of a real model: its layers resident through the executor, a KV
 * cache per (session, layer), batches of positions, a session's caches freed when it ends.
 * The workers' code, and the coordinator's when it runs a lost worker's layers itself.
 * runtime/
 *
 * Every byte is planned before anything is loaded: the range's weights, the layer run for
 * max_batch positions, and as held bytes the KV caches of every session slot (sessions x
 * n_ctx positions x each layer's K and V in f32), the messages and the attention rows
 * (slice_held_bytes): the rule the coordinator's partitioner prices with, so a range it
 * assigns under a cap is a range the worker accepts, and a cap that cannot hold it is refused
 * with the executor's numbers. The caches of a slot are allocated when a session first uses
 * it and freed when the session ends (or the slice is freed).
 *
 * A stateless architecture (the dense lab model: no layer keeps a KV cache) has no slots to
 * fill: every step is independent, whatever its session (0 included) and positions (the
 * context bound too: they are a caller's numbering), so steps may run in any order and
 * several be in flight at once.
 *
 * Positions are written by index: a step at pos0 of n positions writes cache rows pos0 ..
 * pos0+n-1 and attends over 0 .. pos0+n-1, so a step may start anywhere up to the first
 * position not yet cached (a replay from 0 rewrites the same rows with the same bits) but
 * never past it (a gap would attend over rows never written).
 */
#ifndef SWARM_SLICE_H
#define SWARM_SLICE_H

#include <stddef.h>
#include <stdint.h>

#include "arch/arch.h"
#include "runtime/exec.h"

typedef struct {
    const char *path;             /* the model file */
    uint32_t first, last;         /* layers [first, last) */
    uint32_t n_ctx;               /* positions per session's cache (<= the model's context) */
    uint32_t sessions;            /* session slots */
    uint32_t max_batch;           /* positions per step */
    uint64_t cap_bytes;           /* working-set cap (0 = none) */
    int threads;                  /* compute threads (same bits for any count) */
    const uint64_t *expect_sums;  /* the coordinator's checksums of layers first..last-1, or
                                   * NULL: a layer whose sum differs is refused */
    const exec_opts *exec;        /* the executor's options as the caller planned them (a
                                   * coordinator's fallback: resident what fits under
                                   * budget_bytes, the rest streamed), or NULL: a worker's
                                   * (everything resident under cap_bytes, what the slice
                                   * holds beside its layers planned in) */
} slice_opts;

typedef struct slice slice_t;

/* Bytes a range holds beside its layers and KV caches: one message in and one out of
 * max_batch x dim f32 with 4 KiB of envelope each, and one attention row of n_ctx per compute
 * thread. The partitioner prices a worker with the same rule (dist/partition.c). */
uint64_t slice_held_bytes(const arch_model *am, uint32_t max_batch, uint32_t n_ctx,
                          uint32_t threads);

/* Open, plan under the cap, load and verify the range resident. NULL with err naming the
 * file, the range or the budget that is short and by how much. */
slice_t *slice_new(const slice_opts *o, char *err, size_t errlen);
/* The same; *cap_short is set to 1 when the refusal is the cap's (the plan does not fit). */
slice_t *slice_new_ex(const slice_opts *o, int *cap_short, char *err, size_t errlen);
/* Weight bytes loaded resident. */
uint64_t slice_loaded_bytes(const slice_t *s);
void slice_free(slice_t **s);
/* Run the range over x (n x dim f32, row-major, in place) at positions pos0.. of session
 * (>= 1), taking a free slot for a new session. -1 with err naming the session when n is not
 * 1..max_batch, the positions pass n_ctx or leave a gap, or every slot holds a live session. */
int slice_step(slice_t *s, uint64_t session, uint32_t pos0, uint32_t n, float *x, char *err,
               size_t errlen);
/* The same, adding what the executor did to *st (reads, waits, content-gate hashes). */
int slice_step_stats(slice_t *s, uint64_t session, uint32_t pos0, uint32_t n, float *x,
                     exec_stats *st, char *err, size_t errlen);
/* One session's rows of a step of several (continuous batching on the resident arm). */
typedef struct {
    uint64_t session;             /* >= 1 */
    uint32_t pos0, n;
} slice_seg;
#define SLICE_MAX_SEGS EXEC_MAX_SEGS
/* Run the range once over k sessions' rows, one segment after another in x (their n summing
 * to at most max_batch): each weight is read once for all rows (exec_step_segs) and every
 * row's bits are those its session's step alone would give. Each segment is checked as
 * slice_step checks a step, a session may appear once, and nothing runs unless every segment
 * passes (-1 with err naming the session). A stateless range takes one segment only. */
int slice_step_segs(slice_t *s, const slice_seg *segs, uint32_t k, float *x, exec_stats *st,
                    char *err, size_t errlen);
/* Does the range keep no state between steps (no KV cache: the dense lab model)? */
int slice_stateless(const slice_t *s);
/* Wait for every read in flight (before /proc/self/io is read for the cache gate). */
void slice_drain(slice_t *s);
/* Free a session's caches: 1 when it had a slot, 0 when it had none (already ended, or never
 * ran here: a session end goes to every worker). */
int slice_end(slice_t *s, uint64_t session);
uint32_t slice_dim(const slice_t *s);
uint32_t slice_live(const slice_t *s);        /* sessions holding a slot */
uint64_t slice_kv_alloc_bytes(const slice_t *s); /* caches allocated now */
/* Positions cached for session (0 when it holds no slot). */
uint32_t slice_cached(const slice_t *s, uint64_t session);
const exec_plan *slice_plan(const slice_t *s);

#endif

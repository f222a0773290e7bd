/* compute.h — the worker's compute thread: one activation at a time, off the control loop. dist/
 *
 * Why a thread: a worker that computes on its control loop answers heartbeats only between
 * activations, so its liveness would depend on how long one activation takes (a Pi-class
 * worker holding a slice of a real model can take seconds). Here the loop hands an activation
 * to this thread and goes on answering the control plane; the thread signals completion on
 * an eventfd the loop polls. The loop never touches the slice or the activation buffer while a
 * job runs, and waits for the job (compute_wait) before it frees or replaces the slice.
 *
 * Ownership: the caller owns the slice and the float buffer; the thread borrows both for the
 * duration of one job. All ZeroMQ sockets stay on the loop's thread.
 */
#ifndef SWARM_WORKER_COMPUTE_H
#define SWARM_WORKER_COMPUTE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/exec.h"
#include "runtime/slice.h"

typedef struct compute compute_t;

/* Start the thread. slowdown >= 1: each activation is computed that many times (all but the
 * last on a scratch copy, so the output is unchanged): a test knob that makes this worker as
 * slow as a machine `slowdown` times slower, with real work, on any machine. */
compute_t *compute_new(uint32_t slowdown, char *err, size_t errlen);
/* Join the thread (waits for a running job) and free; *c becomes NULL. */
void compute_free(compute_t **c);
/* An fd that is readable when a job has finished (poll it; compute_collect clears it). */
int compute_fd(const compute_t *c);
/* Run slice_step(s, session, pos0, n, x) on the thread: x is n x dim floats. A slowdown's
 * extra passes run on a copy and rewrite the same cache rows with the same bits (rows are
 * written by position), so the outcome is unchanged. -1 if a job is already running or
 * collectable. */
int compute_start(compute_t *c, slice_t *s, uint64_t session, uint32_t pos0, uint32_t n,
                  float *x, uint32_t dim);
/* The same over k sessions' segments, one after another in x (slice_step_segs; the segments
 * are copied). -1 as compute_start, or k outside 1..SLICE_MAX_SEGS. */
int compute_start_segs(compute_t *c, slice_t *s, const slice_seg *segs, uint32_t k, float *x,
                       uint32_t dim);
/* 1 and the job's outcome if a finished job was waiting (0 ok, else err filled), 0 if none. */
int compute_collect(compute_t *c, int *rc, exec_stats *st, uint64_t *compute_ns, char *err,
                    size_t errlen);
/* Is a job running or waiting to be collected? */
int compute_busy(const compute_t *c);
/* How long the running job has been computing (0 when idle or finished). */
uint64_t compute_busy_ns(const compute_t *c, uint64_t now_ns);
/* Block until no job runs, then drop any uncollected outcome (before freeing the slice). */
void compute_wait(compute_t *c);

#endif

/* compute.c — the worker's compute thread (see compute.h for why it exists). dist/ */
#include "dist/compute.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

/* The slowdown knob is for tests: a bound keeps a mistyped value from freezing a worker. */
#define COMPUTE_MAX_SLOWDOWN 100000u
/* The compute thread runs at the process's own priority, as the reference arm's compute does.
 * It used to run at nice +5 so that the control loop would win a busy core for heartbeats;
 * on a machine shared with other jobs that cost the workers two thirds of their share of a
 * core (CFS weight 335 against 1024) and kept the resident arm at about 0.74 of the
 * reference's pace (docs/measurements/2026-12-02-pace.md). The heartbeats keep their edge
 * the other way round: the control loop's thread runs at nice -5 where it may and starts this
 * one at nice 0 (worker.c s_control_priority). */

enum { S_IDLE = 0, S_QUEUED, S_RUNNING, S_DONE };

struct compute {
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int efd;                   /* eventfd: one count per finished job */
    int state;                 /* S_*, under mu */
    int quit;                  /* under mu */
    uint32_t slowdown;
    /* the job (set by the loop in IDLE, read by the thread, outcome written in RUNNING) */
    slice_t *sl;               /* the range: k sessions' segments, n positions in all */
    slice_seg segs[SLICE_MAX_SEGS];
    uint32_t k, n;
    float *x;                  /* (n x dim) the activation, computed in place */
    float *scratch;            /* (dim,) slowdown copies; grown by the loop while IDLE */
    uint32_t dim, scratch_dim;
    uint64_t started_ns;       /* when the job was handed over, under mu */
    int rc;
    exec_stats st;
    uint64_t compute_ns;
    char err[256];
};

static void s_run(compute_t *c)
{
    exec_stats st = { 0 };
    char err[sizeof c->err] = "";
    uint64_t t0 = util_now_ns();
    int rc = 0;
    /* Extra passes over a copy: the same work as the real pass, output discarded. */
    for (uint32_t k = 1; k < c->slowdown && rc == 0; k++) {
        exec_stats junk = { 0 };
        memcpy(c->scratch, c->x, sizeof(float) * c->dim * c->n);
        rc = slice_step_segs(c->sl, c->segs, c->k, c->scratch, &junk, err, sizeof err);
    }
    if (rc == 0)
        rc = slice_step_segs(c->sl, c->segs, c->k, c->x, &st, err, sizeof err);
    c->compute_ns = util_now_ns() - t0;
    c->st = st;
    c->rc = rc;
    memcpy(c->err, err, sizeof err);
}

static void *s_main(void *arg)
{
    compute_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->state != S_QUEUED && !c->quit)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->quit && c->state != S_QUEUED)
            break;
        c->state = S_RUNNING;
        pthread_mutex_unlock(&c->mu);
        s_run(c);
        pthread_mutex_lock(&c->mu);
        c->state = S_DONE;
        pthread_cond_broadcast(&c->cv);
        uint64_t one = 1;
        if (write(c->efd, &one, sizeof one) != sizeof one) {
            /* An eventfd write fails only on counter overflow: the loop still sees DONE. */
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

compute_t *compute_new(uint32_t slowdown, char *err, size_t errlen)
{
    compute_t *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->efd = -1;
    c->slowdown = slowdown ? slowdown : 1;
    if (c->slowdown > COMPUTE_MAX_SLOWDOWN) {
        snprintf(err, errlen, "slowdown %u is over %u", c->slowdown, COMPUTE_MAX_SLOWDOWN);
        goto err;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->efd < 0) {
        snprintf(err, errlen, "eventfd: %s", strerror(errno));
        goto err;
    }
    int rc = pthread_create(&c->thread, NULL, s_main, c);
    if (rc) {
        snprintf(err, errlen, "pthread_create: %s", strerror(rc));
        goto err;
    }
    c->started = 1;
    return c;
err:
    compute_free(&c);
    return NULL;
}

void compute_free(compute_t **cp)
{
    compute_t *c = cp ? *cp : NULL;
    if (!c)
        return;
    if (c->started) {
        pthread_mutex_lock(&c->mu);
        c->quit = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
    }
    if (c->efd >= 0)
        close(c->efd);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->scratch);
    free(c);
    *cp = NULL;
}

int compute_fd(const compute_t *c)
{
    return c->efd;
}

int compute_start(compute_t *c, slice_t *sl, uint64_t session, uint32_t pos0, uint32_t n,
                  float *x, uint32_t dim)
{
    slice_seg one = { .session = session, .pos0 = pos0, .n = n };
    return compute_start_segs(c, sl, &one, 1, x, dim);
}

int compute_start_segs(compute_t *c, slice_t *sl, const slice_seg *segs, uint32_t k, float *x,
                       uint32_t dim)
{
    pthread_mutex_lock(&c->mu);
    int idle = c->state == S_IDLE;
    pthread_mutex_unlock(&c->mu);
    uint32_t n = 0;
    for (uint32_t i = 0; i < k && k <= SLICE_MAX_SEGS; i++)
        n += segs[i].n;
    if (!idle || !sl || !x || !dim || !n || !k || k > SLICE_MAX_SEGS)
        return -1;
    /* IDLE: the thread does not touch the job fields, so they are ours to set. */
    if (c->slowdown > 1 && c->scratch_dim < dim * n) {
        float *s = realloc(c->scratch, sizeof(float) * dim * n);
        if (!s)
            return -1;
        c->scratch = s;
        c->scratch_dim = dim * n;
    }
    c->sl = sl;
    memcpy(c->segs, segs, k * sizeof *segs);
    c->k = k;
    c->n = n;
    c->x = x;
    c->dim = dim;
    pthread_mutex_lock(&c->mu);
    c->state = S_QUEUED;
    c->started_ns = util_now_ns();
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int compute_collect(compute_t *c, int *rc, exec_stats *st, uint64_t *compute_ns, char *err,
                    size_t errlen)
{
    uint64_t n;
    pthread_mutex_lock(&c->mu);
    int done = c->state == S_DONE;
    if (done)
        c->state = S_IDLE;
    pthread_mutex_unlock(&c->mu);
    if (!done)
        return 0;
    while (read(c->efd, &n, sizeof n) == sizeof n)
        ; /* clear the count: the fd is level-triggered in poll */
    *rc = c->rc;
    if (st)
        *st = c->st;
    if (compute_ns)
        *compute_ns = c->compute_ns;
    snprintf(err, errlen, "%s", c->err);
    return 1;
}

int compute_busy(const compute_t *c)
{
    compute_t *m = (compute_t *)c; /* the mutex is not part of the observable state */
    pthread_mutex_lock(&m->mu);
    int busy = c->state != S_IDLE;
    pthread_mutex_unlock(&m->mu);
    return busy;
}

uint64_t compute_busy_ns(const compute_t *c, uint64_t now_ns)
{
    compute_t *m = (compute_t *)c;
    pthread_mutex_lock(&m->mu);
    int on = c->state == S_QUEUED || c->state == S_RUNNING;
    uint64_t b = on && now_ns > c->started_ns ? now_ns - c->started_ns : 0;
    pthread_mutex_unlock(&m->mu);
    return b;
}

void compute_wait(compute_t *c)
{
    if (!c)
        return;
    uint64_t n;
    pthread_mutex_lock(&c->mu);
    while (c->state == S_QUEUED || c->state == S_RUNNING)
        pthread_cond_wait(&c->cv, &c->mu);
    c->state = S_IDLE;
    pthread_mutex_unlock(&c->mu);
    while (read(c->efd, &n, sizeof n) == sizeof n)
        ;
}

/* matvec.c — matrix-vector and matrix-matrix products over a small pthread pool. quant/
 *
 * Work is split by output rows only: each output element is one quant_vec_dot over one whole
 * row, computed by whichever thread owns that row, so the bits of y do not depend on the
 * thread count or on batching (quant.h). The pool is process-wide and grows on demand; its
 * threads sleep on a condition variable between products. Each activation is brought into its
 * type's form once (a batch's positions shared out over the threads), then the calling thread
 * takes share 0 of the rows itself. A batch goes through a batched kernel where the type has
 * one (gemm.h), else through the tiles below or one dot per pair: the same bits either way.
 */
#include "quant/gemm.h"
#include "quant/quant_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    pthread_mutex_t mu;       /* guards every field below */
    pthread_cond_t go;        /* a new generation of work (or quit) */
    pthread_cond_t done;      /* pending reached 0, or running did in a closed job */
    pthread_t th[QUANT_MAX_THREADS];
    int nth;                  /* worker threads running (the caller is not one of them) */
    uint64_t gen;             /* bumped once per job */
    quant_task_fn fn;
    void *arg;
    int job_n;                /* shares in the current job; worker i runs share i if i < job_n */
    int pending;              /* workers that have not finished the current generation */
    int closed;               /* a claiming job's work is all taken: no worker starts it now */
    int running;              /* workers inside the current job's fn */
    int quit;
} s_pool_t;

static s_pool_t s_pool = { .mu = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER,
                           .done = PTHREAD_COND_INITIALIZER };
/* One product at a time: it owns the pool and the scratch below. */
static pthread_mutex_t s_call_mu = PTHREAD_MUTEX_INITIALIZER;
static void *s_act;           /* activation scratch, s_act_cap bytes (grown, never shrunk) */
static size_t s_act_cap;
static void *s_panel;         /* a batched kernel's panel (gemm.h), 64-aligned, s_panel_cap */
static size_t s_panel_cap;

typedef struct {
    int idx;                  /* 1..QUANT_MAX_THREADS-1 */
    uint64_t gen0;            /* the generation current when it was created: not its work */
} s_worker_arg;
static s_worker_arg s_wargs[QUANT_MAX_THREADS];

/* How long a thread polls before it sleeps on a condition variable: a decode step posts ~8 jobs
 * a layer (q, k, v, o, gate, up, down, attention), ~180 a TinyLlama token, each a fraction of a
 * millisecond apart, and a futex wake-up of a sleeping vCPU sits on the step's critical path
 * (the woken thread's share starts that late). Polling bridges the gap between two products of
 * one step; a pool idle for longer (between requests) sleeps as before. 250k TSC cycles is
 * ~100 us at this VM's 2-3 GHz. Measured (2026-12-03-table.md, 2 threads, TinyLlama shape,
 * quiet): generation 1.24-1.42x of sleeping at once (Q8_0, Q6_K, Q4_0). No pause instruction
 * in the loop: a first version that polled with pause was 3-5% slower than sleeping on every
 * type (loaded machine; likely, not verified: pause-loop exiting lets the hypervisor deschedule
 * a vCPU spinning on it). Only timing depends on this, never the bits. */
#define S_SPIN_CYCLES 250000ull

static inline uint64_t s_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec; /* ~1 tick a ns */
#endif
}

/* Poll until *p differs from v, quit is set or S_SPIN_CYCLES pass. Lock-free reads of fields
 * written under s_pool.mu: only a hint, the caller re-checks under the lock. */
static void s_spin_while_u64(const uint64_t *p, uint64_t v)
{
    const uint64_t t0 = s_ticks();
    while (__atomic_load_n(p, __ATOMIC_ACQUIRE) == v &&
           !__atomic_load_n(&s_pool.quit, __ATOMIC_RELAXED))
        if (s_ticks() - t0 > S_SPIN_CYCLES)
            return;
}

static void s_spin_while_pending(void)
{
    const uint64_t t0 = s_ticks();
    while (__atomic_load_n(&s_pool.pending, __ATOMIC_ACQUIRE) > 0)
        if (s_ticks() - t0 > S_SPIN_CYCLES)
            return;
}

static void *s_worker(void *p)
{
    const int me = ((s_worker_arg *)p)->idx;
    uint64_t seen = ((s_worker_arg *)p)->gen0;
    pthread_mutex_lock(&s_pool.mu);
    for (;;) {
        if (s_pool.gen == seen && !s_pool.quit) {
            pthread_mutex_unlock(&s_pool.mu);
            s_spin_while_u64(&s_pool.gen, seen);
            pthread_mutex_lock(&s_pool.mu);
        }
        while (s_pool.gen == seen && !s_pool.quit)
            pthread_cond_wait(&s_pool.go, &s_pool.mu);
        if (s_pool.quit)
            break;
        seen = s_pool.gen;
        if (me < s_pool.job_n && !s_pool.closed) {
            quant_task_fn fn = s_pool.fn;
            void *arg = s_pool.arg;
            int n = s_pool.job_n;
            __atomic_add_fetch(&s_pool.running, 1, __ATOMIC_RELAXED);
            pthread_mutex_unlock(&s_pool.mu);
            fn(arg, me, n);
            pthread_mutex_lock(&s_pool.mu);
            if (__atomic_sub_fetch(&s_pool.running, 1, __ATOMIC_RELEASE) == 0 && s_pool.closed)
                pthread_cond_signal(&s_pool.done);
        }
        if (__atomic_sub_fetch(&s_pool.pending, 1, __ATOMIC_RELEASE) == 0)
            pthread_cond_signal(&s_pool.done);
    }
    pthread_mutex_unlock(&s_pool.mu);
    return NULL;
}

/* A child of fork() has none of the pool's threads (and may have copied a lock held by one):
 * it starts from an empty pool. */
static void s_atfork_child(void)
{
    pthread_mutex_init(&s_pool.mu, NULL);
    pthread_cond_init(&s_pool.go, NULL);
    pthread_cond_init(&s_pool.done, NULL);
    pthread_mutex_init(&s_call_mu, NULL);
    s_pool.nth = 0;
    s_pool.pending = 0;
    s_pool.closed = 0;
    s_pool.running = 0;
    s_pool.quit = 0;
}

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static void s_init_once(void)
{
    pthread_atfork(NULL, NULL, s_atfork_child);
}

/* Start workers until there are n - 1 of them. Caller holds s_call_mu. */
static int s_grow(int n, char *err, size_t errlen)
{
    pthread_once(&s_once, s_init_once);
    while (s_pool.nth < n - 1) {
        int i = s_pool.nth + 1;
        /* The worker waits for the generation after the one current now; reading gen in
         * the thread instead could miss a job posted before it first takes the lock. */
        pthread_mutex_lock(&s_pool.mu);
        s_wargs[i].idx = i;
        s_wargs[i].gen0 = s_pool.gen;
        int rc = pthread_create(&s_pool.th[s_pool.nth], NULL, s_worker, &s_wargs[i]);
        if (!rc)
            s_pool.nth++;
        pthread_mutex_unlock(&s_pool.mu);
        if (rc) {
            snprintf(err, errlen, "cannot start pool thread %d: %s", i, strerror(rc));
            return -1;
        }
    }
    return 0;
}

static void s_spin_while_running(void)
{
    const uint64_t t0 = s_ticks();
    while (__atomic_load_n(&s_pool.running, __ATOMIC_ACQUIRE) > 0)
        if (s_ticks() - t0 > S_SPIN_CYCLES)
            return;
}

/* Run a job of n shares. Caller holds s_call_mu and has grown the pool to n.
 *
 * claims: the shares take their work from a counter until none is left (s_rows), so once the
 * calling thread's share returns every piece is taken, and a worker that has not started yet
 * would find nothing: the job is closed then, and only workers already inside it are waited
 * for. A worker whose vCPU the host or another process holds no longer stalls the product at
 * its end (docs/measurements/2026-12-03-claims.md). Other jobs (fixed shares) wait for
 * every worker as before. */
static void s_run(int n, quant_task_fn fn, void *arg, int claims)
{
    if (n > 1) {
        pthread_mutex_lock(&s_pool.mu);
        s_pool.fn = fn;
        s_pool.arg = arg;
        s_pool.job_n = n;
        s_pool.closed = 0;
        __atomic_store_n(&s_pool.pending, s_pool.nth, __ATOMIC_RELAXED);
        __atomic_store_n(&s_pool.gen, s_pool.gen + 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&s_pool.go);
        pthread_mutex_unlock(&s_pool.mu);
    }
    fn(arg, 0, n);
    if (n > 1 && claims) {
        pthread_mutex_lock(&s_pool.mu);
        s_pool.closed = 1;
        pthread_mutex_unlock(&s_pool.mu);
        s_spin_while_running();
        pthread_mutex_lock(&s_pool.mu);
        while (s_pool.running > 0)
            pthread_cond_wait(&s_pool.done, &s_pool.mu);
        pthread_mutex_unlock(&s_pool.mu);
    } else if (n > 1) {
        s_spin_while_pending();
        pthread_mutex_lock(&s_pool.mu);
        while (s_pool.pending > 0)
            pthread_cond_wait(&s_pool.done, &s_pool.mu);
        pthread_mutex_unlock(&s_pool.mu);
    }
}

static int s_check_threads(int nthreads, char *err, size_t errlen)
{
    if (nthreads < 1 || nthreads > QUANT_MAX_THREADS) {
        snprintf(err, errlen, "thread count %d is outside 1..%d", nthreads, QUANT_MAX_THREADS);
        return -1;
    }
    return 0;
}

static int s_pool_job(int nthreads, quant_task_fn fn, void *arg, int claims, char *err,
                      size_t errlen)
{
    int rc = -1;
    if (s_check_threads(nthreads, err, errlen))
        return -1;
    pthread_mutex_lock(&s_call_mu);
    if (s_grow(nthreads, err, errlen) == 0) {
        s_run(nthreads, fn, arg, claims);
        rc = 0;
    }
    pthread_mutex_unlock(&s_call_mu);
    return rc;
}

int quant_pool_run(int nthreads, quant_task_fn fn, void *arg, char *err, size_t errlen)
{
    return s_pool_job(nthreads, fn, arg, 0, err, errlen);
}

int quant_pool_claim(int nthreads, quant_task_fn fn, void *arg, char *err, size_t errlen)
{
    return s_pool_job(nthreads, fn, arg, 1, err, errlen);
}

void quant_pool_shutdown(void)
{
    pthread_mutex_lock(&s_call_mu);
    pthread_mutex_lock(&s_pool.mu);
    __atomic_store_n(&s_pool.quit, 1, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&s_pool.go);
    pthread_mutex_unlock(&s_pool.mu);
    for (int i = 0; i < s_pool.nth; i++)
        pthread_join(s_pool.th[i], NULL);
    s_pool.nth = 0;
    s_pool.quit = 0;
    free(s_act);
    s_act = NULL;
    s_act_cap = 0;
    free(s_panel);
    s_panel = NULL;
    s_panel_cap = 0;
    pthread_mutex_unlock(&s_call_mu);
}

/* ---------------------------------------------------------------- products */

/* Weight rows kept hot while a batch of positions uses them: a group of rows is at most this
 * many bytes (half of the 1 MiB per-core L2 of the development machines' EPYC, so the
 * positions' activations fit beside it), and positions are taken this many at a time so each
 * row is read from L1 by all of them; within that, 2 rows x 4 positions go through a tile
 * kernel where the ISA has one. Only speed depends on these, never the bits. */
#define S_GROUP_BYTES (512u << 10)
#define S_POS_TILE 8

typedef struct {
    quant_dot_fn dot;
    quant_tile_fn tile;       /* 2 rows x 4 positions at once, or NULL */
    const quant_gemm *gemm;   /* the batched kernel (gemm.h), or NULL */
    quant_gemm_args ga;       /* its operands (ga.scratch: share 0's scratch) */
    uint64_t scratch_stride;  /* bytes between shares' scratch */
    uint64_t rows, cols, B;
    const uint8_t *W;
    uint64_t row_bytes;
    const uint8_t *act;       /* B activations, act_bytes apart */
    uint64_t act_bytes;
    float *Y;                 /* (B, rows) */
    uint64_t chunk;           /* rows are claimed this many at a time (s_chunk_rows) ... */
    uint64_t next;            /* ... the next chunk to claim (atomic) */
} s_job;

/* Rows [g, g1) against positions [b0, b1): tiles where they fit, single dots for the edges. */
static void s_block(const s_job *j, uint64_t g, uint64_t g1, uint64_t b0, uint64_t b1)
{
    uint64_t r = g;
    if (j->tile) {
        for (; r + QUANT_TILE_ROWS <= g1; r += QUANT_TILE_ROWS) {
            const void *w[QUANT_TILE_ROWS] = { j->W + r * j->row_bytes,
                                               j->W + (r + 1) * j->row_bytes };
            uint64_t b = b0;
            for (; b + QUANT_TILE_POS <= b1; b += QUANT_TILE_POS) {
                const void *a[QUANT_TILE_POS];
                float out[QUANT_TILE_ROWS * QUANT_TILE_POS];
                for (int p = 0; p < QUANT_TILE_POS; p++)
                    a[p] = j->act + (b + (uint64_t)p) * j->act_bytes;
                j->tile(j->cols, w, a, out);
                for (int q = 0; q < QUANT_TILE_ROWS; q++)
                    for (int p = 0; p < QUANT_TILE_POS; p++)
                        j->Y[(b + (uint64_t)p) * j->rows + r + (uint64_t)q] =
                            out[q * QUANT_TILE_POS + p];
            }
            for (; b < b1; b++)
                for (int q = 0; q < QUANT_TILE_ROWS; q++)
                    j->Y[b * j->rows + r + (uint64_t)q] =
                        j->dot(j->cols, w[q], j->act + b * j->act_bytes);
        }
    }
    for (; r < g1; r++) {
        const uint8_t *w = j->W + r * j->row_bytes;
        for (uint64_t b = b0; b < b1; b++)
            j->Y[b * j->rows + r] = j->dot(j->cols, w, j->act + b * j->act_bytes);
    }
}

/* Rows [r0, r1) of a batch (one chunk, at most a group that stays in L2 while every position
 * uses it) against all positions, with share i's scratch. */
static void s_batch_rows(const s_job *j, int i, uint64_t r0, uint64_t r1)
{
    if (j->gemm) {
        quant_gemm_args ga = j->ga;
        if (ga.scratch)
            ga.scratch += (uint64_t)i * j->scratch_stride;
        j->gemm->run(&ga, r0, r1, 0, j->B);
        return;
    }
    for (uint64_t b0 = 0; b0 < j->B; b0 += S_POS_TILE)
        s_block(j, r0, r1, b0, b0 + S_POS_TILE < j->B ? b0 + S_POS_TILE : j->B);
}

/* A product's rows are claimed a chunk at a time (s_chunk_rows) rather than split in fixed
 * shares: on this VM a vCPU loses part of its time to the host for seconds at a stretch, and
 * with fixed shares the other thread then waited at every product's end; a worker that wakes
 * late also leaves its chunks to the thread already running. */
static void s_rows(void *p, int i, int n)
{
    (void)n;
    s_job *j = p;
    for (;;) {
        const uint64_t r0 = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED) * j->chunk;
        if (r0 >= j->rows)
            return;
        const uint64_t r1 = r0 + j->chunk < j->rows ? r0 + j->chunk : j->rows;
        if (j->B > 1) {
            s_batch_rows(j, i, r0, r1);
            continue;
        }
        /* One row at a time, front to back: one sequential stream per chunk. A kernel taking
         * two rows at once to share the activation's loads streamed far worse (bench-quant,
         * 2026-12-01, 1 thread: Q8_0 0.32-0.36 of the read bound against 0.78-0.82, F16
         * 0.53-0.56 against 0.74-0.83); with the kernels' prefetch (quant_int.h) a two-row
         * Q4_0 kernel was 5% faster in cache and 1-2.5% slower streaming from DRAM, where
         * products run (5632 x 2048, 1 thread, alternating runs, later that day). */
        for (uint64_t r = r0; r < r1; r++)
            j->Y[r] = j->dot(j->cols, j->W + r * j->row_bytes, j->act);
    }
}

/* Rows a thread claims at a time. With more than one thread at most an eighth of a thread's
 * share, so a slow thread leaves the others at most a small chunk to wait for. A batch's chunk
 * is also at most a group that stays in L2 (S_GROUP_BYTES), in whole 32-row tiles where a group
 * holds 64 rows or more (the batched kernels of Q8_0/Q4_0 keep rows in lanes; an edge falls to
 * single dots), but not cut below that: F16's 5632-wide rows make 46-row groups, and cut to 32
 * its panel kernel reused each read of the batch's activations over fewer rows (f16pp,
 * 2026-12-03). Only speed depends on it, never the bits: every row is one row kernel's result
 * wherever it runs. */
static uint64_t s_chunk_rows(const s_job *j, int n)
{
    const uint64_t share = n == 1 ? j->rows
                                  : (j->rows + 8u * (uint64_t)n - 1) / (8u * (uint64_t)n);
    if (j->B == 1)
        return share;
    const uint64_t group = S_GROUP_BYTES / (j->row_bytes ? j->row_bytes : 1);
    uint64_t c = group < share ? group : share;
    if (c >= 32 && group >= 64)
        c -= c % 32;
    else if (c < 32 && group >= 32)
        c = 32;
    return c < QUANT_TILE_ROWS ? QUANT_TILE_ROWS : c;
}

/* Activation forms of a batch's positions: up to this many elements (4 positions of
 * TinyLlama's 5632-wide FFN) by the calling thread alone. */
#define S_PREP_ALONE (4u * 5632u)

/* Activation forms of a batch's positions, claimed S_PREP_CHUNK positions at a time. */
typedef struct {
    quant_type t;
    uint64_t cols, B;
    const float *X;
    uint8_t *act;
    uint64_t act_bytes;
    const quant_gemm *gemm;   /* pack into panel too, or NULL */
    uint8_t *panel;
    uint64_t bad[QUANT_MAX_THREADS]; /* per share: the first position that failed, or B */
    char why[QUANT_MAX_THREADS][160];
    uint64_t next;            /* the next S_PREP_CHUNK of positions to claim (atomic) */
} s_prep;

/* Positions a thread claims at a time for their activation forms. */
#define S_PREP_CHUNK 16u

static void s_prep_task(void *arg, int i, int n)
{
    (void)n;
    s_prep *p = arg;
    for (;;) {
        const uint64_t b0 = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED) * S_PREP_CHUNK;
        if (b0 >= p->B)
            return;
        const uint64_t b1 = b0 + S_PREP_CHUNK < p->B ? b0 + S_PREP_CHUNK : p->B;
        for (uint64_t b = b0; b < b1; b++)
            if (quant_act_prepare(p->t, p->X + b * p->cols, p->cols, p->act + b * p->act_bytes,
                                  p->why[i], sizeof p->why[i])) {
                if (b < p->bad[i])
                    p->bad[i] = b;
                return;
            }
        if (p->gemm)
            p->gemm->pack(p->cols, p->B, p->act, p->act_bytes, p->panel, b0, b1);
    }
}

static int s_product(quant_type t, uint64_t rows, uint64_t cols, const void *W, uint64_t B,
                     const float *X, float *Y, int nthreads, char *err, size_t errlen)
{
    s_job j = { .rows = rows, .cols = cols, .B = B, .W = W, .Y = Y };
    uint64_t wbytes;
    int rc = -1;
    if (s_check_threads(nthreads, err, errlen) ||
        quant_tensor_bytes(t, rows, cols, &wbytes, err, errlen) ||
        quant_row_bytes(t, cols, &j.row_bytes, err, errlen) ||
        quant_act_bytes(t, cols, &j.act_bytes, err, errlen))
        return -1;
    /* Elements are read as their C types (f32, uint16 halves, the blocks' uint16 scales), so
     * W must be aligned to them (every row size is a multiple of that alignment): a file's
     * tensor data is (GGUF aligns to 32), a stray pointer may not be. */
    const uintptr_t align = t == QUANT_F32 ? 4 : 2;
    if ((uintptr_t)W % align) {
        snprintf(err, errlen, "%s weights at %p are not %u-byte aligned",
                 quant_type_name((uint32_t)t), W, (unsigned)align);
        return -1;
    }
    if (B && (j.act_bytes > SIZE_MAX / B || rows > UINT64_MAX / B)) {
        snprintf(err, errlen, "a batch of %llu positions is too large",
                 (unsigned long long)B);
        return -1;
    }
    j.dot = quant_dot_get(t, quant_isa_current());
    j.tile = B > 1 ? quant_tile_get(t, quant_isa_current()) : NULL;
    if (!rows || !B)
        return 0;
    pthread_mutex_lock(&s_call_mu);
    size_t need = (size_t)(j.act_bytes * B);
    if (need > s_act_cap) {
        void *p = realloc(s_act, need);
        if (!p) {
            snprintf(err, errlen, "out of memory for %zu bytes of activations", need);
            goto out;
        }
        s_act = p;
        s_act_cap = need;
    }
    j.act = s_act;
    j.gemm = B > 1 ? quant_gemm_get(t) : NULL;
    uint64_t pb = 0, sb = 0;
    if (j.gemm) {
        pb = j.gemm->panel_bytes(cols, B);
        /* each share's scratch after the panel, on its own cache lines */
        sb = j.gemm->scratch_bytes ? j.gemm->scratch_bytes(cols, B) : 0;
        sb = (sb + 63) / 64 * 64;
        pb = (pb + 63) / 64 * 64;
        const uint64_t all = sb && pb ? pb + sb * (uint64_t)nthreads : pb;
        if (!pb) {
            j.gemm = NULL; /* a length the kernel does not take: the tiles below */
        } else if (all > s_panel_cap) {
            void *p = NULL;
            if (all > SIZE_MAX || posix_memalign(&p, 64, (size_t)all)) {
                snprintf(err, errlen, "out of memory for %llu bytes of a batch panel",
                         (unsigned long long)all);
                goto out;
            }
            free(s_panel);
            s_panel = p;
            s_panel_cap = (size_t)all;
        }
    }
    /* The positions' activation forms (and the panel) by the pool's threads, runs of positions
     * claimed in turn: on the calling thread alone they were ~2% of a 1-thread Q4_0
     * TinyLlama prompt (perf, 2026-12-02), so ~4% of a 2-thread one. Each position's bytes are
     * the same whoever makes them. */
    s_prep p = { .t = t, .cols = cols, .B = B, .X = X, .act = s_act, .act_bytes = j.act_bytes,
                 .gemm = j.gemm, .panel = s_panel };
    int np = B < (uint64_t)nthreads ? (int)B : nthreads;
    /* A decode pass's few positions (continuous batching: one a session) are microseconds of
     * work for the calling thread, less than waking the pool for them: a job more per product
     * (7 a layer) whose wake-ups a loaded machine stretches most. */
    if (B * cols <= S_PREP_ALONE)
        np = 1;
    if (s_grow(np, err, errlen))
        goto out;
    int first = -1; /* the share that met the first bad position */
    for (int i = 0; i < np; i++)
        p.bad[i] = B;
    s_run(np, s_prep_task, &p, 1);
    for (int i = 0; i < np; i++)
        if (p.bad[i] < B && (first < 0 || p.bad[i] < p.bad[first]))
            first = i;
    if (first >= 0) {
        snprintf(err, errlen, "activation of position %llu: %s",
                 (unsigned long long)p.bad[first], p.why[first]);
        goto out;
    }
    if (j.gemm)
        j.ga = (quant_gemm_args){ .n = cols, .W = j.W, .row_bytes = j.row_bytes, .B = B,
                                  .panel = s_panel, .act = s_act, .act_bytes = j.act_bytes,
                                  .dot = j.dot, .Y = Y, .ldy = rows,
                                  .scratch = sb ? (uint8_t *)s_panel + pb : NULL };
    j.scratch_stride = sb;
    /* More threads than rows would leave some with nothing to do; fewer shares, same bits. */
    int n = (uint64_t)nthreads > rows ? (int)rows : nthreads;
    if (s_grow(n, err, errlen))
        goto out;
    j.chunk = s_chunk_rows(&j, n);
    j.next = 0;
    s_run(n, s_rows, &j, 1);
    rc = 0;
out:
    pthread_mutex_unlock(&s_call_mu);
    return rc;
}

int quant_matvec(quant_type t, uint64_t rows, uint64_t cols, const void *W, const float *x,
                 float *y, int nthreads, char *err, size_t errlen)
{
    return s_product(t, rows, cols, W, 1, x, y, nthreads, err, errlen);
}

int quant_matmat(quant_type t, uint64_t rows, uint64_t cols, const void *W, uint64_t B,
                 const float *X, float *Y, int nthreads, char *err, size_t errlen)
{
    return s_product(t, rows, cols, W, B, X, Y, nthreads, err, errlen);
}

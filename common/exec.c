/* exec.c — layer range executor: resident layers + O_DIRECT/io_uring streamed layers. common/ */
#include "common/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/iobuf.h"
#include "common/kernel.h"
#include "common/log.h"
#include "common/util.h"

enum { S_FREE = 0, S_INFLIGHT = 1, S_DONE = 2 };

#define S_HASHER_STACK (256u << 10)    /* stack for the hasher thread (static TLS lives there too) */
#define S_HASHER_MIN_CHUNK (1u << 20) /* smaller chunks are hashed inline (s_hasher_wanted) */

typedef struct {
    uint8_t *buf;              /* EXEC_ALIGN-aligned, cap bytes */
    uint64_t cap;
    uint64_t aoff, alen;       /* aligned superset read */
    uint32_t skip;             /* first wanted byte = buf + skip */
    uint64_t want;             /* wanted bytes */
    int state;
    int32_t res;               /* bytes read or -errno */
    uint64_t seq;
} s_slot;

struct exec {
    const model_t *m;
    uint32_t first, last, d;
    exec_opts o;
    exec_plan plan;
    int fd;
    int direct;
    /* resident layers: [0, n_resident) relative to first */
    void **res_gmem, **res_wmem;
    const float **res_g, **res_w;
    uint64_t loaded_bytes;
    float *u, *y;              /* (d,) scratch */
    /* streaming ring: every slot's buffer lies in one huge-page-backed mapping (iobuf.h) */
    iobuf ring_mem;
    s_slot *slots;
    uint32_t nslots, inflight;
    struct io_uring ring;
    int uring_ok;
    uint64_t submit_seq, consume_seq, seq_limit;
    uint64_t chunks_per_step;
    /* content-gate hasher thread (s_hash_main): hashes chunk seqs [hashed, posted) in order */
    pthread_t hasher;
    int hasher_ok;             /* 0: hashed inline by s_hash_post */
    int sync_ok;               /* mu and cv initialised */
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* posted moved, hashed moved, or stop */
    uint64_t posted;           /* chunks handed to the hasher (mu) */
    _Atomic uint64_t hashed;   /* chunks it has finished reading: their slots may be reused */
    int stop;                  /* (mu) */
    uint64_t h_layers, h_fail, h_fail_logged, h_ns; /* (mu) results since the last collect */
    /* (mu) failures to log, by the caller's thread in s_hash_collect: a log line from the
     * hasher made ASan's stdio interceptors allocate inside a 2 MiB memory cgroup (OOM kill) */
    uint32_t h_bad_n, h_bad_layer[3];
    uint64_t h_bad_hash[3];
    XXH3_state_t *xx;          /* the hasher's own */
};

static uint64_t s_round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

/* The working-set rule, in one place: what a cap must hold besides the layers themselves
 * (the caller's overhead and two (d,) f32 scratch vectors, each aligned). The ring of a
 * streaming plan comes on top of this. */
static uint64_t s_fixed_bytes(uint64_t d, const exec_opts *o)
{
    return o->overhead_bytes + 2 * d * 4 + 2 * EXEC_ALIGN;
}

uint64_t exec_layer_bytes(uint32_t dim)
{
    uint64_t d = dim;
    return s_round_up(d * d * 4 + 2 * EXEC_ALIGN, EXEC_ALIGN) +
           s_round_up(d * 4 + 2 * EXEC_ALIGN, EXEC_ALIGN);
}

uint32_t exec_resident_fit(uint32_t dim, const exec_opts *o)
{
    uint64_t fixed = s_fixed_bytes(dim, o), n;
    if (o->budget_bytes == 0)
        return UINT32_MAX;
    if (o->budget_bytes <= fixed)
        return 0;
    n = (o->budget_bytes - fixed) / exec_layer_bytes(dim);
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

void exec_opts_worker(exec_opts *o, uint64_t cap_bytes)
{
    *o = (exec_opts){ .budget_bytes = cap_bytes, .queue_depth = 1, .chunk_bytes = 4u << 20,
                      .overhead_bytes = EXEC_WORKER_OVERHEAD, .resident_only = 1,
                      .verify_resident = 1 };
}

int exec_plan_make(const model_t *m, uint32_t first, uint32_t last, const exec_opts *o,
                   exec_plan *p, char *err, size_t errlen)
{
    char b1[32], b2[32], b3[32], b4[32], b5[32];
    uint64_t d = m->dim, rowb = d * 4, avail, fixed = s_fixed_bytes(d, o);
    memset(p, 0, sizeof *p);
    if (first >= last || last > m->n_layers) {
        snprintf(err, errlen, "bad layer range [%u, %u) for a %u-layer model", first, last,
                 m->n_layers);
        return -1;
    }
    p->n_layers = last - first;
    p->layer_alloc = exec_layer_bytes(m->dim);
    /* Rows per chunk: whole 4-row blocks (bit-identity: see "Determinism" in docs/design.md),
     * at least one block. Multiple of 8 rows: OpenBLAS splits a call's rows evenly across
     * its threads, and with 2 threads each half must still start on a 4-row boundary. */
    uint64_t rows = o->chunk_bytes / rowb / 8 * 8;
    if (rows < 8)
        rows = 8;
    if (rows > d)
        rows = s_round_up(d, 4);
    p->rows_per_chunk = (uint32_t)rows;
    p->chunks_per_layer = 1 + (uint32_t)((d + rows - 1) / rows);
    uint64_t slot_cap = s_round_up(rows * rowb + 2 * EXEC_ALIGN, EXEC_ALIGN);
    uint64_t ring = (uint64_t)(o->queue_depth + 1) * slot_cap;

    if (o->budget_bytes == 0 && !o->stream_all) {
        p->n_resident = p->n_layers;
    } else if (o->stream_all) {
        p->n_resident = 0;
    } else {
        uint64_t need_min = fixed + (o->resident_only ? 0 : ring);
        if (o->resident_only) {
            uint64_t need = need_min + p->n_layers * p->layer_alloc;
            if (exec_resident_fit(m->dim, o) < p->n_layers) {
                snprintf(err, errlen,
                         "layers [%u, %u) need %s resident (%u x %s + %s overhead) but the "
                         "cap is %s: short by %s",
                         first, last, util_fmt_size(need, b1, sizeof b1), p->n_layers,
                         util_fmt_size(p->layer_alloc, b2, sizeof b2),
                         util_fmt_size(need_min, b3, sizeof b3),
                         util_fmt_size(o->budget_bytes, b4, sizeof b4),
                         util_fmt_size(need - o->budget_bytes, b5, sizeof b5));
                return -1;
            }
            p->n_resident = p->n_layers;
        } else {
            if (need_min > o->budget_bytes) {
                snprintf(err, errlen,
                         "cap %s cannot even hold the streaming ring and overhead (%s): short "
                         "by %s",
                         util_fmt_size(o->budget_bytes, b1, sizeof b1),
                         util_fmt_size(need_min, b2, sizeof b2),
                         util_fmt_size(need_min - o->budget_bytes, b3, sizeof b3));
                return -1;
            }
            avail = o->budget_bytes - need_min;
            uint64_t n = avail / p->layer_alloc;
            /* If everything fits without the ring, keep everything resident. */
            if (exec_resident_fit(m->dim, o) >= p->n_layers)
                n = p->n_layers;
            p->n_resident = n > p->n_layers ? p->n_layers : (uint32_t)n;
        }
    }
    p->n_streamed = p->n_layers - p->n_resident;
    p->ring_slots = o->queue_depth + 1;
    if (o->ring_slots) {
        p->ring_slots = o->ring_slots; /* bench-disk: the SSD arm's ring, not its own */
    } else if (p->n_streamed && o->budget_bytes && !o->stream_all && !o->resident_only) {
        /* What the resident layers leave of the budget, less one slot's worth kept unspent,
         * buys up to queue_depth + 1 more slots. The kept slot is the plan's only margin for
         * an overhead that outgrows its estimate (AddressSanitizer's allocations overran the
         * tests' 1 MiB once the spare was spent).
         * With only queue_depth + 1 the disk idles whenever the step does not consume for a
         * while (the resident layers at the top of each step, a preempted thread): the ring
         * holds ≈15 ms of reads at 2.4 GB/s against ≈25 ms of resident compute. Measured on
         * lab02 (2026-12-01, 3 pairs back to back, load ≈2.5): 9 slots 493-563 ms per step,
         * device busy 74-88%; 13 slots 466-494 ms, busy 86-94% (its 600 MiB cap gives 12). */
        uint64_t used = fixed + ring + p->n_resident * p->layer_alloc;
        uint64_t extra = o->budget_bytes > used + slot_cap
                             ? (o->budget_bytes - used - slot_cap) / slot_cap
                             : 0;
        p->ring_slots += (uint32_t)(extra > o->queue_depth + 1u ? o->queue_depth + 1u : extra);
    }
    ring = (uint64_t)p->ring_slots * slot_cap;
    p->resident_bytes = (uint64_t)p->n_resident * p->layer_alloc;
    p->ring_bytes = p->n_streamed ? ring : 0;
    p->working_set = p->resident_bytes + p->ring_bytes + fixed;
    if (p->n_streamed) {
        /* Bytes requested per streamed layer: g's aligned superset + each chunk's. */
        const model_layer *L0 = &m->layers[first];
        uint64_t per = 0;
        uint64_t a0 = L0->g_off / EXEC_ALIGN * EXEC_ALIGN;
        per += s_round_up(L0->g_off + d * 4, EXEC_ALIGN) - a0;
        (void)per;
        uint64_t total = 0;
        for (uint32_t l = first + p->n_resident; l < last; l++) {
            const model_layer *L = &m->layers[l];
            total += s_round_up(L->g_off + d * 4, EXEC_ALIGN) - L->g_off / EXEC_ALIGN * EXEC_ALIGN;
            for (uint64_t r0 = 0; r0 < d; r0 += rows) {
                uint64_t n = d - r0 < rows ? d - r0 : rows;
                uint64_t s = L->w_off + r0 * rowb, e = s + n * rowb;
                total += s_round_up(e, EXEC_ALIGN) - s / EXEC_ALIGN * EXEC_ALIGN;
            }
        }
        p->streamed_per_step = total;
    }
    return 0;
}

void *exec_read_aligned(int fd, uint64_t off, uint64_t len, const void **data, char *err,
                        size_t errlen)
{
    uint64_t a0 = off / EXEC_ALIGN * EXEC_ALIGN;
    uint64_t a1 = s_round_up(off + len, EXEC_ALIGN);
    uint64_t got = 0;
    void *buf = NULL;
    if (posix_memalign(&buf, EXEC_ALIGN, a1 - a0)) {
        snprintf(err, errlen, "out of memory for a %llu-byte read", (unsigned long long)(a1 - a0));
        return NULL;
    }
    while (got < off + len - a0) {
        ssize_t n = pread(fd, (uint8_t *)buf + got, a1 - a0 - got, (off_t)(a0 + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(err, errlen, "read at offset %llu failed: %s",
                     (unsigned long long)(a0 + got), n < 0 ? strerror(errno) : "end of file");
            free(buf);
            return NULL;
        }
        got += (uint64_t)n;
    }
    *data = (uint8_t *)buf + (off - a0);
    return buf;
}

static int s_open(exec_t *e, char *err, size_t errlen)
{
    if (!e->o.buffered) {
        struct statfs sf;
        e->fd = open(e->m->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        /* tmpfs accepts O_DIRECT since Linux 6.6, but its "disk" is the page cache: no SSD
         * figure can come from it either way. */
        if (e->fd >= 0 && fstatfs(e->fd, &sf) == 0 && sf.f_type == TMPFS_MAGIC &&
            e->plan.n_streamed) {
            close(e->fd);
            e->fd = -1;
            errno = EINVAL;
        } else if (e->fd >= 0) {
            e->direct = 1;
            return 0;
        }
        if (errno == EINVAL) {
            snprintf(err, errlen,
                     "%s: the filesystem refuses O_DIRECT (tmpfs?): streamed reads would be "
                     "served from the page cache, so no SSD figure can be reported; move the "
                     "model to a disk, or pass --buffered to measure buffered reads "
                     "(labelled as such)",
                     e->m->path);
            return -1;
        }
    } else {
        e->fd = open(e->m->path, O_RDONLY | O_CLOEXEC);
        if (e->fd >= 0)
            return 0;
    }
    snprintf(err, errlen, "%s: cannot open: %s", e->m->path, strerror(errno));
    return -1;
}

static int s_load_resident(exec_t *e, char *err, size_t errlen)
{
    uint32_t n = e->plan.n_resident;
    uint64_t d = e->d;
    char why[256];
    e->res_gmem = calloc(n ? n : 1, sizeof(void *));
    e->res_wmem = calloc(n ? n : 1, sizeof(void *));
    e->res_g = calloc(n ? n : 1, sizeof(float *));
    e->res_w = calloc(n ? n : 1, sizeof(float *));
    if (!e->res_gmem || !e->res_wmem || !e->res_g || !e->res_w) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        const model_layer *L = &e->m->layers[e->first + i];
        const void *g, *w;
        e->res_gmem[i] = exec_read_aligned(e->fd, L->g_off, d * 4, &g, why, sizeof why);
        if (!e->res_gmem[i])
            goto err_read;
        e->res_wmem[i] = exec_read_aligned(e->fd, L->w_off, d * d * 4, &w, why, sizeof why);
        if (!e->res_wmem[i])
            goto err_read;
        e->res_g[i] = g;
        e->res_w[i] = w;
        e->loaded_bytes += d * d * 4 + d * 4;
        if (e->o.verify_resident) {
            uint64_t h = model_layer_checksum(g, w, e->d);
            if (h != L->checksum) {
                snprintf(err, errlen,
                         "%s: layer %u checksum mismatch (file bytes hash to %016llx, metadata "
                         "says %016llx): the file is corrupt",
                         e->m->path, e->first + i, (unsigned long long)h,
                         (unsigned long long)L->checksum);
                return -1;
            }
        }
        continue;
    err_read:
        snprintf(err, errlen, "%s: layer %u: %s", e->m->path, e->first + i, why);
        return -1;
    }
    return 0;
}

/* Streamed chunk `seq` -> which layer and which bytes. */
static void s_chunk_of(const exec_t *e, uint64_t seq, uint32_t *layer, uint32_t *c)
{
    uint64_t in_step = seq % e->chunks_per_step;
    *layer = e->first + e->plan.n_resident + (uint32_t)(in_step / e->plan.chunks_per_layer);
    *c = (uint32_t)(in_step % e->plan.chunks_per_layer);
}

static void s_chunk_range(const exec_t *e, uint32_t layer, uint32_t c, uint64_t *off,
                          uint64_t *len, uint32_t *r0, uint32_t *nrows)
{
    const model_layer *L = &e->m->layers[layer];
    uint64_t d = e->d, rows = e->plan.rows_per_chunk;
    if (c == 0) {
        *off = L->g_off;
        *len = d * 4;
        *r0 = *nrows = 0;
        return;
    }
    uint64_t s = (uint64_t)(c - 1) * rows;
    uint64_t n = d - s < rows ? d - s : rows;
    *off = L->w_off + s * d * 4;
    *len = n * d * 4;
    *r0 = (uint32_t)s;
    *nrows = (uint32_t)n;
}

static void s_submit_more(exec_t *e, exec_stats *st)
{
    int queued = 0;
    /* A slot is free again once its chunk is both computed and hashed. */
    uint64_t done = e->consume_seq, hashed = atomic_load(&e->hashed);
    if (hashed < done)
        done = hashed;
    while (e->inflight < e->o.queue_depth && e->submit_seq < done + e->nslots &&
           (!e->seq_limit || e->submit_seq < e->seq_limit)) {
        s_slot *s = &e->slots[e->submit_seq % e->nslots];
        uint32_t layer, c, r0, nr;
        uint64_t off, len;
        if (s->state != S_FREE)
            break;
        s_chunk_of(e, e->submit_seq, &layer, &c);
        s_chunk_range(e, layer, c, &off, &len, &r0, &nr);
        s->aoff = off / EXEC_ALIGN * EXEC_ALIGN;
        s->alen = s_round_up(off + len, EXEC_ALIGN) - s->aoff;
        s->skip = (uint32_t)(off - s->aoff);
        s->want = len;
        s->seq = e->submit_seq;
        s->res = 0;
        if (e->uring_ok) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);
            if (!sqe)
                break;
            io_uring_prep_read(sqe, e->fd, s->buf, (unsigned)s->alen, s->aoff);
            io_uring_sqe_set_data64(sqe, e->submit_seq % e->nslots);
            queued++;
            s->state = S_INFLIGHT;
            e->inflight++;
        } else {
            /* Logged fallback: synchronous read, no overlap with compute. */
            ssize_t n;
            do
                n = pread(e->fd, s->buf, s->alen, (off_t)s->aoff);
            while (n < 0 && errno == EINTR);
            s->res = n < 0 ? -errno : (int32_t)n;
            s->state = S_DONE;
        }
        st->streamed_bytes += s->alen;
        e->submit_seq++;
    }
    if (queued)
        io_uring_submit(&e->ring);
}

static void s_reap(exec_t *e, int wait)
{
    struct io_uring_cqe *cqe;
    int rc;
    for (;;) {
        rc = wait ? io_uring_wait_cqe(&e->ring, &cqe) : io_uring_peek_cqe(&e->ring, &cqe);
        if (rc == -EINTR)
            continue;
        if (rc < 0 || !cqe)
            return;
        s_slot *s = &e->slots[io_uring_cqe_get_data64(cqe)];
        s->res = cqe->res;
        s->state = S_DONE;
        e->inflight--;
        io_uring_cqe_seen(&e->ring, cqe);
        wait = 0;
    }
}

/* ---------------------------------------------------------------- content-gate hasher
 * Hashing a streamed layer costs about as much CPU as computing it (XXH3-64 over 64 MiB:
 * ≈4.7 ms against ≈3 ms of sgemv, 2026-12-01), and done inline it sat between a chunk's
 * arrival and the resubmission of its slot: the disk waited on the hash (the SSD arm streamed
 * at ≈2.1 GB/s where the same reads alone ran at ≈2.4). A thread of its own hashes chunk k
 * while the step computes chunk k and the disk reads k+1..; a slot is reused only once both
 * are done with it, and a step returns only when its layers are hashed, so the content gate
 * still judges every step before its result is used. */

/* Hash chunk seq (its read has completed) and record a finished layer's verdict; then its
 * slot may be reused. On the hasher thread, or inline when there is none. */
static void s_hash_one(exec_t *e, uint64_t seq)
{
    const s_slot *s = &e->slots[seq % e->nslots];
    uint32_t layer, c;
    uint64_t t = util_now_ns(), h = 0;
    int last;
    s_chunk_of(e, seq, &layer, &c);
    if (c == 0)
        XXH3_64bits_reset(e->xx);
    XXH3_64bits_update(e->xx, s->buf + s->skip, s->want);
    last = c + 1 == e->plan.chunks_per_layer;
    if (last)
        h = XXH3_64bits_digest(e->xx);
    t = util_now_ns() - t;
    pthread_mutex_lock(&e->mu);
    e->h_ns += t;
    if (last) {
        e->h_layers++;
        if (h != e->m->layers[layer].checksum && (e->h_fail++, e->h_fail_logged++ < 3)) {
            e->h_bad_layer[e->h_bad_n] = layer;
            e->h_bad_hash[e->h_bad_n++] = h;
        }
    }
    atomic_store(&e->hashed, seq + 1);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void *s_hash_main(void *arg)
{
    exec_t *e = arg;
    uint64_t seq = atomic_load(&e->hashed);
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stop && seq == e->posted)
            pthread_cond_wait(&e->cv, &e->mu);
        if (seq == e->posted) /* stop, and nothing left to hash */
            break;
        pthread_mutex_unlock(&e->mu);
        s_hash_one(e, seq++);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static void s_hash_post(exec_t *e)
{
    if (!e->hasher_ok) {
        s_hash_one(e, e->posted++);
        return;
    }
    pthread_mutex_lock(&e->mu);
    e->posted++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* Block until the hasher has finished chunk seq - 1; the time counts as verify_wait. */
static void s_hash_wait(exec_t *e, uint64_t seq, exec_stats *st)
{
    if (atomic_load(&e->hashed) >= seq)
        return;
    uint64_t t = util_now_ns();
    pthread_mutex_lock(&e->mu);
    while (atomic_load(&e->hashed) < seq)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    st->verify_wait_ns += util_now_ns() - t;
}

/* Move the hasher's results into the caller's stats (after s_hash_wait for the step). */
static void s_hash_collect(exec_t *e, exec_stats *st)
{
    pthread_mutex_lock(&e->mu);
    st->layers_streamed += e->h_layers;
    st->content_fail += e->h_fail;
    st->verify_ns += e->h_ns;
    e->h_layers = e->h_fail = e->h_ns = 0;
    for (uint32_t i = 0; i < e->h_bad_n; i++)
        log_error("%s: content gate: streamed layer %u hashes to %016llx, expected %016llx",
                  e->m->path, e->h_bad_layer[i], (unsigned long long)e->h_bad_hash[i],
                  (unsigned long long)e->m->layers[e->h_bad_layer[i]].checksum);
    e->h_bad_n = 0;
    pthread_mutex_unlock(&e->mu);
}

/* A hasher thread pays off when a chunk's hash (≈0.3 ms for 4 MiB here) dwarfs the futex
 * wake-up that hands the chunk over (≈10 µs), and only with a second CPU to run on. Below
 * S_HASHER_MIN_CHUNK the hash is cheaper inline. */
static int s_hasher_wanted(const exec_t *e)
{
    if (e->o.hasher != EXEC_HASH_AUTO)
        return e->o.hasher == EXEC_HASH_THREAD;
    return (uint64_t)e->plan.rows_per_chunk * e->d * 4 >= S_HASHER_MIN_CHUNK &&
           sysconf(_SC_NPROCESSORS_ONLN) >= 2;
}

static int s_ring_init(exec_t *e, char *err, size_t errlen)
{
    e->nslots = e->plan.ring_slots;
    e->slots = calloc(e->nslots, sizeof *e->slots);
    if (!e->slots)
        goto oom;
    uint64_t cap = s_round_up((uint64_t)e->plan.rows_per_chunk * e->d * 4 + 2 * EXEC_ALIGN,
                              EXEC_ALIGN);
    /* One mapping for the ring, exactly the plan's ring_bytes (nslots x cap, cap a multiple
     * of 4096 so every slot stays O_DIRECT-aligned): transparent huge pages under the memory
     * cap cost no more than 4 KiB pages would, since only the tail under 2 MiB is left in
     * small pages. hugetlb pages come from the reserved pool, which the memory cgroup does not
     * charge; the plan counts the ring all the same, so the cap is never exceeded either way. */
    if (iobuf_alloc(&e->ring_mem, (uint64_t)e->nslots * cap, e->o.buffers_4k, err, errlen))
        return -1;
    for (uint32_t i = 0; i < e->nslots; i++) {
        e->slots[i].buf = e->ring_mem.p + (uint64_t)i * cap;
        e->slots[i].cap = cap;
    }
    if (e->ring_mem.kind == IOBUF_4K && !e->o.buffers_4k && e->ring_mem.len >= IOBUF_HUGE)
        log_warn("%s: streaming ring in %s: large reads may reach the device split into "
                 "smaller requests", e->m->path, e->ring_mem.desc);
    e->chunks_per_step = (uint64_t)e->plan.n_streamed * e->plan.chunks_per_layer;
    e->seq_limit = e->o.total_steps ? e->o.total_steps * e->chunks_per_step : 0;
    int rc = io_uring_queue_init(e->o.queue_depth < 8 ? 8 : e->o.queue_depth, &e->ring, 0);
    if (rc == 0)
        e->uring_ok = 1;
    else
        log_warn("io_uring unavailable (%s): falling back to synchronous pread, reads will "
                 "not overlap compute", strerror(-rc));
    e->xx = XXH3_createState();
    if (!e->xx)
        goto oom;
    if (pthread_mutex_init(&e->mu, NULL) || pthread_cond_init(&e->cv, NULL)) {
        snprintf(err, errlen, "cannot set up the content-gate hasher");
        return -1;
    }
    e->sync_ok = 1;
    if (!s_hasher_wanted(e))
        return 0;
    /* A small stack: the hasher needs a few KiB, and the memory cap counts what a thread
     * touches (AddressSanitizer maps and clears shadow for the whole stack: 1 MiB for the
     * default 8 MiB stack, which alone overran the tests' 2 MiB cap). */
    pthread_attr_t at;
    if (pthread_attr_init(&at) == 0) {
        pthread_attr_setstacksize(&at, S_HASHER_STACK);
        e->hasher_ok = pthread_create(&e->hasher, &at, s_hash_main, e) == 0;
        pthread_attr_destroy(&at);
    }
    if (!e->hasher_ok) /* a libc whose static TLS outgrows the small stack */
        e->hasher_ok = pthread_create(&e->hasher, NULL, s_hash_main, e) == 0;
    if (!e->hasher_ok)
        log_warn("cannot start a hasher thread: the content gate hashes inline, on the step's "
                 "time");
    return 0;
oom:
    snprintf(err, errlen, "out of memory for the streaming ring");
    return -1;
}

exec_t *exec_new(const model_t *m, uint32_t first, uint32_t last, const exec_opts *o,
                 char *err, size_t errlen)
{
    exec_t *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    e->m = m;
    e->first = first;
    e->last = last;
    e->d = m->dim;
    e->o = *o;
    e->fd = -1;
    if (e->o.queue_depth < 1)
        e->o.queue_depth = 1;
    if (exec_plan_make(m, first, last, &e->o, &e->plan, err, errlen))
        goto err;
    if (s_open(e, err, errlen))
        goto err;
    if (posix_memalign((void **)&e->u, 64, e->d * 4) || posix_memalign((void **)&e->y, 64, e->d * 4)) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    if (s_load_resident(e, err, errlen))
        goto err;
    if (e->plan.n_streamed && s_ring_init(e, err, errlen))
        goto err;
    return e;
err:
    exec_free(&e);
    return NULL;
}

const exec_plan *exec_get_plan(const exec_t *e)
{
    return &e->plan;
}

uint64_t exec_loaded_bytes(const exec_t *e)
{
    return e->loaded_bytes;
}

int exec_is_direct(const exec_t *e)
{
    return e->direct;
}

int exec_uses_uring(const exec_t *e)
{
    return e->uring_ok;
}

const char *exec_io_buffers(const exec_t *e)
{
    return e->ring_mem.p ? e->ring_mem.desc : "none (nothing streamed)";
}

/* Consume streamed chunks for one step in order, computing as they arrive; the hasher
 * thread hashes each one beside the compute. */
static int s_stream_step(exec_t *e, float *x, exec_stats *st, char *err, size_t errlen)
{
    uint64_t end = e->consume_seq + e->chunks_per_step;
    uint64_t t;
    int rc = 0;
    while (e->consume_seq < end) {
        /* Count reads that finished while we computed, so their depth is refilled now. */
        if (e->uring_ok)
            s_reap(e, 0);
        s_submit_more(e, st);
        s_slot *s = &e->slots[e->consume_seq % e->nslots];
        if (s->state == S_FREE && e->consume_seq + 1 >= e->nslots) {
            /* Not even submitted: its slot's previous chunk is still being hashed. */
            s_hash_wait(e, e->consume_seq + 1 - e->nslots, st);
            s_submit_more(e, st);
        }
        if (s->state != S_DONE) {
            t = util_now_ns();
            while (s->state != S_DONE)
                s_reap(e, 1);
            st->wait_ns += util_now_ns() - t;
        }
        uint32_t layer, c, r0, nr;
        uint64_t off, len;
        s_chunk_of(e, e->consume_seq, &layer, &c);
        s_chunk_range(e, layer, c, &off, &len, &r0, &nr);
        if (s->res < 0 || (uint64_t)s->res < s->skip + s->want) {
            snprintf(err, errlen, "%s: layer %u chunk %u: %s", e->m->path, layer, c,
                     s->res < 0 ? strerror(-s->res) : "short read");
            rc = -1;
            break;
        }
        s_hash_post(e);
        const float *data = (const float *)(s->buf + s->skip);
        if (!e->o.io_only) {
            t = util_now_ns();
            if (c == 0)
                kernel_prepare(data, x, e->u, e->d);
            else
                kernel_rows(data, e->u, e->y, r0, nr, e->d);
            if (c + 1 == e->plan.chunks_per_layer)
                kernel_finish(x, e->y, e->d);
            st->compute_ns += util_now_ns() - t;
        }
        s->state = S_FREE; /* computed; s_submit_more also waits for the hasher to pass it */
        e->consume_seq++;
    }
    s_hash_wait(e, e->consume_seq, st);
    s_hash_collect(e, st);
    if (rc == 0)
        s_submit_more(e, st);
    return rc;
}

int exec_step(exec_t *e, float *x, exec_stats *st, char *err, size_t errlen)
{
    uint64_t t;
    if (e->plan.n_streamed)
        s_submit_more(e, st); /* start the disk before computing the resident layers */
    if (!e->o.io_only) {
        t = util_now_ns();
        for (uint32_t i = 0; i < e->plan.n_resident; i++) {
            kernel_layer(e->res_w[i], e->res_g[i], x, e->u, e->y, e->d);
            /* Keep queue_depth reads in flight while the resident layers compute (≈3 ms each
             * here): the ring has more free slots than the depth, and refilling only after
             * the last resident layer left the disk idle for part of it. */
            if (e->plan.n_streamed && e->uring_ok) {
                s_reap(e, 0);
                s_submit_more(e, st);
            }
        }
        st->compute_ns += util_now_ns() - t;
    }
    if (e->plan.n_streamed) {
        st->layers_due += e->plan.n_streamed;
        return s_stream_step(e, x, st, err, errlen);
    }
    return 0;
}

void exec_drain(exec_t *e)
{
    if (!e || !e->uring_ok)
        return;
    while (e->inflight)
        s_reap(e, 1);
}

void exec_free(exec_t **pe)
{
    exec_t *e = *pe;
    if (!e)
        return;
    exec_drain(e);
    if (e->hasher_ok) {
        pthread_mutex_lock(&e->mu);
        e->stop = 1;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->hasher, NULL);
    }
    if (e->sync_ok) {
        pthread_cond_destroy(&e->cv);
        pthread_mutex_destroy(&e->mu);
    }
    if (e->uring_ok)
        io_uring_queue_exit(&e->ring);
    iobuf_free(&e->ring_mem);
    free(e->slots);
    for (uint32_t i = 0; e->res_gmem && i < e->plan.n_resident; i++) {
        free(e->res_gmem[i]);
        free(e->res_wmem[i]);
    }
    free(e->res_gmem);
    free(e->res_wmem);
    free(e->res_g);
    free(e->res_w);
    free(e->u);
    free(e->y);
    if (e->xx)
        XXH3_freeState(e->xx);
    if (e->fd >= 0)
        close(e->fd);
    free(e);
    *pe = NULL;
}

/* exec.c — layer range executor: resident layers + O_DIRECT/io_uring streamed layers. runtime/ */
#include "runtime/exec.h"
#include "runtime/exec_int.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "arch/sums.h"
#include "base/iobuf.h"
#include "base/log.h"
#include "base/util.h"

enum { S_FREE = 0, S_INFLIGHT = 1, S_DONE = 2 };

/* One expert cache slot: an expert of a layer, each expert tensor's slice at part[k] + skip[k]
 * of its bytes. */
#define S_MAX_XT 4                /* expert tensors a layer may have (gate, up, down) */
typedef struct {
    uint32_t layer, expert;
    int valid;                    /* read and its checksums matched */
    uint64_t used;                /* xtick of the last use: LRU */
    uint64_t pin;                 /* xepoch of the layer using it (not evictable then) */
} s_xslot;

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
    const arch_model *am;      /* borrowed, or own_am */
    arch_model own_am;         /* the lab model's layers (exec_new) */
    char *path;                /* owned */
    uint64_t *sums;            /* (n_layers of am) per-layer checksums, owned */
    uint32_t first, last;
    exec_opts o;
    exec_plan plan;
    int fd;
    int direct;
    arch_run *run;             /* the layer hooks' scratch, for up to max_pos positions */
    /* resident layers: one arena (s_load_resident) and, for [0, n_resident) relative to first,
     * ARCH_MAX_LAYER_TENSORS pointers each into it */
    void *res_arena;
    const void **res_data;
    uint64_t loaded_bytes;
    /* streaming: one step's chunks, and the vectors of the layer being streamed */
    exec_chunk *sched;
    uint8_t *stage;
    const void *stage_ptr[ARCH_MAX_LAYER_TENSORS];
    /* the step being streamed (s_stream_step) */
    float *x;
    const exec_seg *segs;      /* its sessions' rows (exec_step_segs) */
    uint32_t k;
    arch_seg lsegs[EXEC_MAX_SEGS]; /* the layer being computed: segs with that layer's cache */
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
    /* expert streaming (plan.expert_slots > 0): exec.h says how */
    uint64_t *esums, *ebase;   /* sums_get_experts and each layer's place in it */
    iobuf xbuf;                /* the expert cache: expert_slots x expert_slot_bytes */
    uint8_t *xmem;             /* xbuf.p, EXEC_ALIGN-aligned */
    s_xslot *xs;               /* expert_slots */
    uint64_t xtick, xepoch;
    uint8_t *xused;            /* (n_expert) the current layer's routed experts */
    int32_t *xmap;             /* (n_expert) their slots */
    struct io_uring xring;
    int xring_ok;
    uint32_t xdepth;
};

/* pread at least `need` bytes from a0 of fd into dst, asking for up to `cap` (both multiples of
 * EXEC_ALIGN, as a0 and dst are: O_DIRECT; the file's last block may end short of cap). */
static int s_pread_all(int fd, uint64_t a0, uint64_t need, uint64_t cap, uint8_t *dst, char *err,
                       size_t errlen)
{
    uint64_t got = 0;
    while (got < need) {
        ssize_t r = pread(fd, dst + got, cap - got, (off_t)(a0 + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            snprintf(err, errlen, "read at offset %llu failed: %s",
                     (unsigned long long)(a0 + got), r < 0 ? strerror(errno) : "end of file");
            return -1;
        }
        got += (uint64_t)r;
    }
    return 0;
}

/* A buffer of n bytes (n a multiple of EXEC_ALIGN). One of a huge page or more starts on a
 * huge-page boundary and asks for transparent huge pages before anything touches it: every
 * decoding token reads each resident weight once, front to back, and in 4 KiB pages that is a
 * page walk every 4 KiB. Measured on TinyLlama-shaped Q4_0 (2026-12-02, Intel Xeon, perf
 * cpu-clock): the workers' 4 KiB-paged layers took 13% more CPU in the Q4_0 kernel than the
 * reference arm's mapping, whose file pages the kernel keeps in 2 MiB folios (FilePmdMapped)
 * — docs/measurements/2026-12-02-pace-3.md. Best effort: without the advice (THP off,
 * fragmented memory) the pages are 4 KiB. The price is paid once, at load: the kernel
 * compacts memory for them. */
static void *s_alloc_read_buf(uint64_t n)
{
    void *buf = NULL;
    size_t align = n >= IOBUF_HUGE ? IOBUF_HUGE : EXEC_ALIGN;
    if (posix_memalign(&buf, align, n))
        return NULL;
    if (align == IOBUF_HUGE)
        (void)madvise(buf, n / IOBUF_HUGE * IOBUF_HUGE, MADV_HUGEPAGE);
    return buf;
}

void *exec_read_aligned(int fd, uint64_t off, uint64_t len, const void **data, char *err,
                        size_t errlen)
{
    uint64_t a0 = off / EXEC_ALIGN * EXEC_ALIGN;
    uint64_t a1 = exec_round_up(off + len, EXEC_ALIGN);
    uint8_t *buf = s_alloc_read_buf(a1 - a0);
    if (!buf) {
        snprintf(err, errlen, "out of memory for a %llu-byte read", (unsigned long long)(a1 - a0));
        return NULL;
    }
    if (s_pread_all(fd, a0, off + len - a0, a1 - a0, buf, err, errlen)) {
        free(buf);
        return NULL;
    }
    *data = buf + (off - a0);
    return buf;
}

static int s_open(exec_t *e, char *err, size_t errlen)
{
    if (!e->o.buffered) {
        struct statfs sf;
        e->fd = open(e->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
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
                     e->path);
            return -1;
        }
    } else {
        e->fd = open(e->path, O_RDONLY | O_CLOEXEC);
        if (e->fd >= 0)
            return 0;
    }
    snprintf(err, errlen, "%s: cannot open: %s", e->path, strerror(errno));
    return -1;
}

/* The aligned span a resident tensor takes in the arena (0: not resident here). */
static uint64_t s_res_span(const exec_t *e, uint32_t i, const arch_tensor *t)
{
    if (i >= e->plan.n_resident && t->n_expert)
        return 0; /* a split layer: its experts come through the cache */
    return exec_round_up(t->off + t->nbytes, EXEC_ALIGN) - t->off / EXEC_ALIGN * EXEC_ALIGN;
}

/* Every resident tensor of the stage goes into one arena, rounded up to whole huge pages, so
 * that all of it is in 2 MiB pages: with a buffer a tensor, each tensor's tail past its last
 * whole huge page (and every tensor under 2 MiB: k, v, the norms) stayed in 4 KiB pages, 12%
 * of a TinyLlama layer's Q4_0 bytes (docs/measurements/2026-12-03-arena.md). */
static int s_load_resident(exec_t *e, char *err, size_t errlen)
{
    uint32_t n = e->plan.n_resident + e->plan.n_split;
    char why[256];
    size_t slots = (size_t)(n ? n : 1) * ARCH_MAX_LAYER_TENSORS;
    e->res_data = calloc(slots, sizeof(void *));
    if (!e->res_data) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    uint64_t total = 0, at = 0;
    for (uint32_t i = 0; i < n; i++) {
        const arch_layer *L = &e->am->layers[e->first + i];
        for (uint32_t t = 0; t < L->n_tensors; t++)
            total += s_res_span(e, i, &L->t[t]);
    }
    if (!total)
        return 0;
    if (total >= IOBUF_HUGE)
        total = (total + IOBUF_HUGE - 1) / IOBUF_HUGE * IOBUF_HUGE;
    uint8_t *arena = e->res_arena = s_alloc_read_buf(total);
    if (!arena) {
        snprintf(err, errlen, "out of memory for %llu bytes of resident layers",
                 (unsigned long long)total);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t l = e->first + i;
        const arch_layer *L = &e->am->layers[l];
        XXH3_state_t *xx = e->o.verify_resident ? XXH3_createState() : NULL;
        if (xx)
            XXH3_64bits_reset(xx);
        for (uint32_t t = 0; t < L->n_tensors; t++) {
            size_t k = (size_t)i * ARCH_MAX_LAYER_TENSORS + t;
            uint64_t span = s_res_span(e, i, &L->t[t]);
            if (!span)
                continue;
            uint64_t a0 = L->t[t].off / EXEC_ALIGN * EXEC_ALIGN;
            if (s_pread_all(e->fd, a0, L->t[t].off + L->t[t].nbytes - a0, span, arena + at, why,
                            sizeof why)) {
                XXH3_freeState(xx);
                snprintf(err, errlen, "%s: layer %u (%s): %s", e->path, l, L->t[t].name, why);
                return -1;
            }
            e->res_data[k] = arena + at + (L->t[t].off - a0);
            at += span;
            e->loaded_bytes += L->t[t].nbytes;
            if (xx)
                XXH3_64bits_update(xx, e->res_data[k], L->t[t].nbytes);
        }
        if (e->o.verify_resident) {
            if (!xx) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            uint64_t h = XXH3_64bits_digest(xx);
            XXH3_freeState(xx);
            if (h != e->sums[l]) {
                snprintf(err, errlen,
                         "%s: layer %u checksum mismatch (file bytes hash to %016llx, expected "
                         "%016llx): the file is corrupt",
                         e->path, l, (unsigned long long)h, (unsigned long long)e->sums[l]);
                return -1;
            }
        }
    }
    return 0;
}

/* Streamed chunk `seq` of the schedule. */
static const exec_chunk *s_chunk_of(const exec_t *e, uint64_t seq)
{
    return &e->sched[seq % e->plan.chunks_per_step];
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
        if (s->state != S_FREE)
            break;
        const exec_chunk *ch = s_chunk_of(e, e->submit_seq);
        uint64_t off = ch->off, len = ch->len;
        s->aoff = off / EXEC_ALIGN * EXEC_ALIGN;
        s->alen = exec_round_up(off + len, EXEC_ALIGN) - s->aoff;
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
    const exec_chunk *ch = s_chunk_of(e, seq);
    uint32_t layer = ch->layer;
    uint64_t t = util_now_ns(), h = 0;
    int last = ch->last;
    if (ch->first)
        XXH3_64bits_reset(e->xx);
    XXH3_64bits_update(e->xx, s->buf + s->skip, s->want);
    if (last)
        h = XXH3_64bits_digest(e->xx);
    t = util_now_ns() - t;
    pthread_mutex_lock(&e->mu);
    e->h_ns += t;
    if (last) {
        e->h_layers++;
        if (h != e->sums[layer] && (e->h_fail++, e->h_fail_logged++ < 3)) {
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
    for (uint32_t i = 0; i < e->h_bad_n; i++) {
        log_error("%s: content gate: streamed layer %u hashes to %016llx, expected %016llx",
                  e->path, e->h_bad_layer[i], (unsigned long long)e->h_bad_hash[i],
                  (unsigned long long)e->sums[e->h_bad_layer[i]]);
        st->content_bad_layer = e->h_bad_layer[i] + 1;
        st->content_bad_hash = e->h_bad_hash[i];
    }
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
    return e->plan.slot_bytes - 2 * EXEC_ALIGN >= S_HASHER_MIN_CHUNK &&
           sysconf(_SC_NPROCESSORS_ONLN) >= 2;
}

static int s_ring_init(exec_t *e, char *err, size_t errlen)
{
    e->nslots = e->plan.ring_slots;
    e->slots = calloc(e->nslots, sizeof *e->slots);
    if (!e->slots)
        goto oom;
    uint64_t cap = e->plan.slot_bytes, nch = 0;
    e->sched = exec_schedule(e->am, &e->plan, e->first, e->last, e->o.chunk_bytes, &nch);
    if (!e->sched || nch != e->plan.chunks_per_step ||
        (e->plan.stage_bytes && !(e->stage = aligned_alloc(64, e->plan.stage_bytes))))
        goto oom;
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
                 "smaller requests", e->path, e->ring_mem.desc);
    e->chunks_per_step = e->plan.chunks_per_step;
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

/* Expert streaming's state: the per-expert checksums (the streamed layers' own checksum
 * becomes their non-expert tensors'), the cache, and a ring for the expert reads. */
static int s_experts_init(exec_t *e, char *err, size_t errlen)
{
    const arch_model *am = e->am;
    uint32_t L = am->hp.n_layers, E = am->hp.n_expert ? am->hp.n_expert : 1;
    uint64_t n = sums_experts_layout(am, NULL);
    char why[512];
    e->ebase = malloc((L + 1) * sizeof *e->ebase);
    e->esums = malloc(n * sizeof *e->esums);
    e->xs = calloc(e->plan.expert_slots, sizeof *e->xs);
    e->xused = calloc(E, 1);
    e->xmap = calloc(E, sizeof *e->xmap);
    if (!e->ebase || !e->esums || !e->xs || !e->xused || !e->xmap) {
        snprintf(err, errlen, "out of memory for the expert cache");
        return -1;
    }
    /* Huge pages where the kernel gives them, as the ring, and touched now: a miss into a
     * never-used slot otherwise faults its pages in under the read (5 MiB of 4 KiB pages a
     * Qwen3-30B-A3B expert), which on this VM made the first pass over the cache's slots
     * read at 0.6-0.7 GB/s where the same reads into touched buffers ran at 1.9. The plan
     * counts the whole cache against the cap either way. */
    if (iobuf_alloc(&e->xbuf, e->plan.expert_slots * e->plan.expert_slot_bytes,
                    e->o.buffers_4k, err, errlen))
        return -1;
    e->xmem = e->xbuf.p;
    memset(e->xmem, 0, e->xbuf.len);
    sums_experts_layout(am, e->ebase);
    if (sums_get_experts(am, e->path, e->esums, why, sizeof why)) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    for (uint32_t l = e->first + e->plan.n_resident; l < e->last; l++)
        e->sums[l] = e->esums[e->ebase[l]];
    /* every read of a layer's misses in flight at once: up to a step's experts x tensors */
    uint64_t k = (uint64_t)e->o.max_pos * am->hp.n_expert_used;
    e->xdepth = (uint32_t)((k < E ? k : E) * S_MAX_XT);
    if (e->xdepth > 4096)
        e->xdepth = 4096;
    int rc = io_uring_queue_init(e->xdepth < 8 ? 8 : e->xdepth, &e->xring, 0);
    e->xring_ok = rc == 0;
    if (rc)
        log_warn("io_uring unavailable for expert reads (%s): synchronous pread instead",
                 strerror(-rc));
    return 0;
}

/* Read the missing experts' slices of layer l (those with xmap[x] >= 0 and a slot not valid):
 * all at once, then each one hashed against its checksum. */
static int s_experts_read(exec_t *e, uint32_t l, exec_stats *st, char *err, size_t errlen)
{
    const arch_layer *L = &e->am->layers[l];
    uint32_t E = 0, nsub = 0, nt = 0, tix[S_MAX_XT];
    for (uint32_t t = 0; t < L->n_tensors && nt < S_MAX_XT; t++)
        if (L->t[t].n_expert) {
            tix[nt++] = t;
            E = L->t[t].n_expert;
        }
    uint64_t t0 = util_now_ns(), th = t0;
    for (int pass = 0; pass < 2; pass++) { /* 0: submit every read, 1: reap and check */
        for (uint32_t x = 0; x < E; x++) {
            if (!e->xused[x] || e->xs[e->xmap[x]].valid)
                continue;
            uint8_t *slot = e->xmem + (uint64_t)e->xmap[x] * e->plan.expert_slot_bytes;
            uint64_t part = 0;
            for (uint32_t k = 0; k < nt; k++) {
                const arch_tensor *T = &L->t[tix[k]];
                uint64_t slice = T->nbytes / E, off = T->off + x * slice;
                uint64_t aoff = off / EXEC_ALIGN * EXEC_ALIGN;
                uint64_t alen = exec_round_up(off + slice, EXEC_ALIGN) - aoff;
                if (pass == 0) {
                    struct io_uring_sqe *sqe = e->xring_ok ? io_uring_get_sqe(&e->xring) : NULL;
                    if (sqe) {
                        io_uring_prep_read(sqe, e->fd, slot + part, (unsigned)alen, aoff);
                        io_uring_sqe_set_data64(sqe, alen);
                        nsub++;
                    } else {
                        ssize_t got;
                        do
                            got = pread(e->fd, slot + part, alen, (off_t)aoff);
                        while (got < 0 && errno == EINTR);
                        if (got < (ssize_t)(off + slice - aoff)) {
                            snprintf(err, errlen, "%s: layer %u expert %u (%s): %s", e->path, l,
                                     x, T->name, got < 0 ? strerror(errno) : "short read");
                            return -1;
                        }
                    }
                    st->expert_read_bytes += alen;
                } else {
                    uint64_t h = XXH3_64bits(slot + part + (off - aoff), slice);
                    uint64_t want = e->esums[e->ebase[l] + 1 + (uint64_t)k * E + x];
                    st->experts_hashed++;
                    if (h != want) {
                        st->content_fail++;
                        st->content_bad_layer = l + 1;
                        st->content_bad_hash = h;
                        log_error("%s: content gate: layer %u expert %u of %s hashes to %016llx, "
                                  "expected %016llx", e->path, l, x, T->name,
                                  (unsigned long long)h, (unsigned long long)want);
                        e->xs[e->xmap[x]].valid = -1; /* read again next time */
                    }
                }
                part += exec_round_up(slice + 2 * EXEC_ALIGN, EXEC_ALIGN);
            }
            if (pass == 1 && e->xs[e->xmap[x]].valid == 0)
                e->xs[e->xmap[x]].valid = 1;
        }
        if (pass == 0 && !nsub)
            st->expert_read_ns += util_now_ns() - t0; /* synchronous reads, or none */
        if (pass == 0 && nsub) {
            io_uring_submit(&e->xring);
            for (uint32_t i = 0; i < nsub; i++) {
                struct io_uring_cqe *cqe;
                int rc;
                while ((rc = io_uring_wait_cqe(&e->xring, &cqe)) == -EINTR)
                    ;
                if (rc < 0) {
                    snprintf(err, errlen, "%s: layer %u expert reads: %s", e->path, l,
                             strerror(-rc));
                    return -1;
                }
                /* a short read of an aligned superset ends only at the end of the file, past
                 * every tensor's bytes: a read error is negative */
                int res = cqe->res;
                io_uring_cqe_seen(&e->xring, cqe);
                if (res < 0) {
                    snprintf(err, errlen, "%s: layer %u expert reads: %s", e->path, l,
                             strerror(-res));
                    return -1;
                }
            }
            st->expert_read_ns += util_now_ns() - t0;
        }
        if (pass == 0)
            th = util_now_ns();
    }
    st->expert_hash_ns += util_now_ns() - th;
    st->wait_ns += util_now_ns() - t0;
    return 0;
}

/* A streamed layer with experts, its other tensors computed: route, fetch the routed
 * experts (cache, else the file), compute them, end the layer. */
static int s_experts_run(exec_t *e, uint32_t l, exec_stats *st, char *err, size_t errlen)
{
    const arch_layer *L = &e->am->layers[l];
    uint32_t t0 = L->n_tensors, E = 0;
    for (uint32_t t = L->n_vectors; t < L->n_tensors; t++)
        if (L->t[t].n_expert) {
            t0 = t0 < t ? t0 : t;
            E = L->t[t].n_expert;
            st->expert_dense_bytes += L->t[t].nbytes;
        }
    if (arch_layer_before(e->run, t0))
        goto fail;
    arch_layer_experts(e->run, e->xused);
    e->xepoch++;
    for (uint32_t x = 0; x < E; x++) {
        if (!e->xused[x])
            continue;
        int32_t hit = -1, victim = -1;
        for (uint32_t i = 0; i < e->plan.expert_slots; i++) {
            s_xslot *s = &e->xs[i];
            if (s->valid == 1 && s->layer == l && s->expert == x) {
                hit = (int32_t)i;
                break;
            }
            /* the least recently used slot this layer does not hold (empty ones first) */
            if (s->pin != e->xepoch &&
                (victim < 0 || (s->valid != 1 && e->xs[victim].valid == 1) ||
                 ((s->valid == 1) == (e->xs[victim].valid == 1) && s->used < e->xs[victim].used)))
                victim = (int32_t)i;
        }
        if (hit < 0 && victim < 0) { /* the plan keeps a step's worth: never */
            snprintf(err, errlen, "%s: layer %u: the expert cache of %u slots is full", e->path,
                     l, e->plan.expert_slots);
            return -1;
        }
        if (hit >= 0) {
            st->expert_hits++;
        } else {
            st->expert_misses++;
            hit = victim;
            e->xs[hit] = (s_xslot){ .layer = l, .expert = x, .valid = 0 };
        }
        e->xs[hit].pin = e->xepoch;
        e->xs[hit].used = ++e->xtick;
        e->xmap[x] = hit;
    }
    if (s_experts_read(e, l, st, err, errlen))
        return -1;
    st->expert_layers++;
    uint64_t part = 0;
    for (uint32_t t = t0; t < L->n_tensors; t++) {
        const arch_tensor *T = &L->t[t];
        uint64_t per = T->rows / E, slice = T->nbytes / E;
        if (t != t0 && arch_layer_before(e->run, t))
            goto fail;
        for (uint32_t x = 0; x < E; x++) {
            const uint8_t *rows = NULL;
            if (e->xused[x] && e->xs[e->xmap[x]].valid == 1) {
                uint64_t off = T->off + x * slice;
                rows = e->xmem + (uint64_t)e->xmap[x] * e->plan.expert_slot_bytes + part +
                       (off - off / EXEC_ALIGN * EXEC_ALIGN);
            } else if (e->xused[x]) {
                /* its bytes failed the gate: the step fails (content_fail), as a layer's */
                snprintf(err, errlen, "%s: layer %u expert %u: %s", e->path, l, x,
                         SUMS_MISMATCH);
                return -1;
            }
            if (arch_layer_rows(e->run, t, x * per, per, rows))
                goto fail;
        }
        part += exec_round_up(slice + 2 * EXEC_ALIGN, EXEC_ALIGN);
    }
    if (arch_layer_end(e->run))
        goto fail;
    return 0;
fail:
    snprintf(err, errlen, "%s: %s", e->path, arch_run_error(e->run));
    return -1;
}

static exec_t *s_new(exec_t *e, const uint64_t *sums, uint32_t first, uint32_t last,
                     const exec_opts *o, char *err, size_t errlen)
{
    e->first = first;
    e->last = last;
    e->o = *o;
    e->fd = -1;
    if (e->o.queue_depth < 1)
        e->o.queue_depth = 1;
    if (e->o.max_pos < 1)
        e->o.max_pos = 1;
    if (exec_plan_arch(e->am, e->path, first, last, &e->o, &e->plan, err, errlen))
        goto err;
    if (!(e->sums = malloc(e->am->hp.n_layers * sizeof *e->sums))) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    memcpy(e->sums, sums, e->am->hp.n_layers * sizeof *e->sums);
    if (s_open(e, err, errlen))
        goto err;
    if (!(e->run = arch_run_new(e->am, e->o.max_pos, err, errlen)))
        goto err;
    /* the expert checksums first: a split layer is verified at load against its layer entry */
    if (e->plan.expert_slots && s_experts_init(e, err, errlen))
        goto err;
    if (s_load_resident(e, err, errlen))
        goto err;
    if (e->plan.n_streamed && s_ring_init(e, err, errlen))
        goto err;
    return e;
err:
    exec_free(&e);
    return NULL;
}

exec_t *exec_new(const model_t *m, uint32_t first, uint32_t last, const exec_opts *o,
                 char *err, size_t errlen)
{
    exec_t *e = calloc(1, sizeof *e);
    uint64_t *sums = calloc(m->n_layers ? m->n_layers : 1, sizeof *sums);
    if (!e || !sums || !(e->path = strdup(m->path))) {
        snprintf(err, errlen, "out of memory");
        free(sums);
        exec_free(&e);
        return NULL;
    }
    e->fd = -1;
    if (exec_dense_arch(m, &e->own_am, err, errlen)) {
        free(sums);
        exec_free(&e);
        return NULL;
    }
    e->am = &e->own_am;
    for (uint32_t l = 0; l < m->n_layers; l++)
        sums[l] = m->layers[l].checksum;
    e = s_new(e, sums, first, last, o, err, errlen);
    free(sums);
    return e;
}

exec_t *exec_new_arch(const arch_model *am, const char *path, const uint64_t *sums,
                      uint32_t first, uint32_t last, const exec_opts *o, char *err,
                      size_t errlen)
{
    exec_t *e = calloc(1, sizeof *e);
    if (!e || !(e->path = strdup(path))) {
        snprintf(err, errlen, "out of memory");
        free(e);
        return NULL;
    }
    e->fd = -1;
    e->am = am;
    return s_new(e, sums, first, last, o, err, errlen);
}

void exec_set_threads(exec_t *e, int nthreads)
{
    arch_run_set_threads(e->run, nthreads);
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

/* The step's sessions as layer l's segments (NULL caches for a stateless family). */
static const arch_seg *s_lsegs(exec_t *e, const exec_seg *segs, uint32_t k, uint32_t l)
{
    for (uint32_t i = 0; i < k; i++)
        e->lsegs[i] = (arch_seg){ .kv = segs[i].kv ? &segs[i].kv[l - e->first] : NULL,
                                  .pos0 = segs[i].pos0, .n = segs[i].n };
    return e->lsegs;
}

/* Feed one arrived chunk to the layer hooks: a vector goes to the stage (the layer begins
 * after its last vector); a matrix's first range prepares its input, its rows are computed,
 * and the layer's last chunk ends it. */
static int s_compute(exec_t *e, const exec_chunk *ch, const void *data, exec_stats *st,
                     char *err, size_t errlen)
{
    const arch_layer *L = &e->am->layers[ch->layer];
    const arch_tensor *T = &L->t[ch->tensor];
    if (!T->is_matrix) {
        uint64_t at = 0;
        for (uint32_t i = 0; i < ch->tensor; i++)
            at += exec_round_up(L->t[i].nbytes, 64);
        memcpy(e->stage + at, data, T->nbytes);
        e->stage_ptr[ch->tensor] = e->stage + at;
        if (ch->tensor + 1 == L->n_vectors &&
            arch_layer_begin_segs(e->run, ch->layer, e->stage_ptr,
                                  s_lsegs(e, e->segs, e->k, ch->layer), e->k, e->x, err, errlen))
            return -1;
        return 0;
    }
    if (ch->r0 == 0 && L->n_vectors == 0 && ch->tensor == 0 &&
        arch_layer_begin_segs(e->run, ch->layer, NULL, s_lsegs(e, e->segs, e->k, ch->layer),
                              e->k, e->x, err, errlen))
        return -1;
    if ((ch->r0 == 0 && arch_layer_before(e->run, ch->tensor)) ||
        arch_layer_rows(e->run, ch->tensor, ch->r0, ch->nrows, data)) {
        snprintf(err, errlen, "%s: %s", e->path, arch_run_error(e->run));
        return -1;
    }
    if (!ch->last)
        return 0;
    /* the ring carries no expert tensor: a layer with experts goes on after its router */
    if (e->plan.expert_slots && ch->tensor + 1 < L->n_tensors && L->t[ch->tensor + 1].n_expert)
        return s_experts_run(e, ch->layer, st, err, errlen);
    if (arch_layer_end(e->run)) {
        snprintf(err, errlen, "%s: %s", e->path, arch_run_error(e->run));
        return -1;
    }
    return 0;
}

/* Consume streamed chunks for one step in order, computing as they arrive; the hasher
 * thread hashes each one beside the compute. */
static int s_stream_step(exec_t *e, exec_stats *st, char *err, size_t errlen)
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
        const exec_chunk *ch = s_chunk_of(e, e->consume_seq);
        if (s->res < 0 || (uint64_t)s->res < s->skip + s->want) {
            snprintf(err, errlen, "%s: layer %u %s rows %llu..+%llu: %s", e->path, ch->layer,
                     e->am->layers[ch->layer].t[ch->tensor].name, (unsigned long long)ch->r0,
                     (unsigned long long)ch->nrows,
                     s->res < 0 ? strerror(-s->res) : "short read");
            rc = -1;
            break;
        }
        s_hash_post(e);
        if (!e->o.io_only) {
            t = util_now_ns();
            rc = s_compute(e, ch, s->buf + s->skip, st, err, errlen);
            st->compute_ns += util_now_ns() - t;
            if (rc) {
                s->state = S_FREE;
                e->consume_seq++;
                break;
            }
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

/* The split layers: attention and router from their resident tensors, then the routed experts
 * through the cache (s_experts_run); the ring keeps reading the streamed layers meanwhile. */
static int s_split_step(exec_t *e, const exec_seg *segs, uint32_t k, float *x, exec_stats *st,
                        char *err, size_t errlen)
{
    for (uint32_t i = e->plan.n_resident; i < e->plan.n_resident + e->plan.n_split; i++) {
        uint32_t l = e->first + i;
        const arch_layer *L = &e->am->layers[l];
        const void *const *data = e->res_data + (size_t)i * ARCH_MAX_LAYER_TENSORS;
        uint64_t t = util_now_ns(), w = st->wait_ns;
        if (arch_layer_begin_segs(e->run, l, data, s_lsegs(e, segs, k, l), k, x, err, errlen))
            return -1;
        for (uint32_t j = L->n_vectors; j < L->n_tensors && !L->t[j].n_expert; j++)
            if (arch_layer_before(e->run, j) ||
                arch_layer_rows(e->run, j, 0, L->t[j].rows, data[j])) {
                snprintf(err, errlen, "%s: %s", e->path, arch_run_error(e->run));
                return -1;
            }
        if (s_experts_run(e, l, st, err, errlen))
            return -1;
        st->compute_ns += util_now_ns() - t - (st->wait_ns - w); /* the reads are wait */
        if (e->plan.n_streamed && e->uring_ok) {
            s_reap(e, 0);
            s_submit_more(e, st);
        }
    }
    return 0;
}

int exec_step(exec_t *e, float *x, exec_stats *st, char *err, size_t errlen)
{
    return exec_step_n(e, x, 1, 0, NULL, st, err, errlen);
}

int exec_step_n(exec_t *e, float *x, uint32_t n, uint32_t pos0, arch_kv *kv, exec_stats *st,
                char *err, size_t errlen)
{
    exec_seg one = { .kv = kv, .pos0 = pos0, .n = n };
    return exec_step_segs(e, x, &one, 1, st, err, errlen);
}

static int s_step_segs(exec_t *e, float *x, const exec_seg *segs, uint32_t k, exec_stats *st,
                       char *err, size_t errlen);

int exec_step_segs(exec_t *e, float *x, const exec_seg *segs, uint32_t k, exec_stats *st,
                   char *err, size_t errlen)
{
    /* a generated token's step is one position: its expert figures apart from a prompt's */
    uint64_t rb = st->expert_read_bytes, h = st->expert_hits, m = st->expert_misses;
    uint64_t rn = st->expert_read_ns, hn = st->expert_hash_ns, t0 = util_now_ns();
    int rc = s_step_segs(e, x, segs, k, st, err, errlen);
    if (rc == 0 && k == 1 && segs[0].n == 1) {
        st->steps_1++;
        st->expert_read_bytes_1 += st->expert_read_bytes - rb;
        st->expert_hits_1 += st->expert_hits - h;
        st->expert_misses_1 += st->expert_misses - m;
        st->expert_read_ns_1 += st->expert_read_ns - rn;
        st->expert_hash_ns_1 += st->expert_hash_ns - hn;
        st->step_ns_1 += util_now_ns() - t0;
    }
    return rc;
}

static int s_step_segs(exec_t *e, float *x, const exec_seg *segs, uint32_t k, exec_stats *st,
                       char *err, size_t errlen)
{
    uint64_t t, n = 0;
    for (uint32_t i = 0; i < k; i++)
        n += segs[i].n;
    if (k < 1 || k > EXEC_MAX_SEGS || n < 1 || n > e->o.max_pos) {
        snprintf(err, errlen, "%s: a step of %llu positions of %u sessions (the executor holds "
                 "1..%u positions, 1..%d sessions)", e->path, (unsigned long long)n, k,
                 e->o.max_pos, EXEC_MAX_SEGS);
        return -1;
    }
    if (e->plan.n_streamed)
        s_submit_more(e, st); /* start the disk before computing the resident layers */
    if (!e->o.io_only) {
        t = util_now_ns();
        for (uint32_t i = 0; i < e->plan.n_resident; i++) {
            uint32_t l = e->first + i;
            if (arch_layer_forward_segs(e->run, l,
                                        e->res_data + (size_t)i * ARCH_MAX_LAYER_TENSORS,
                                        s_lsegs(e, segs, k, l), k, x, err, errlen))
                return -1;
            /* Keep queue_depth reads in flight while the resident layers compute (≈3 ms each
             * here): the ring has more free slots than the depth, and refilling only after
             * the last resident layer left the disk idle for part of it. */
            if (e->plan.n_streamed && e->uring_ok) {
                s_reap(e, 0);
                s_submit_more(e, st);
            }
        }
        st->compute_ns += util_now_ns() - t;
        if (e->plan.n_split && s_split_step(e, segs, k, x, st, err, errlen))
            return -1;
    }
    if (e->plan.n_streamed) {
        st->layers_due += e->plan.n_streamed;
        e->x = x;
        e->segs = segs;
        e->k = k;
        return s_stream_step(e, st, err, errlen);
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
    if (e->xring_ok)
        io_uring_queue_exit(&e->xring);
    free(e->esums);
    free(e->ebase);
    iobuf_free(&e->xbuf);
    free(e->xs);
    free(e->xused);
    free(e->xmap);
    iobuf_free(&e->ring_mem);
    free(e->slots);
    free(e->res_arena);
    free(e->res_data);
    free(e->sched);
    free(e->stage);
    arch_run_free(&e->run);
    arch_model_close(&e->own_am);
    free(e->sums);
    free(e->path);
    if (e->xx)
        XXH3_freeState(e->xx);
    if (e->fd >= 0)
        close(e->fd);
    free(e);
    *pe = NULL;
}

/* bench.c — disk bandwidth in the SSD arm's pattern and resident-layer compute time. lab/ */
#include "lab/bench.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "arch/sums.h"
#include "runtime/exec.h"
#include "gguf/gguf.h"
#include "arch/kernel.h"
#include "base/iobuf.h"
#include "base/util.h"
#include "quant/quant.h"
#include "runtime/gate.h"

/* The reader's streaming (io_only: read and discard), passes times over, timed beside the
 * device's own view: the body of bench_disk_run and bench_disk_run_gguf. Frees e. */
static int s_disk_passes(exec_t *e, const char *path, uint32_t first, uint64_t chunk_bytes,
                         const bench_disk_opts *bo, bench_disk_result *out, char *err,
                         size_t errlen)
{
    uint32_t passes = bo->passes;
    exec_stats st = { 0 };
    devstat_dev dv;
    devstat_sample d0 = { 0 }, d1 = { 0 };
    float dummy = 0;
    snprintf(out->io_buffers, sizeof out->io_buffers, "%s", exec_io_buffers(e));
    out->has_device = devstat_find(path, &dv, out->device_error, sizeof out->device_error) == 0 &&
                      devstat_read(&dv, &d0, out->device_error, sizeof out->device_error) == 0;
    uint64_t io0 = util_io_read_bytes(), t0 = util_now_ns();
    for (uint32_t p = 0; p < passes; p++) {
        if (exec_step(e, &dummy, &st, err, errlen)) {
            exec_free(&e);
            return -1;
        }
    }
    exec_drain(e);
    uint64_t t1 = util_now_ns();
    if (out->has_device &&
        devstat_read(&dv, &d1, out->device_error, sizeof out->device_error) == 0) {
        devstat_diff(&d0, &d1, &out->dev);
        snprintf(out->device, sizeof out->device, "%s", dv.name);
    } else {
        out->has_device = 0;
    }
    out->queue_depth = bo->queue_depth;
    out->ring_slots = exec_get_plan(e)->ring_slots;
    out->first_layer = first;
    out->chunk_bytes = chunk_bytes;
    out->bytes = st.streamed_bytes;
    out->read_bytes = util_io_read_bytes() - io0;
    out->seconds = (t1 - t0) / 1e9;
    out->gbps = out->seconds > 0 ? out->bytes / out->seconds / 1e9 : 0;
    out->cache_pass = gate_cache_ok(out->read_bytes, out->bytes);
    exec_free(&e);
    return 0;
}

static exec_opts s_disk_opts(const bench_disk_opts *bo)
{
    return (exec_opts){ .queue_depth = bo->queue_depth, .chunk_bytes = bo->chunk_bytes,
                        .stream_all = 1, .io_only = 1, .total_steps = bo->passes,
                        .budget_bytes = 1, .buffers_4k = bo->buffers_4k,
                        .ring_slots = bo->ring_slots, .max_pos = 1 };
}

int bench_disk_run(const model_t *m, const bench_disk_opts *bo, bench_disk_result *out,
                   char *err, size_t errlen)
{
    exec_opts o = s_disk_opts(bo);
    uint32_t first = bo->first;
    memset(out, 0, sizeof *out);
    if (first >= m->n_layers)
        first = 0;
    exec_t *e = exec_new(m, first, m->n_layers, &o, err, errlen);
    if (!e)
        return -1;
    return s_disk_passes(e, m->path, first,
                         (uint64_t)exec_get_plan(e)->rows_per_chunk * m->dim * 4, bo, out, err,
                         errlen);
}

int bench_disk_run_gguf(const char *path, const bench_disk_opts *bo, bench_disk_result *out,
                        char *err, size_t errlen)
{
    exec_opts o = s_disk_opts(bo);
    gguf_file *g = gguf_open(path, err, errlen);
    arch_model am;
    uint64_t *sums = NULL;
    sums_source src;
    int rc = -1;
    memset(out, 0, sizeof *out);
    if (!g)
        return -1;
    if (arch_model_open(&am, g, err, errlen))
        goto out;
    uint32_t first = bo->first < am.hp.n_layers ? bo->first : 0;
    if (!(sums = calloc(am.hp.n_layers, sizeof *sums))) {
        snprintf(err, errlen, "out of memory");
    } else if (sums_get(&am, path, sums, &src, NULL, 0, err, errlen) == 0) {
        exec_t *e = exec_new_arch(&am, path, sums, first, am.hp.n_layers, &o, err, errlen);
        if (e) /* chunks are whole rows, whose bytes differ by tensor: the target is reported */
            rc = s_disk_passes(e, path, first, bo->chunk_bytes, bo, out, err, errlen);
    }
    free(sums);
    arch_model_close(&am);
out:
    gguf_close(&g);
    return rc;
}

int bench_layer_ms(const model_t *m, int threads, int reps, double *ms, char *err,
                   size_t errlen)
{
    return bench_layers_ms(m, 1, threads, reps, ms, err, errlen);
}

int bench_layers_ms(const model_t *m, uint32_t n, int threads, int reps, double *ms, char *err,
                    size_t errlen)
{
    exec_opts o = { .budget_bytes = 0, .queue_depth = 1, .chunk_bytes = 4u << 20 };
    exec_stats st = { 0 };
    exec_t *e;
    uint32_t d = m->dim;
    float *x = malloc(sizeof(float) * d);
    double *v = malloc(sizeof(double) * (size_t)reps);
    int rc = -1;
    if (!x || !v) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    kernel_set_threads(threads);
    if (n < 1 || n > m->n_layers)
        n = n < 1 ? 1 : m->n_layers;
    e = exec_new(m, 0, n, &o, err, errlen);
    if (!e)
        goto out;
    exec_set_threads(e, threads); /* a quantized W's row products (quant's pool) */
    util_step_input(1, 0, x, (int)d);
    exec_step(e, x, &st, err, errlen); /* warm */
    for (int i = 0; i < reps; i++) {
        uint64_t t = util_now_ns();
        exec_step(e, x, &st, err, errlen);
        v[i] = (util_now_ns() - t) / 1e6;
        util_step_input(1, (uint64_t)i + 1, x, (int)d);
    }
    util_sort_doubles(v, (size_t)reps);
    *ms = util_percentile(v, (size_t)reps, 50) / n;
    exec_free(&e);
    rc = 0;
out:
    free(x);
    free(v);
    return rc;
}

int bench_mem(uint32_t dim, int reps, double *read_ms, double *sgemv_ms, char *err,
              size_t errlen)
{
    uint64_t n = (uint64_t)dim * dim;
    float *W = NULL, *u = malloc(sizeof(float) * dim), *y = malloc(sizeof(float) * dim);
    double *tr = malloc(sizeof(double) * (size_t)reps), *ts = malloc(sizeof(double) * (size_t)reps);
    volatile uint64_t sink = 0;
    int rc = -1;
    if (posix_memalign((void **)&W, 4096, n * 4) || !u || !y || !tr || !ts) {
        snprintf(err, errlen, "out of memory for a %u x %u layer", dim, dim);
        goto out;
    }
    for (uint64_t i = 0; i < n; i++)
        W[i] = (float)(i % 1000) * 1e-3f;
    for (uint32_t i = 0; i < dim; i++)
        u[i] = 1e-3f * (float)i;
    kernel_set_threads(1);
    for (int r = 0; r < reps; r++) {
        uint64_t t = util_now_ns();
        sink ^= quant_read_stream(W, n * 4 / 64 * 64);
        tr[r] = (util_now_ns() - t) / 1e6;
        t = util_now_ns();
        kernel_rows(W, u, y, 0, dim, dim);
        ts[r] = (util_now_ns() - t) / 1e6;
    }
    util_sort_doubles(tr, (size_t)reps);
    util_sort_doubles(ts, (size_t)reps);
    *read_ms = util_percentile(tr, (size_t)reps, 50);
    *sgemv_ms = util_percentile(ts, (size_t)reps, 50);
    rc = 0;
out:
    (void)sink;
    free(W);
    free(u);
    free(y);
    free(tr);
    free(ts);
    return rc;
}

/* One visit's reads: submitted together, then every completion reaped. */
static int s_visit(struct io_uring *r, int fd, uint8_t **buf, const uint64_t *aoff,
                   const uint64_t *alen, uint32_t n, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < n; i++) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(r);
        if (!sqe) {
            snprintf(err, errlen, "expert reads: io_uring queue full");
            return -1;
        }
        io_uring_prep_read(sqe, fd, buf[i], (unsigned)alen[i], aoff[i]);
    }
    io_uring_submit(r);
    for (uint32_t i = 0; i < n; i++) {
        struct io_uring_cqe *cqe;
        int rc;
        while ((rc = io_uring_wait_cqe(r, &cqe)) == -EINTR)
            ;
        if (rc < 0 || cqe->res < 0) {
            snprintf(err, errlen, "expert reads: %s", strerror(rc < 0 ? -rc : -cqe->res));
            return -1;
        }
        io_uring_cqe_seen(r, cqe);
    }
    return 0;
}

int bench_experts_gguf(const char *path, uint32_t first, uint32_t experts, uint64_t bytes,
                       uint32_t seed, bench_disk_result *out, char *err, size_t errlen)
{
    enum { S_NT = 4 };
    gguf_file *g = gguf_open(path, err, errlen);
    arch_model am;
    struct io_uring r;
    int fd = -1, ring = 0, rc = -1;
    uint32_t n = 0;
    uint8_t *buf[64 * S_NT] = { 0 };
    uint64_t aoff[64 * S_NT], alen[64 * S_NT], got = 0, x = seed * 2654435761u + 1;
    memset(out, 0, sizeof *out);
    if (!g || arch_model_open(&am, g, err, errlen)) {
        gguf_close(&g);
        return -1;
    }
    experts = experts < 1 ? 1 : experts > 64 ? 64 : experts;
    if (first >= am.hp.n_layers || !am.hp.n_expert) {
        snprintf(err, errlen, "%s: no layer with experts from %u on", path, first);
        goto out;
    }
    if ((fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC)) < 0 ||
        io_uring_queue_init(experts * S_NT, &r, 0)) {
        snprintf(err, errlen, "%s: %s", path, fd < 0 ? strerror(errno) : "io_uring unavailable");
        goto out;
    }
    ring = 1;
    uint64_t t0 = util_now_ns(), io0 = util_io_read_bytes();
    while (got < bytes) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64: layer and experts */
        const arch_layer *L = &am.layers[first + x % (am.hp.n_layers - first)];
        n = 0;
        for (uint32_t e = 0; e < experts; e++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            for (uint32_t t = 0; t < L->n_tensors && n < 64 * S_NT; t++) {
                const arch_tensor *T = &L->t[t];
                if (!T->n_expert)
                    continue;
                uint64_t slice = T->nbytes / T->n_expert, off = T->off + (x % T->n_expert) * slice;
                aoff[n] = off / EXEC_ALIGN * EXEC_ALIGN;
                alen[n] = (off + slice + EXEC_ALIGN - 1) / EXEC_ALIGN * EXEC_ALIGN - aoff[n];
                if (!buf[n] && posix_memalign((void **)&buf[n], EXEC_ALIGN, alen[n] + EXEC_ALIGN)) {
                    buf[n] = NULL;
                    snprintf(err, errlen, "out of memory");
                    goto out;
                }
                got += alen[n++];
            }
        }
        if (s_visit(&r, fd, buf, aoff, alen, n, err, errlen))
            goto out;
    }
    out->seconds = (util_now_ns() - t0) / 1e9;
    out->read_bytes = util_io_read_bytes() - io0;
    out->bytes = got;
    out->queue_depth = n;
    out->chunk_bytes = n ? got / n : 0;
    out->gbps = out->seconds > 0 ? got / out->seconds / 1e9 : 0;
    out->cache_pass = gate_cache_ok(out->read_bytes, out->bytes);
    rc = 0;
out:
    for (uint32_t i = 0; i < 64 * S_NT; i++)
        free(buf[i]);
    if (ring)
        io_uring_queue_exit(&r);
    if (fd >= 0)
        close(fd);
    arch_model_close(&am);
    gguf_close(&g);
    return rc;
}

/* One line of a miss log ("ONEPOS LAYER EXPERT...") as the arm's reads (runtime/exec.c,
 * s_experts_read): each missed expert takes the next of `slots` cache slots of slot_bytes
 * (*cur cycles through them), and its slice of every expert tensor of the layer is read as
 * its aligned superset into the slot, one after the other, each at the next multiple of
 * EXEC_ALIGN past slice + 2 x EXEC_ALIGN. n reads, their bytes in *bytes. */
static int s_replay_line(const arch_model *am, const char *line, uint32_t slots,
                         uint64_t slot_bytes, uint32_t *cur, int *one, uint64_t *aoff,
                         uint64_t *alen, uint64_t *dst, uint32_t maxr, uint32_t *n,
                         uint64_t *bytes)
{
    char *p, *end;
    *one = (int)strtol(line, &end, 10);
    uint32_t l = (uint32_t)strtoul(end, &p, 10);
    *n = 0;
    *bytes = 0;
    if (p == end || l >= am->hp.n_layers)
        return -1;
    const arch_layer *L = &am->layers[l];
    for (unsigned long x; (x = strtoul(p, &end, 10)), end != p; p = end) {
        uint64_t part = (uint64_t)*cur * slot_bytes, at = part;
        *cur = (*cur + 1) % slots;
        for (uint32_t t = 0; t < L->n_tensors; t++) {
            const arch_tensor *T = &L->t[t];
            if (!T->n_expert || x >= T->n_expert)
                continue;
            uint64_t slice = T->nbytes / T->n_expert, off = T->off + x * slice;
            if (*n == maxr || at + slice + 2 * EXEC_ALIGN > part + slot_bytes)
                return -1;
            aoff[*n] = off / EXEC_ALIGN * EXEC_ALIGN;
            alen[*n] = (off + slice + EXEC_ALIGN - 1) / EXEC_ALIGN * EXEC_ALIGN - aoff[*n];
            dst[*n] = at;
            at += (slice + 3 * EXEC_ALIGN - 1) / EXEC_ALIGN * EXEC_ALIGN;
            *bytes += alen[(*n)++];
        }
    }
    return 0;
}

/* What a replay carries from line to line: the model's layout, the cache's slots and the
 * reads of the current line (s_replay_line fills them). */
enum { S_MAXR = 1024 };
typedef struct {
    arch_model am;
    uint32_t slots, cur, n;
    uint64_t slot_bytes, bytes;
    int one;
    uint64_t aoff[S_MAXR], alen[S_MAXR], dst[S_MAXR];
} s_replay;

static int s_replay_next(s_replay *x, const char *line)
{
    return s_replay_line(&x->am, line, x->slots, x->slot_bytes, &x->cur, &x->one, x->aoff,
                         x->alen, x->dst, S_MAXR, &x->n, &x->bytes);
}

/* The first read of the log: every miss line checked, the passes counted, the deepest line's
 * reads (the ring's depth) in *maxn. */
static int s_replay_scan(s_replay *x, FILE *f, const char *log, uint32_t *npass, uint32_t *maxn,
                         char *err, size_t errlen)
{
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    *npass = *maxn = 0;
    while (getline(&line, &cap, f) > 0) {
        if (!strncmp(line, "pass ", 5)) {
            (*npass)++;
            continue;
        }
        if (s_replay_next(x, line)) {
            snprintf(err, errlen, "%s: not a miss line, or over %d reads or a slot: %s", log,
                     S_MAXR, line);
            rc = -1;
            break;
        }
        *maxn = x->n > *maxn ? x->n : *maxn;
    }
    if (!rc && !*maxn) {
        snprintf(err, errlen, "%s: no miss", log);
        rc = -1;
    }
    free(line);
    return rc;
}

/* One replay of the whole log into the cache: the reads of the timed lines (those of passes
 * past first_timed, or without pass lines the one-position ones) in *ns and their bytes in
 * *timed, the content gate's hashing of them in *hns; every line's bytes added to *all. */
static int s_replay_pass(s_replay *x, FILE *f, struct io_uring *r, int fd, uint8_t *cache,
                         uint32_t first_timed, uint64_t *ns, uint64_t *timed, uint64_t *hns,
                         uint64_t *all, uint64_t *sink, char *err, size_t errlen)
{
    uint8_t *buf[S_MAXR];
    char *line = NULL;
    size_t cap = 0;
    uint32_t at = 0; /* passes begun */
    int rc = 0;
    rewind(f);
    while (getline(&line, &cap, f) > 0) {
        if (!strncmp(line, "pass ", 5)) {
            at++;
            continue;
        }
        s_replay_next(x, line);
        for (uint32_t i = 0; i < x->n; i++)
            buf[i] = cache + x->dst[i];
        uint64_t t0 = util_now_ns();
        if (x->n && s_visit(r, fd, buf, x->aoff, x->alen, x->n, err, errlen)) {
            rc = -1; /* err names the read; nothing of this line to hash */
            break;
        }
        uint64_t t1 = util_now_ns();
        for (uint32_t i = 0; i < x->n; i++) /* the content gate's hash, as the arm's */
            *sink ^= XXH3_64bits(buf[i], x->alen[i]);
        if (first_timed != UINT32_MAX ? at > first_timed : x->one) {
            *ns += t1 - t0;
            *hns += util_now_ns() - t1;
            *timed += x->bytes;
        }
        *all += x->bytes;
    }
    free(line);
    return rc;
}

int bench_experts_replay(const char *path, const char *log, uint32_t slots, uint64_t slot_bytes,
                         uint32_t last_passes, uint32_t passes, double *pass_gbps,
                         bench_disk_result *out, char *err, size_t errlen)
{
    gguf_file *g = gguf_open(path, err, errlen);
    s_replay *x = calloc(1, sizeof *x);
    struct io_uring r;
    FILE *f = NULL;
    int fd = -1, ring = 0, rc = -1, opened = 0;
    iobuf ib = { 0 };
    uint64_t all = 0;
    uint32_t maxn = 0, npass = 0;
    double *v = calloc(passes ? passes : 1, sizeof *v);
    double *rms = calloc(passes ? passes : 1, sizeof *rms);
    memset(out, 0, sizeof *out);
    if (!x || !v || !rms || !g || arch_model_open(&x->am, g, err, errlen)) {
        if (g && (!x || !v || !rms))
            snprintf(err, errlen, "out of memory");
        goto out;
    }
    opened = 1;
    x->slots = slots;
    x->slot_bytes = slot_bytes;
    if (!passes || !slots || !slot_bytes || !(f = fopen(log, "r"))) {
        snprintf(err, errlen, "%s: %s", log,
                 !passes || !slots || !slot_bytes ? "no pass or no slot" : strerror(errno));
        goto out;
    }
    if (s_replay_scan(x, f, log, &npass, &maxn, err, errlen))
        goto out;
    /* the cache as the arm's: huge pages, touched before the first read (exec.c) */
    if (iobuf_alloc(&ib, (uint64_t)slots * slot_bytes, 0, err, errlen))
        goto out;
    if ((fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC)) < 0 ||
        io_uring_queue_init(maxn, &r, 0)) {
        snprintf(err, errlen, "%s: %s", path, fd < 0 ? strerror(errno) : "io_uring unavailable");
        goto out;
    }
    ring = 1;
    memset(ib.p, 0, ib.len);
    snprintf(out->io_buffers, sizeof out->io_buffers, "%s", ib.desc);
    uint64_t io0 = util_io_read_bytes(), tns = 0, hns = 0, htimed = 0, sink = 0;
    x->cur = 0;
    /* timed: the last last_passes passes (those a generated token's time covers), or
     * without pass lines or last_passes, the one-position ones */
    uint32_t first_timed = last_passes && npass >= last_passes ? npass - last_passes : UINT32_MAX;
    for (uint32_t ps = 0; ps < passes; ps++) {
        uint64_t ns = 0, timed = 0;
        if (s_replay_pass(x, f, &r, fd, ib.p, first_timed, &ns, &timed, &hns, &all, &sink, err,
                          errlen))
            goto out;
        v[ps] = ns ? timed / (double)ns : 0;
        rms[ps] = ns / 1e6 / (first_timed != UINT32_MAX ? last_passes : 1);
        if (pass_gbps)
            pass_gbps[ps] = v[ps];
        tns += ns;
        htimed += timed;
    }
    out->hash_gbps = hns ? htimed / (double)hns : 0;
    out->timed_passes = first_timed != UINT32_MAX ? last_passes : 0;
    out->hash_ms = out->timed_passes ? hns / 1e6 / passes / out->timed_passes : 0;
    (void)sink;
    out->read_bytes = util_io_read_bytes() - io0;
    out->bytes = all;
    out->seconds = tns / 1e9;
    out->queue_depth = maxn;
    /* the passes after the first: the runs come after the bench's own pass, so each run's
     * reads were made before (by the bench or the run before it) as every later pass's were */
    uint32_t from = passes > 1 ? 1 : 0;
    util_sort_doubles(v + from, passes - from);
    out->gbps = util_percentile(v + from, passes - from, 50);
    util_sort_doubles(rms + from, passes - from);
    out->read_ms = out->timed_passes ? util_percentile(rms + from, passes - from, 50) : 0;
    out->cache_pass = gate_cache_ok(out->read_bytes, out->bytes);
    rc = 0;
out:
    free(v);
    free(rms);
    iobuf_free(&ib);
    if (ring)
        io_uring_queue_exit(&r);
    if (fd >= 0)
        close(fd);
    if (f)
        fclose(f);
    if (opened)
        arch_model_close(&x->am);
    free(x);
    gguf_close(&g);
    return rc;
}

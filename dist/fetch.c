/* fetch.c — weight distribution: a worker takes its layers from the coordinator in hashed, flow-controlled, resumable chunks. dist/ */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "gguf/gguf.h"
#include "base/log.h"
#include "base/util.h"
#include "dist/worker_int.h"

static void s_prog_write(worker_t *w)
{
    char line[160];
    int fd = open(w->prog_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    int n = snprintf(line, sizeof line, "swarm-fetch 1 size %llu first %u last %u done %llu\n",
                     (unsigned long long)w->pend->model_size, w->pend->first, w->pend->last,
                     (unsigned long long)w->s_done);
    if (write(fd, line, (size_t)n) != n)
        log_warn("%s: cannot record fetch progress in %s", w->id, w->prog_path);
    fsync(fd);
    close(fd);
}

static uint64_t s_prog_read(worker_t *w)
{
    unsigned long long size = 0, done = 0;
    unsigned first = 0, last = 0;
    FILE *f = fopen(w->prog_path, "r");
    if (!f)
        return 0;
    int k = fscanf(f, "swarm-fetch 1 size %llu first %u last %u done %llu", &size, &first, &last,
                   &done);
    fclose(f);
    if (k != 4 || size != w->pend->model_size || first != w->pend->first ||
        last != w->pend->last)
        return 0;
    return done;
}

/* Durable point: data on disk first, then the progress that claims it; drop the page cache
 * (v1 charges it to our cgroup, and the loader reads with O_DIRECT anyway). */
static void s_fetch_sync(worker_t *w)
{
    fdatasync(w->fetch_fd);
    posix_fadvise(w->fetch_fd, 0, 0, POSIX_FADV_DONTNEED);
    s_prog_write(w);
    w->since_sync = 0;
}

/* The layers' ranges: every tensor of blocks [first, last) (named "blk.N.*" by GGUF
 * convention: a real model's, and the dense model's blk.N.g and blk.N.w) and rope_freqs.weight (llama3's frequency divisors, read when the layers are
 * opened), in file order, neighbours merged (a layer's tensors are adjacent in published
 * files: one range per layer range, the alignment padding between them included). Nothing
 * else: a worker holding layers 8..15 of an 8 GB model takes its share and the header. */
static int s_cmp_off(const void *a, const void *b)
{
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int s_expand(worker_t *w, const gguf_file *g, char *err, size_t errlen)
{
    const gguf_tensor **t = malloc(g->n_tensors * sizeof *t + 1);
    uint64_t n = 0;
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const char *name = g->tensors[i].name;
        char *end;
        if (!strcmp(name, "rope_freqs.weight")) {
            t[n++] = &g->tensors[i];
            continue;
        }
        if (strncmp(name, "blk.", 4))
            continue;
        unsigned long l = strtoul(name + 4, &end, 10);
        if (end != name + 4 && *end == '.' && l >= w->pend->first && l < w->pend->last)
            t[n++] = &g->tensors[i];
    }
    qsort(t, n, sizeof *t, s_cmp_off);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t off = t[i]->offset, len = t[i]->nbytes;
        uint32_t k = w->n_ranges;
        if (k > 1 && off <= w->r_off[k - 1] + w->r_len[k - 1] + g->alignment) {
            uint64_t end = off + len > w->r_off[k - 1] + w->r_len[k - 1]
                               ? off + len : w->r_off[k - 1] + w->r_len[k - 1];
            w->s_total += end - (w->r_off[k - 1] + w->r_len[k - 1]);
            w->r_len[k - 1] = end - w->r_off[k - 1];
            continue;
        }
        if (k == WORKER_MAX_RANGES) {
            snprintf(err, errlen, "layers [%u, %u) lie in more than %d separate byte ranges",
                     w->pend->first, w->pend->last, WORKER_MAX_RANGES - 1);
            free(t);
            return -1;
        }
        w->r_off[k] = off;
        w->r_len[k] = len;
        w->n_ranges++;
        w->s_total += len;
    }
    free(t);
    return 0;
}

/* Once the header is here: the byte ranges of the assigned layers (s_expand). */
static int s_fetch_expand(worker_t *w, char *err, size_t errlen)
{
    char why[512];
    fdatasync(w->fetch_fd);
    gguf_file *g = gguf_open(w->fetch_path, why, sizeof why);
    if (!g) {
        snprintf(err, errlen, "fetched header: %s", why);
        return -1;
    }
    int rc = 0;
    if (g->file_size != w->pend->model_size) {
        snprintf(err, errlen, "fetched header does not describe the assigned model");
        rc = -1;
    }
    if (!rc)
        rc = s_expand(w, g, err, errlen);
    gguf_close(&g);
    if (!rc)
        w->ranges_full = 1;
    return rc;
}

/* Stream position -> file offset and bytes left in that range. */
static void s_fetch_map(const worker_t *w, uint64_t pos, uint64_t *off, uint64_t *left)
{
    for (uint32_t i = 0; i < w->n_ranges; i++) {
        if (pos < w->r_len[i]) {
            *off = w->r_off[i] + pos;
            *left = w->r_len[i] - pos;
            return;
        }
        pos -= w->r_len[i];
    }
    *off = *left = 0;
}

static void s_fetch_request(worker_t *w)
{
    while (w->s_req < w->s_total &&
           w->s_req - w->s_done < (uint64_t)WORKER_FETCH_WINDOW * PROTO_MAX_CHUNK) {
        uint64_t off, left;
        s_fetch_map(w, w->s_req, &off, &left);
        msg_fetch f = { .off = off, .len = (uint32_t)(left < PROTO_MAX_CHUNK ? left
                                                                            : PROTO_MAX_CHUNK),
                        .seq = w->s_req };
        if (!f.len || proto_encode_fetch(w->out, &f) || worker_send_ctl(w))
            return;
        w->s_req += f.len;
    }
}

void worker_fetch_stop(worker_t *w, const char *why)
{
    if (!w->fetching)
        return;
    s_fetch_sync(w);
    close(w->fetch_fd);
    w->fetching = 0;
    log_info("%s: fetch paused at %llu of %llu bytes (%s); it resumes with the next assign",
             w->id, (unsigned long long)w->s_done, (unsigned long long)w->s_total, why);
}

/* Start (or resume) fetching the bytes of assignment a into the cache. */
static int s_fetch_start(worker_t *w, const msg_assign *a, char *err, size_t errlen)
{
    const char *base = strrchr(a->model_path, '/');
    base = base ? base + 1 : a->model_path;
    if (mkdir(w->cache_dir, 0755) && errno != EEXIST) {
        snprintf(err, errlen, "cannot create cache %s: %s", w->cache_dir, strerror(errno));
        return -1;
    }
    if (!w->pend && !(w->pend = malloc(sizeof *w->pend))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *w->pend = *a;
    snprintf(w->fetch_path, sizeof w->fetch_path, "%s/%s.%llu", w->cache_dir, base,
             (unsigned long long)a->model_size);
    snprintf(w->prog_path, sizeof w->prog_path, "%s.fetch", w->fetch_path);
    w->fetch_fd = open(w->fetch_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (w->fetch_fd < 0 || ftruncate(w->fetch_fd, (off_t)a->model_size)) {
        snprintf(err, errlen, "%s: %s", w->fetch_path, strerror(errno));
        if (w->fetch_fd >= 0)
            close(w->fetch_fd);
        return -1;
    }
    w->n_ranges = 1;
    w->r_off[0] = 0;
    w->r_len[0] = a->header_bytes;
    w->s_total = a->header_bytes;
    w->ranges_full = 0;
    w->s_done = s_prog_read(w);
    w->resumed = w->s_done;
    w->fetched = 0;
    w->since_sync = 0;
    if (w->s_done >= a->header_bytes && s_fetch_expand(w, err, errlen)) {
        w->s_done = 0; /* a cache we cannot read: start over */
        w->resumed = 0;
        w->n_ranges = 1;
        w->s_total = a->header_bytes;
    }
    if (w->s_done > w->s_total)
        w->s_done = w->s_total;
    w->s_req = w->s_done;
    w->fetching = 1;
    w->fetch_t0 = util_now_ns();
    log_info("%s: fetching layers [%u, %u) of %s from the coordinator into %s%s", w->id,
             a->first, a->last, a->model_path, w->fetch_path,
             w->resumed ? " (resuming)" : "");
    return 0;
}

static void s_fetch_done(worker_t *w)
{
    s_fetch_sync(w);
    close(w->fetch_fd);
    w->fetching = 0;
    w->fetch_t0 = util_now_ns() - w->fetch_t0; /* now a duration, reported in ready */
    log_info("%s: fetched %llu bytes (+%llu resumed) in %.1f ms (%.1f MB/s)", w->id,
             (unsigned long long)w->fetched, (unsigned long long)w->resumed, w->fetch_t0 / 1e6,
             w->fetch_t0 ? w->fetched / (w->fetch_t0 / 1e9) / 1e6 : 0.0);
    worker_load_assign(w, w->pend, w->fetch_path, w->assign_t0);
}

void worker_fetch_on_chunk(worker_t *w, const msg_chunk *c)
{
    char err[512];
    uint64_t off, left;
    if (!w->fetching) {
        w->stats.bad_msgs++;
        return;
    }
    s_fetch_map(w, w->s_done, &off, &left);
    uint64_t want = left < PROTO_MAX_CHUNK ? left : PROTO_MAX_CHUNK;
    if (c->seq != w->s_done || c->off != off || c->len != want) {
        w->stats.bad_msgs++;
        if (worker_log_bad(w, WORKER_PLANE_CTL))
            log_warn("%s: unexpected chunk (seq %llu off %llu len %u; want seq %llu off %llu len "
                 "%llu): dropped", w->id, (unsigned long long)c->seq, (unsigned long long)c->off,
                 c->len, (unsigned long long)w->s_done, (unsigned long long)off,
                 (unsigned long long)want);
        return;
    }
    if (XXH3_64bits(c->data, c->len) != c->hash) {
        w->stats.bad_msgs++;
        if (worker_log_bad(w, WORKER_PLANE_CTL))
            log_warn("%s: chunk at %llu fails its hash: asking again", w->id,
                 (unsigned long long)c->off);
        w->s_req = w->s_done; /* re-request from here */
        s_fetch_request(w);
        return;
    }
    if (pwrite(w->fetch_fd, c->data, c->len, (off_t)c->off) != (ssize_t)c->len) {
        log_error("%s: cannot write %s: %s", w->id, w->fetch_path, strerror(errno));
        worker_fetch_stop(w, "write failed");
        return;
    }
    w->s_done += c->len;
    w->fetched += c->len;
    w->since_sync += c->len;
    if (w->since_sync >= WORKER_SYNC_BYTES)
        s_fetch_sync(w);
    if (!w->ranges_full && w->s_done == w->s_total) {
        if (s_fetch_expand(w, err, sizeof err)) {
            log_error("%s: %s", w->id, err);
            worker_fetch_stop(w, "bad header");
            return;
        }
    }
    if (w->ranges_full && w->s_done == w->s_total) {
        s_fetch_done(w);
        return;
    }
    s_fetch_request(w);
}

int worker_fetch_begin(worker_t *w, const msg_assign *a, char *err, size_t errlen)
{
    if (w->fetching)
        worker_fetch_stop(w, "new assignment");
    if (a->header_bytes == 0 || a->header_bytes > a->model_size) {
        snprintf(err, errlen, "no local copy of %s and no header size to fetch it by",
                 a->model_path);
        return -1;
    }
    if (s_fetch_start(w, a, err, errlen))
        return -1;
    if (w->ranges_full && w->s_done == w->s_total)
        s_fetch_done(w); /* everything was already in the cache */
    else
        s_fetch_request(w);
    return 0;
}

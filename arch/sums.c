/* sums.c — per-layer checksums: from metadata, a cache file, or computed on first use. arch/ */
#include "arch/sums.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/log.h"

#define S_VERSION 1
#define S_BUF (4u << 20)          /* read size while hashing: large sequential reads */

/* What identifies one version of the file: size, mtime and the header's hash. */
typedef struct {
    uint64_t size, mtime_ns, header;
} s_key;

static int s_key_of(const arch_model *am, const char *path, s_key *k, char *err, size_t errlen)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st)) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    k->size = (uint64_t)st.st_size;
    k->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
    /* the header: magic, metadata and tensor table, up to the data section */
    uint64_t len = am->g && am->g->data_offset < k->size ? am->g->data_offset : k->size;
    if (len > (64u << 20))
        len = 64u << 20;
    uint8_t *buf = malloc(len ? len : 1);
    ssize_t n = buf ? pread(fd, buf, len, 0) : -1;
    close(fd);
    if (n < 0 || (uint64_t)n != len) {
        free(buf);
        snprintf(err, errlen, "%s: cannot read its header", path);
        return -1;
    }
    k->header = XXH3_64bits(buf, len);
    free(buf);
    return 0;
}

int sums_compute(const arch_model *am, const char *path, uint64_t *sums, char *err,
                 size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = -1;
    uint8_t *buf = malloc(S_BUF);
    XXH3_state_t *xx = XXH3_createState();
    if (fd < 0 || !buf || !xx) {
        snprintf(err, errlen, "%s: %s", path, fd < 0 ? strerror(errno) : "out of memory");
        goto done;
    }
    for (uint32_t l = 0; l < am->hp.n_layers; l++) {
        const arch_layer *L = &am->layers[l];
        XXH3_64bits_reset(xx);
        for (uint32_t t = 0; t < L->n_tensors; t++)
            for (uint64_t at = 0; at < L->t[t].nbytes;) {
                uint64_t want = L->t[t].nbytes - at < S_BUF ? L->t[t].nbytes - at : S_BUF;
                ssize_t n = pread(fd, buf, want, (off_t)(L->t[t].off + at));
                if (n < 0 && errno == EINTR)
                    continue;
                if (n <= 0) {
                    snprintf(err, errlen, "%s: layer %u, %s at byte %llu: %s", path, l,
                             L->t[t].name, (unsigned long long)(L->t[t].off + at),
                             n < 0 ? strerror(errno) : "end of file");
                    goto done;
                }
                XXH3_64bits_update(xx, buf, (size_t)n);
                at += (uint64_t)n;
            }
        sums[l] = XXH3_64bits_digest(xx);
    }
    rc = 0;
done:
    if (fd >= 0)
        close(fd);
    free(buf);
    XXH3_freeState(xx);
    return rc;
}

int sums_err_is_mismatch(const char *err)
{
    return err && strstr(err, SUMS_MISMATCH) != NULL;
}

uint64_t sums_of_layer(const arch_model *am, uint32_t l, const void *const *data)
{
    XXH3_state_t *xx = XXH3_createState();
    const arch_layer *L = &am->layers[l];
    if (!xx)
        return 0; /* never a layer's hash in practice: the caller reports the mismatch */
    XXH3_64bits_reset(xx);
    for (uint32_t t = 0; t < L->n_tensors; t++)
        XXH3_64bits_update(xx, data[t], L->t[t].nbytes);
    uint64_t h = XXH3_64bits_digest(xx);
    XXH3_freeState(xx);
    return h;
}

/* The cache's two places: beside the model, or the user's cache folder. */
static void s_paths(const char *path, const s_key *k, const char *suffix, char *beside,
                    size_t blen, char *cache, size_t clen)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(beside, blen, "%s%s", path, suffix);
    if (xdg && *xdg)
        snprintf(cache, clen, "%s/swarm/%s-%016llx%s", xdg, base, (unsigned long long)k->header,
                 suffix);
    else if (home && *home)
        snprintf(cache, clen, "%s/.cache/swarm/%s-%016llx%s", home, base,
                 (unsigned long long)k->header, suffix);
    else
        cache[0] = 0;
}

/* 1: file holds sums for key k (filled), 0: absent, -2: stale (why says how), -1: unreadable */
static int s_load(const char *file, const s_key *k, uint32_t n_layers, uint64_t *sums,
                  char *why, size_t wlen)
{
    json_error_t je;
    if (access(file, F_OK))
        return 0;
    json_t *j = json_load_file(file, 0, &je);
    if (!j) {
        snprintf(why, wlen, "%s:%d: %s", file, je.line, je.text);
        return -1;
    }
    int rc = -1;
    json_t *arr = json_object_get(j, "layers");
    const char *hdr = json_string_value(json_object_get(j, "header_xxh3"));
    if (json_integer_value(json_object_get(j, "version")) != S_VERSION || !hdr ||
        !json_is_array(arr)) {
        snprintf(why, wlen, "%s: not a version %d sums file", file, S_VERSION);
        goto done;
    }
    uint64_t size = (uint64_t)json_integer_value(json_object_get(j, "size"));
    uint64_t mt = (uint64_t)json_integer_value(json_object_get(j, "mtime_ns"));
    uint64_t h = strtoull(hdr, NULL, 16);
    if (size != k->size || mt != k->mtime_ns || h != k->header) {
        snprintf(why, wlen, "the model changed since %s was written (%s)", file,
                 size != k->size ? "size" : h != k->header ? "header" : "mtime");
        rc = -2;
        goto done;
    }
    if (json_array_size(arr) != n_layers) {
        snprintf(why, wlen, "%s: %zu layers, the model has %u", file, json_array_size(arr),
                 n_layers);
        rc = -2;
        goto done;
    }
    for (uint32_t l = 0; l < n_layers; l++) {
        const char *s = json_string_value(json_array_get(arr, l));
        char *end = NULL;
        if (!s || strlen(s) != 16 || (sums[l] = strtoull(s, &end, 16), *end)) {
            snprintf(why, wlen, "%s: layers[%u] is not 16 hex digits", file, l);
            goto done;
        }
    }
    rc = 1;
done:
    json_decref(j);
    return rc;
}

/* Write the cache to file (through file.tmp and a rename). 0 / -1 with why. */
static int s_save(const char *file, const s_key *k, uint32_t n_layers, const uint64_t *sums,
                  char *why, size_t wlen)
{
    char tmp[PATH_MAX + 16], hex[17];
    json_t *j = json_object(), *arr = json_array();
    int rc = -1;
    if (!j || !arr)
        goto oom;
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)k->header);
    json_object_set_new(j, "version", json_integer(S_VERSION));
    json_object_set_new(j, "algo",
                        json_string("xxh3-64 of each layer's tensors in consumption order"));
    json_object_set_new(j, "size", json_integer((json_int_t)k->size));
    json_object_set_new(j, "mtime_ns", json_integer((json_int_t)k->mtime_ns));
    json_object_set_new(j, "header_xxh3", json_string(hex));
    for (uint32_t l = 0; l < n_layers; l++) {
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)sums[l]);
        json_array_append_new(arr, json_string(hex));
    }
    json_object_set_new(j, "layers", arr);
    arr = NULL;
    snprintf(tmp, sizeof tmp, "%s.tmp", file);
    if (json_dump_file(j, tmp, JSON_INDENT(1)) || rename(tmp, file)) {
        snprintf(why, wlen, "%s: %s", file, strerror(errno));
        unlink(tmp);
        goto done;
    }
    rc = 0;
    goto done;
oom:
    snprintf(why, wlen, "out of memory");
done:
    json_decref(arr);
    json_decref(j);
    return rc;
}

/* mkdir -p of file's folder (the user cache's). */
static void s_mkdirs(const char *file)
{
    char d[PATH_MAX];
    snprintf(d, sizeof d, "%s", file);
    char *slash = strrchr(d, '/');
    if (!slash)
        return;
    *slash = 0;
    for (char *p = d + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(d, 0755);
            *p = '/';
        }
    mkdir(d, 0755);
}

typedef int (*s_compute_fn)(const arch_model *am, const char *path, uint64_t *sums, char *err,
                            size_t errlen);

/* The n sums of a cache file with this suffix: loaded when valid, else computed and kept. */
static int s_cached(const arch_model *am, const char *path, const char *suffix, uint32_t L,
                    uint64_t *sums, s_compute_fn compute, sums_source *src, char *cache_path,
                    size_t cache_len, char *err, size_t errlen)
{
    char beside[PATH_MAX + 16], cache[PATH_MAX + 16], why[PATH_MAX + 128] = "";
    const char *places[2] = { beside, cache };
    s_key k;
    if (s_key_of(am, path, &k, err, errlen))
        return -1;
    s_paths(path, &k, suffix, beside, sizeof beside, cache, sizeof cache);
    for (int i = 0; i < 2; i++) {
        if (!places[i][0])
            continue;
        int rc = s_load(places[i], &k, L, sums, why, sizeof why);
        if (rc == 1) {
            *src = SUMS_CACHED;
            if (cache_path)
                snprintf(cache_path, cache_len, "%s", places[i]);
            return 0;
        }
        if (rc < 0)
            log_info("%s: per-layer checksums recomputed: %s", path, why);
    }
    log_info("%s: computing %s checksums (%u, one read of the file): no valid cache yet", path,
             compute == sums_compute ? "per-layer" : "per-expert", L);
    if (compute(am, path, sums, err, errlen))
        return -1;
    *src = SUMS_COMPUTED;
    for (int i = 0; i < 2; i++) {
        if (!places[i][0])
            continue;
        if (i == 1)
            s_mkdirs(places[i]);
        if (s_save(places[i], &k, L, sums, why, sizeof why) == 0) {
            if (cache_path)
                snprintf(cache_path, cache_len, "%s", places[i]);
            return 0;
        }
        log_info("per-layer checksums not kept at %s", why);
    }
    log_warn("%s: per-layer checksums could not be cached anywhere: they will be computed "
             "again next time", path);
    return 0;
}

int sums_get(const arch_model *am, const char *path, uint64_t *sums, sums_source *src,
             char *cache_path, size_t cache_len, char *err, size_t errlen)
{
    uint32_t L = am->hp.n_layers;
    const gguf_kv *kv;
    if (cache_path && cache_len)
        cache_path[0] = 0;
    /* the lab's files: swarm.layer_checksums, the same bytes in the same order */
    if (am->g && (kv = gguf_find_kv(am->g, "swarm.layer_checksums")) &&
        kv->type == GGUF_T_ARRAY && kv->arr_type == GGUF_T_UINT64 && kv->arr_n == L &&
        kv->arr_u64) {
        memcpy(sums, kv->arr_u64, L * sizeof *sums);
        *src = SUMS_METADATA;
        return 0;
    }
    return s_cached(am, path, ".swarm-sums", L, sums, sums_compute, src, cache_path, cache_len,
                    err, errlen);
}

/* ---------------------------------------------------------------- per expert */

uint64_t sums_experts_layout(const arch_model *am, uint64_t *base)
{
    uint64_t n = 0;
    for (uint32_t l = 0; l < am->hp.n_layers; l++) {
        const arch_layer *L = &am->layers[l];
        if (base)
            base[l] = n;
        n++;
        for (uint32_t t = 0; t < L->n_tensors; t++)
            n += L->t[t].n_expert;
    }
    if (base)
        base[am->hp.n_layers] = n;
    return n;
}

/* Hash bytes [off, off + len) of fd into xx (reset by the caller). */
static int s_hash_range(int fd, uint8_t *buf, uint64_t off, uint64_t len, XXH3_state_t *xx)
{
    for (uint64_t at = 0; at < len;) {
        uint64_t want = len - at < S_BUF ? len - at : S_BUF;
        ssize_t n = pread(fd, buf, want, (off_t)(off + at));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        XXH3_64bits_update(xx, buf, (size_t)n);
        at += (uint64_t)n;
    }
    return 0;
}

static int s_compute_experts(const arch_model *am, const char *path, uint64_t *sums, char *err,
                             size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = -1;
    uint8_t *buf = malloc(S_BUF);
    XXH3_state_t *xx = XXH3_createState(), *ex = XXH3_createState();
    uint64_t at = 0;
    if (fd < 0 || !buf || !xx || !ex) {
        snprintf(err, errlen, "%s: %s", path, fd < 0 ? strerror(errno) : "out of memory");
        goto done;
    }
    for (uint32_t l = 0; l < am->hp.n_layers; l++) {
        const arch_layer *L = &am->layers[l];
        uint64_t head = at++;
        XXH3_64bits_reset(xx);
        for (uint32_t t = 0; t < L->n_tensors; t++) {
            const arch_tensor *T = &L->t[t];
            if (!T->n_expert) {
                if (s_hash_range(fd, buf, T->off, T->nbytes, xx))
                    goto bad;
                continue;
            }
            uint64_t slice = T->nbytes / T->n_expert;
            for (uint32_t e = 0; e < T->n_expert; e++) {
                XXH3_64bits_reset(ex);
                if (s_hash_range(fd, buf, T->off + e * slice, slice, ex))
                    goto bad;
                sums[at++] = XXH3_64bits_digest(ex);
            }
        }
        sums[head] = XXH3_64bits_digest(xx);
        continue;
bad:
        snprintf(err, errlen, "%s: layer %u: cannot read its tensors: %s", path, l,
                 strerror(errno ? errno : EIO));
        goto done;
    }
    rc = 0;
done:
    if (fd >= 0)
        close(fd);
    free(buf);
    XXH3_freeState(xx);
    XXH3_freeState(ex);
    return rc;
}

int sums_get_experts(const arch_model *am, const char *path, uint64_t *sums, char *err,
                     size_t errlen)
{
    sums_source src;
    uint64_t n = sums_experts_layout(am, NULL);
    if (n > UINT32_MAX) {
        snprintf(err, errlen, "%s: too many experts to checksum", path);
        return -1;
    }
    return s_cached(am, path, ".swarm-esums", (uint32_t)n, sums, s_compute_experts, &src, NULL,
                    0, err, errlen);
}

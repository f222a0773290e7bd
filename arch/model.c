/* model.c — the lab model on GGUF: open/validate, deterministic weights, checksums, streaming gen. arch/ */
#include "arch/model.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "base/log.h"
#include "base/util.h"
#include "quant/quant.h"

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: no allocation, no failure path */
#include <xxhash.h>

#define S_GOLDEN 0x9e3779b97f4a7c15ull

static void s_err(char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void s_err(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    util_verrf(err, errlen, path, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------- weights */

/* splitmix64's output function: a bijective mix, so mix(base + i*golden) is splitmix64's i-th
 * output. Counter-based means any element (or row) can be made without the ones before it. */
static inline uint64_t s_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* out[i] = t_i * scale + bias, t_i an odd integer uniform in (-2^bits, 2^bits) (bits <= 23, so
 * t_i is exact in f32). Two values per 64-bit draw. The products are single roundings with no
 * data-dependent paths, so every compiler and machine produces the same bits. */
static void s_fill_uniform(uint64_t base, float *out, uint64_t n, unsigned bits, float scale,
                           float bias)
{
    const uint32_t mask = (1u << bits) - 1;
    const int32_t half = (int32_t)1 << bits;
    uint64_t pairs = n / 2;
    for (uint64_t j = 0; j < pairs; j++) {
        uint64_t z = s_mix(base + (j + 1) * S_GOLDEN);
        int32_t a = (int32_t)(2 * ((uint32_t)(z >> 40) & mask) + 1) - half;
        int32_t b = (int32_t)(2 * ((uint32_t)(z >> 8) & mask) + 1) - half;
        out[2 * j] = (float)a * scale + bias;
        out[2 * j + 1] = (float)b * scale + bias;
    }
    if (n & 1) {
        uint64_t z = s_mix(base + (pairs + 1) * S_GOLDEN);
        int32_t a = (int32_t)(2 * ((uint32_t)(z >> 40) & mask) + 1) - half;
        out[n - 1] = (float)a * scale + bias;
    }
}

static uint64_t s_stream_base(uint64_t seed, uint32_t layer, uint32_t which)
{
    uint64_t stream = ((uint64_t)layer << 1 | which) + 1; /* which: 0 = g, 1 = W */
    return s_mix(s_mix(seed + S_GOLDEN) ^ stream * 0xd1b54a32d192ed03ull);
}

void model_fill_layer(uint64_t seed, uint32_t layer, uint32_t dim, float *g, float *W)
{
    /* g = 1 + t/2^23, |t| < 2^22 odd: (0.5, 1.5) exclusive, every value exact. */
    s_fill_uniform(s_stream_base(seed, layer, 0), g, dim, 22, 1.0f / 8388608.0f, 1.0f);
    /* W = t * a/2^23, |t| < 2^23 odd: (-a, a) exclusive with a = 1/sqrt(d) as f32. */
    float a = (float)(1.0 / sqrt((double)dim));
    s_fill_uniform(s_stream_base(seed, layer, 1), W, (uint64_t)dim * dim, 23, a / 8388608.0f,
                   0.0f);
}

uint64_t model_layer_checksum(const float *g, const float *W, uint32_t dim)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, g, (size_t)dim * sizeof(float));
    XXH3_64bits_update(&st, W, (size_t)dim * dim * sizeof(float));
    return XXH3_64bits_digest(&st);
}

/* ---------------------------------------------------------------- open */

/* "blk.N.g" / "blk.N.w" -> layer N, kind 'g'/'w'. 0 on match, -1 for any other name. */
static int s_parse_blk(const char *name, uint32_t *layer, char *kind)
{
    if (strncmp(name, "blk.", 4) != 0)
        return -1;
    const char *p = name + 4;
    uint64_t v = 0;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '.'))
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > UINT32_MAX)
            return -1;
    }
    if (p[0] != '.' || (p[1] != 'g' && p[1] != 'w') || p[2] != '\0')
        return -1;
    *layer = (uint32_t)v;
    *kind = p[1];
    return 0;
}

static int s_open(model_t *m, const char *path, int any_w, char *err, size_t errlen)
{
    gguf_file *g = NULL;
    uint8_t *seen = NULL; /* per layer: bit 0 = g found, bit 1 = W found */
    const char *s;
    uint64_t L, d;
    memset(m, 0, sizeof *m);

    if (!(g = gguf_open(path, err, errlen)))
        goto err;
    if (gguf_get_str(g, "general.architecture", &s, err, errlen))
        goto err;
    if (strcmp(s, MODEL_ARCH) != 0) {
        s_err(err, errlen, path, "architecture '%s', want '%s'", s, MODEL_ARCH);
        goto err;
    }
    if (gguf_get_u64(g, "swarm.layer_count", &L, err, errlen) ||
        gguf_get_u64(g, "swarm.dim", &d, err, errlen))
        goto err;
    if (L < 1 || L > MODEL_MAX_LAYERS || d < 1 || d > MODEL_MAX_DIM) {
        s_err(err, errlen, path, "layer_count %llu / dim %llu out of range (1..%d / 1..%d)",
              (unsigned long long)L, (unsigned long long)d, MODEL_MAX_LAYERS, MODEL_MAX_DIM);
        goto err;
    }
    if (gguf_find_kv(g, "swarm.seed") && gguf_get_u64(g, "swarm.seed", &m->seed, err, errlen))
        goto err;
    if (gguf_find_kv(g, "swarm.checksum_algo")) {
        if (gguf_get_str(g, "swarm.checksum_algo", &s, err, errlen))
            goto err;
        if (strcmp(s, "xxh3-64") != 0) {
            s_err(err, errlen, path, "swarm.checksum_algo '%s', want 'xxh3-64'", s);
            goto err;
        }
    }
    const gguf_kv *cs = gguf_find_kv(g, "swarm.layer_checksums");
    if (!cs) {
        s_err(err, errlen, path, "missing key 'swarm.layer_checksums'");
        goto err;
    }
    if (cs->type != GGUF_T_ARRAY || cs->arr_type != GGUF_T_UINT64 || cs->arr_n != L) {
        s_err(err, errlen, path, "swarm.layer_checksums must be an array of %llu u64",
              (unsigned long long)L);
        goto err;
    }

    m->n_layers = (uint32_t)L;
    m->dim = (uint32_t)d;
    m->alignment = g->alignment;
    m->file_size = g->file_size;
    m->layers = calloc(L, sizeof *m->layers);
    seen = calloc(L, 1);
    if (!(m->path = strdup(path)) || !m->layers || !seen) {
        s_err(err, errlen, path, "out of memory");
        goto err;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        uint32_t l;
        char kind;
        if (s_parse_blk(t->name, &l, &kind))
            continue; /* other tensors are allowed; we just do not use them */
        if (l >= L) {
            s_err(err, errlen, path, "tensor '%s' names layer %u, model has %llu layers",
                  t->name, l, (unsigned long long)L);
            goto err;
        }
        uint32_t want_dims = kind == 'g' ? 1 : 2;
        /* W of another type: one that quant/ computes, the same in every layer (the plan
         * prices every layer as the first) */
        int w_ok = t->type == GGML_TYPE_F32 ||
                   (any_w && kind == 'w' && quant_type_get(t->type) &&
                    (m->w_bytes == 0 || t->type == m->w_type));
        if (!w_ok && kind == 'w' && quant_type_get(t->type) && !any_w) {
            s_err(err, errlen, path, "tensor '%s': type %s; only the quantized arm (--arm "
                  "quantized) computes on a quantized W", t->name, quant_type_name(t->type));
            goto err;
        }
        if (!w_ok && kind == 'w' && any_w && quant_type_get(t->type)) {
            s_err(err, errlen, path, "tensor '%s': type %s, earlier layers' W are %s", t->name,
                  quant_type_name(t->type), quant_type_name(m->w_type));
            goto err;
        }
        if (!w_ok || t->n_dims != want_dims || t->dims[0] != d ||
            (want_dims == 2 && t->dims[1] != d)) {
            char want[48], got[96];
            if (kind == 'g')
                snprintf(want, sizeof want, "[%llu]", (unsigned long long)d);
            else
                snprintf(want, sizeof want, "[%llu, %llu]", (unsigned long long)d,
                         (unsigned long long)d);
            int k = snprintf(got, sizeof got, "[");
            for (uint32_t j = 0; j < t->n_dims && k > 0 && (size_t)k < sizeof got; j++)
                k += snprintf(got + k, sizeof got - (size_t)k, "%s%llu", j ? ", " : "",
                              (unsigned long long)t->dims[j]);
            if (k > 0 && (size_t)k < sizeof got)
                snprintf(got + k, sizeof got - (size_t)k, "]");
            s_err(err, errlen, path, "tensor '%s': want %s ne=%s, got type %u ne=%s", t->name,
                  kind == 'g' || !any_w ? "F32" : "F32 or a quant type", want, t->type, got);
            goto err;
        }
        if (kind == 'w') {
            uint64_t nb = 0;
            char why[160];
            if (quant_tensor_bytes((quant_type)t->type, d, d, &nb, why, sizeof why) ||
                nb != t->nbytes) {
                s_err(err, errlen, path, "tensor '%s': %llu bytes, %s %llu x %llu needs %llu%s%s",
                      t->name, (unsigned long long)t->nbytes, quant_type_name(t->type),
                      (unsigned long long)d, (unsigned long long)d, (unsigned long long)nb,
                      nb ? "" : ": ", nb ? "" : why);
                goto err;
            }
            m->w_type = t->type;
            m->w_bytes = nb;
        }
        if (kind == 'g')
            m->layers[l].g_off = t->offset;
        else
            m->layers[l].w_off = t->offset;
        seen[l] |= kind == 'g' ? 1 : 2;
    }
    for (uint32_t l = 0; l < L; l++) {
        if (seen[l] != 3) {
            s_err(err, errlen, path, "missing tensor 'blk.%u.%c'", l, (seen[l] & 1) ? 'w' : 'g');
            goto err;
        }
        m->layers[l].checksum = cs->arr_u64[l];
    }
    free(seen);
    gguf_close(&g);
    return 0;
err:
    free(seen);
    gguf_close(&g);
    model_close(m);
    return -1;
}

int model_open(model_t *m, const char *path, char *err, size_t errlen)
{
    return s_open(m, path, 0, err, errlen);
}

int model_open_quant(model_t *m, const char *path, char *err, size_t errlen)
{
    return s_open(m, path, 1, err, errlen);
}

void model_close(model_t *m)
{
    if (!m)
        return;
    free(m->path);
    free(m->layers);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- gen */

/* fsync the directory holding path, so the rename itself survives a crash. */
static int s_fsync_dir(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int model_gen(const char *path, uint32_t layers, uint32_t dim, uint64_t seed, uint32_t alignment,
              char *err, size_t errlen)
{
    gguf_writer *w = NULL;
    char *tmp = NULL;
    float *g = NULL, *W = NULL;
    uint64_t *sums = NULL;
    uint8_t *enc = NULL;
    int fd = -1, made_tmp = 0, rc = -1;
    char name[32];

    if (layers < 1 || layers > MODEL_MAX_LAYERS || dim < 1 || dim > MODEL_MAX_DIM) {
        s_err(err, errlen, path, "layers %u / dim %u out of range (1..%d / 1..%d)", layers, dim,
              MODEL_MAX_LAYERS, MODEL_MAX_DIM);
        return -1;
    }
    if (alignment == 0 || (alignment & (alignment - 1))) {
        s_err(err, errlen, path, "alignment %u is not a nonzero power of two", alignment);
        return -1;
    }
    size_t tlen = strlen(path) + 5;
    tmp = malloc(tlen);
    g = malloc((size_t)dim * sizeof *g);
    W = malloc((size_t)dim * dim * sizeof *W); /* one layer: 64 MiB at d = 4096 */
    sums = calloc(layers, sizeof *sums);
    enc = malloc((size_t)layers * 8);
    if (!tmp || !g || !W || !sums || !enc) {
        s_err(err, errlen, path, "out of memory for one layer (d=%u)", dim);
        goto err;
    }
    snprintf(tmp, tlen, "%s.tmp", path);

    /* Checksums are only known after the data is made; they go in as zeros and are patched in
     * place at the end (the array has a fixed size), so gen makes each layer once. */
    if (!(w = gguf_writer_new(alignment)) ||
        gguf_writer_kv_str(w, "general.architecture", MODEL_ARCH) ||
        gguf_writer_kv_u32(w, "swarm.layer_count", layers) ||
        gguf_writer_kv_u32(w, "swarm.dim", dim) || gguf_writer_kv_u64(w, "swarm.seed", seed) ||
        gguf_writer_kv_str(w, "swarm.checksum_algo", "xxh3-64") ||
        gguf_writer_kv_arr_u64(w, "swarm.layer_checksums", sums, layers)) {
        s_err(err, errlen, path, "building header failed");
        goto err;
    }
    for (uint32_t l = 0; l < layers; l++) {
        uint64_t dg[1] = { dim }, dw[2] = { dim, dim };
        snprintf(name, sizeof name, "blk.%u.g", l);
        if (gguf_writer_tensor(w, name, GGML_TYPE_F32, 1, dg) < 0)
            goto err_decl;
        snprintf(name, sizeof name, "blk.%u.w", l);
        if (gguf_writer_tensor(w, name, GGML_TYPE_F32, 2, dw) < 0)
            goto err_decl;
    }
    uint64_t cs_off;
    if (gguf_writer_kv_value_offset(w, "swarm.layer_checksums", &cs_off)) {
        s_err(err, errlen, path, "checksum key vanished");
        goto err;
    }

    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        s_err(err, errlen, tmp, "open: %s", strerror(errno));
        goto err;
    }
    made_tmp = 1;
    if (gguf_writer_write_header(w, fd, err, errlen))
        goto err;
    for (uint32_t l = 0; l < layers; l++) {
        model_fill_layer(seed, l, dim, g, W);
        sums[l] = model_layer_checksum(g, W, dim);
        if (gguf_writer_write_data(w, fd, (int)(2 * l), g, (uint64_t)dim * 4, err, errlen) ||
            gguf_writer_write_data(w, fd, (int)(2 * l + 1), W, (uint64_t)dim * dim * 4, err,
                                   errlen))
            goto err;
    }
    for (uint32_t l = 0; l < layers; l++)
        for (int b = 0; b < 8; b++)
            enc[(size_t)l * 8 + (size_t)b] = (uint8_t)(sums[l] >> (8 * b));
    size_t left = (size_t)layers * 8, done = 0;
    while (left) {
        ssize_t n = pwrite(fd, enc + done, left, (off_t)(cs_off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            s_err(err, errlen, tmp, "write checksums: %s", n < 0 ? strerror(errno) : "short");
            goto err;
        }
        done += (size_t)n;
        left -= (size_t)n;
    }
    /* fsync before rename: otherwise a crash can leave the new name pointing at a short file. */
    if (fsync(fd) || close(fd)) {
        fd = -1;
        s_err(err, errlen, tmp, "fsync/close: %s", strerror(errno));
        goto err;
    }
    fd = -1;
    if (rename(tmp, path)) {
        s_err(err, errlen, path, "rename from %s: %s", tmp, strerror(errno));
        goto err;
    }
    (void)s_fsync_dir(path); /* best effort: the file is complete either way */
    rc = 0;
    goto out;
err_decl:
    s_err(err, errlen, path, "declaring tensor '%s' failed", name);
err:
    if (fd >= 0)
        close(fd);
    if (made_tmp)
        unlink(tmp);
out:
    gguf_writer_free(&w);
    free(tmp);
    free(g);
    free(W);
    free(sums);
    free(enc);
    return rc;
}


int model_check_source(const model_source *src, char *err, size_t errlen)
{
    struct stat st;
    char hint[96] = "";
    if (stat(src->path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "%s (%s) is a folder, not a model file", src->path,
                     src->named_by);
            return -1;
        }
        return 0;
    }
    if (errno != ENOENT) { /* ENOTDIR, EACCES, ELOOP: nothing to generate into either */
        snprintf(err, errlen, "%s (%s): %s", src->path, src->named_by, strerror(errno));
        return -1;
    }
    if (src->generate)
        return 1;
    if (!strcmp(src->path, MODEL_LAB_PATH)) /* `make lab` generates it, via configs/lab02.ini */
        snprintf(hint, sizeof hint, "`make lab` generates the lab's model there, or ");
    snprintf(err, errlen, "%s: no such model file (%s); %screate it with `swarm gen --layers %u "
             "--dim %u --seed %llu -o %s`%s%s%s", src->path, src->named_by, hint, src->layers,
             src->dim, (unsigned long long)src->seed, src->path, src->gen_hint[0] ? ", or " : "",
             src->gen_hint, src->gen_hint[0] ? " to have it generated" : "");
    return -1;
}

int model_open_source(model_t *m, const model_source *src, char *err, size_t errlen)
{
    int rc = model_check_source(src, err, errlen);
    if (rc < 0)
        return -1;
    if (rc == 1) {
        log_info("%s is missing: generating %u layers x %u (seed %llu), as %s asks "
                 "([model] generate = 1)", src->path, src->layers, src->dim,
                 (unsigned long long)src->seed, src->named_by);
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", src->path);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir)
            *slash = 0;
        if (slash && slash != dir && util_mkdir_p(dir)) {
            snprintf(err, errlen, "%s: cannot create its folder: %s", src->path,
                     strerror(errno));
            return -1;
        }
        if (model_gen(src->path, src->layers, src->dim, src->seed, 4096, err, errlen))
            return -1;
    }
    return model_open(m, src->path, err, errlen);
}

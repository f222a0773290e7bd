/* gguf.c — GGUF v3 container: the validating header reader (pread, never mmap) and shared helpers. gguf/ */
#include "gguf/gguf.h"
#include "gguf/gguf_int.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tensor data is read and written as host bytes; GGUF is little-endian, so we are too. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "swarm's GGUF code assumes a little-endian host"
#endif

/* Smallest possible encodings, used to bound counts against the bytes left before allocating:
 * a kv is key length (8) + one key byte + value type (4) + one value byte; a tensor info is name
 * length (8) + one name byte + n_dims (4) + one dim (8) + type (4) + offset (8). */
#define S_KV_MIN 14u
#define S_TI_MIN 33u
#define S_RD_BUF (64u << 10) /* header read buffer: a 1.5 GiB model's header is a few KiB */

/* ---------------------------------------------------------------- helpers */

int gguf_checked_add(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

static int s_mul(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

int gguf_is_pow2(uint64_t x)
{
    return x != 0 && (x & (x - 1)) == 0;
}

void gguf_err(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    util_verrf(err, errlen, path ? path : "gguf", fmt, ap);
    va_end(ap);
}

/* ggml block geometry: elements per block and bytes per block (ggml.c type_traits). Gaps are
 * types removed from GGUF files (4, 5, 31-33, 36-38); they and anything newer are rejected. */
typedef struct {
    uint32_t blck;
    uint32_t size;
    const char *name;
} s_ggml_type;

static const s_ggml_type s_types[] = {
    [0] = { 1, 4, "F32" },        [1] = { 1, 2, "F16" },          [2] = { 32, 18, "Q4_0" },
    [3] = { 32, 20, "Q4_1" },     [6] = { 32, 22, "Q5_0" },       [7] = { 32, 24, "Q5_1" },
    [8] = { 32, 34, "Q8_0" },     [9] = { 32, 36, "Q8_1" },       [10] = { 256, 84, "Q2_K" },
    [11] = { 256, 110, "Q3_K" },  [12] = { 256, 144, "Q4_K" },    [13] = { 256, 176, "Q5_K" },
    [14] = { 256, 210, "Q6_K" },  [15] = { 256, 292, "Q8_K" },    [16] = { 256, 66, "IQ2_XXS" },
    [17] = { 256, 74, "IQ2_XS" }, [18] = { 256, 98, "IQ3_XXS" },  [19] = { 256, 50, "IQ1_S" },
    [20] = { 32, 18, "IQ4_NL" },  [21] = { 256, 110, "IQ3_S" },   [22] = { 256, 82, "IQ2_S" },
    [23] = { 256, 136, "IQ4_XS" },[24] = { 1, 1, "I8" },          [25] = { 1, 2, "I16" },
    [26] = { 1, 4, "I32" },       [27] = { 1, 8, "I64" },         [28] = { 1, 8, "F64" },
    [29] = { 256, 56, "IQ1_M" },  [30] = { 1, 2, "BF16" },        [34] = { 256, 54, "TQ1_0" },
    [35] = { 256, 66, "TQ2_0" },  [39] = { 32, 17, "MXFP4" },
};

static const s_ggml_type *s_type(uint32_t t)
{
    if (t >= sizeof s_types / sizeof s_types[0] || s_types[t].blck == 0)
        return NULL;
    return &s_types[t];
}

/* Bytes of a tensor; -1 with a reason on unknown type, bad shape or overflow. */
int gguf_tensor_nbytes(uint32_t type, uint32_t n_dims, const uint64_t *dims, uint64_t *out,
                           const char **why)
{
    const s_ggml_type *tt = s_type(type);
    if (!tt) {
        *why = "unknown ggml type";
        return -1;
    }
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
        *why = "n_dims out of range 1..4";
        return -1;
    }
    uint64_t n = 1;
    for (uint32_t i = 0; i < n_dims; i++) {
        /* ggml keeps ne[] as int64_t, so anything above INT64_MAX cannot be a real tensor. */
        if (dims[i] == 0 || dims[i] > (uint64_t)INT64_MAX) {
            *why = "dimension is zero or above INT64_MAX";
            return -1;
        }
        if (s_mul(n, dims[i], &n) || n > (uint64_t)INT64_MAX) {
            *why = "element count overflows";
            return -1;
        }
    }
    if (dims[0] % tt->blck) {
        *why = "ne[0] is not a multiple of the type's block size";
        return -1;
    }
    if (s_mul(n / tt->blck, tt->size, out) || *out > (uint64_t)INT64_MAX) {
        *why = "byte size overflows";
        return -1;
    }
    return 0;
}

static const char *s_vtype_name(uint32_t t)
{
    static const char *names[] = { "u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                   "bool", "string", "array", "u64", "i64", "f64" };
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

/* Encoded size of a scalar value type, 0 for string/array/unknown. */
static uint32_t s_scalar_size(uint32_t t)
{
    switch (t) {
    case GGUF_T_UINT8: case GGUF_T_INT8: case GGUF_T_BOOL: return 1;
    case GGUF_T_UINT16: case GGUF_T_INT16: return 2;
    case GGUF_T_UINT32: case GGUF_T_INT32: case GGUF_T_FLOAT32: return 4;
    case GGUF_T_UINT64: case GGUF_T_INT64: case GGUF_T_FLOAT64: return 8;
    default: return 0;
    }
}

static int s_is_int_type(uint32_t t)
{
    return t <= GGUF_T_INT32 || t == GGUF_T_BOOL || t == GGUF_T_UINT64 || t == GGUF_T_INT64;
}

static uint64_t s_le(const uint8_t *p, uint32_t n)
{
    uint64_t v = 0;
    for (uint32_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* ---------------------------------------------------------------- reader */

typedef struct {
    int fd;
    const char *path;
    uint64_t size;       /* file size, bytes */
    uint64_t pos;        /* next byte to parse */
    uint8_t *buf;        /* S_RD_BUF bytes of the file starting at boff */
    uint64_t boff;
    size_t blen;
    char what[96];       /* where we are, for messages: "tensor info 3" */
    char *err;
    size_t errlen;
} s_reader;

/* Fail unless n more bytes exist in the file and within the header limit. */
static int s_need(s_reader *r, uint64_t n)
{
    if (n > r->size - r->pos) {
        gguf_err(r->err, r->errlen, r->path,
              "truncated in %s (need %llu bytes at offset %llu, file has %llu)", r->what,
              (unsigned long long)n, (unsigned long long)r->pos, (unsigned long long)r->size);
        return -1;
    }
    if (r->pos + n > GGUF_MAX_HEADER) {
        gguf_err(r->err, r->errlen, r->path, "header exceeds %u bytes in %s (offset %llu)",
              GGUF_MAX_HEADER, r->what, (unsigned long long)r->pos);
        return -1;
    }
    return 0;
}

static int s_fill(s_reader *r)
{
    uint64_t left = r->size - r->pos;
    size_t want = left < S_RD_BUF ? (size_t)left : S_RD_BUF;
    size_t got = 0;
    while (got < want) {
        ssize_t n = pread(r->fd, r->buf + got, want - got, (off_t)(r->pos + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            gguf_err(r->err, r->errlen, r->path, "read failed at offset %llu: %s",
                  (unsigned long long)(r->pos + got), n < 0 ? strerror(errno) : "file shrank");
            return -1;
        }
        got += (size_t)n;
    }
    r->boff = r->pos;
    r->blen = got;
    return 0;
}

static int s_read(s_reader *r, void *dst, uint64_t n)
{
    if (s_need(r, n))
        return -1;
    uint8_t *d = dst;
    while (n) {
        if (r->pos < r->boff || r->pos >= r->boff + r->blen) {
            if (s_fill(r))
                return -1;
        }
        size_t at = (size_t)(r->pos - r->boff);
        size_t k = r->blen - at;
        if (k > n)
            k = (size_t)n;
        if (d) {
            memcpy(d, r->buf + at, k);
            d += k;
        }
        r->pos += k;
        n -= k;
    }
    return 0;
}

static int s_skip(s_reader *r, uint64_t n)
{
    if (s_need(r, n))
        return -1;
    r->pos += n; /* the buffer check in s_read refills when we land outside it */
    return 0;
}

static int s_read_u32(s_reader *r, uint32_t *v)
{
    uint8_t b[4];
    if (s_read(r, b, 4))
        return -1;
    *v = (uint32_t)s_le(b, 4);
    return 0;
}

static int s_read_u64(s_reader *r, uint64_t *v)
{
    uint8_t b[8];
    if (s_read(r, b, 8))
        return -1;
    *v = s_le(b, 8);
    return 0;
}

/* gguf_string: u64 length + bytes. out NULL skips it (array elements). */
static int s_read_str(s_reader *r, char **out)
{
    uint64_t len;
    if (s_read_u64(r, &len))
        return -1;
    if (len > GGUF_MAX_STRLEN) {
        gguf_err(r->err, r->errlen, r->path, "string length %llu in %s exceeds limit %u",
              (unsigned long long)len, r->what, GGUF_MAX_STRLEN);
        return -1;
    }
    if (!out)
        return s_skip(r, len);
    if (s_need(r, len)) /* before malloc: a lying length must not allocate */
        return -1;
    char *s = malloc((size_t)len + 1);
    if (!s) {
        gguf_err(r->err, r->errlen, r->path, "out of memory");
        return -1;
    }
    if (s_read(r, s, len)) {
        free(s);
        return -1;
    }
    s[len] = '\0';
    if (memchr(s, '\0', (size_t)len)) {
        gguf_err(r->err, r->errlen, r->path, "string in %s contains a NUL byte", r->what);
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

static void s_set_scalar(gguf_kv *kv, uint32_t t, uint64_t raw)
{
    switch (t) {
    case GGUF_T_INT8: kv->i64 = (int8_t)raw; break;
    case GGUF_T_INT16: kv->i64 = (int16_t)raw; break;
    case GGUF_T_INT32: kv->i64 = (int32_t)raw; break;
    case GGUF_T_INT64: kv->i64 = (int64_t)raw; break;
    case GGUF_T_BOOL: kv->i64 = raw != 0; break;
    case GGUF_T_FLOAT32: {
        uint32_t b = (uint32_t)raw;
        float f;
        memcpy(&f, &b, 4);
        kv->f64 = f;
        return;
    }
    case GGUF_T_FLOAT64: memcpy(&kv->f64, &raw, 8); return;
    default: kv->i64 = (int64_t)raw; break; /* unsigned: u64 below keeps the exact value */
    }
    kv->u64 = (t == GGUF_T_UINT8 || t == GGUF_T_UINT16 || t == GGUF_T_UINT32 || t == GGUF_T_UINT64)
                  ? raw : (uint64_t)kv->i64;
    kv->f64 = (double)kv->i64;
    if (t == GGUF_T_UINT64)
        kv->f64 = (double)raw;
}

/* An array of n strings into one blob: a first pass reads only the lengths (each bounded, the
 * sum bounded by the bytes left), then one allocation and a second pass copies the bytes. A
 * 128k-entry vocabulary would otherwise be 128k mallocs. */
static int s_read_str_array(s_reader *r, gguf_kv *kv, uint64_t n)
{
    uint64_t start = r->pos, total = 0, len;
    for (uint64_t i = 0; i < n; i++) {
        if (s_read_u64(r, &len))
            return -1;
        if (len > GGUF_MAX_STRLEN) {
            gguf_err(r->err, r->errlen, r->path, "%s: string %llu has length %llu (limit %u)",
                     r->what, (unsigned long long)i, (unsigned long long)len, GGUF_MAX_STRLEN);
            return -1;
        }
        if (s_skip(r, len))
            return -1;
        total += len + 1; /* cannot overflow: every len is below the bytes left in the file */
    }
    kv->arr_str = malloc(n ? (size_t)n * sizeof(char *) : 1);
    kv->arr_blob = malloc(total ? (size_t)total : 1);
    if (!kv->arr_str || !kv->arr_blob) {
        gguf_err(r->err, r->errlen, r->path, "%s: out of memory for %llu strings", r->what,
                 (unsigned long long)n);
        return -1;
    }
    r->pos = start;
    char *p = kv->arr_blob;
    for (uint64_t i = 0; i < n; i++) {
        if (s_read_u64(r, &len) || s_read(r, p, len))
            return -1;
        p[len] = '\0';
        if (memchr(p, '\0', (size_t)len)) {
            gguf_err(r->err, r->errlen, r->path, "%s: string %llu contains a NUL byte", r->what,
                     (unsigned long long)i);
            return -1;
        }
        kv->arr_str[i] = p;
        p += len + 1;
    }
    return 0;
}

static int s_read_array(s_reader *r, gguf_kv *kv)
{
    uint32_t et;
    uint64_t n, need;
    if (s_read_u32(r, &et) || s_read_u64(r, &n))
        return -1;
    if (et == GGUF_T_ARRAY) {
        gguf_err(r->err, r->errlen, r->path, "%s: nested arrays are not supported", r->what);
        return -1;
    }
    uint32_t esz = et == GGUF_T_STRING ? 8u : s_scalar_size(et);
    if (esz == 0) {
        gguf_err(r->err, r->errlen, r->path, "%s: unknown array element type %u", r->what, et);
        return -1;
    }
    if (n > GGUF_MAX_ARRAY) {
        gguf_err(r->err, r->errlen, r->path, "%s: array count %llu exceeds limit %u", r->what,
              (unsigned long long)n, GGUF_MAX_ARRAY);
        return -1;
    }
    if (s_mul(n, esz, &need) || s_need(r, need)) { /* before allocating the widened copy */
        if (r->err && !r->err[0])
            gguf_err(r->err, r->errlen, r->path, "%s: array size overflows", r->what);
        return -1;
    }
    kv->arr_type = et;
    kv->arr_n = n;
    if (et == GGUF_T_STRING)
        return s_read_str_array(r, kv, n);
    if (et == GGUF_T_FLOAT32 || et == GGUF_T_FLOAT64) {
        /* Widened to double (exact for both): a 152k-entry vocabulary's scores are 1.2 MB. */
        kv->arr_f64 = malloc(n ? (size_t)n * sizeof(double) : 1);
        if (!kv->arr_f64) {
            gguf_err(r->err, r->errlen, r->path, "out of memory for array of %llu", (unsigned long long)n);
            return -1;
        }
        for (uint64_t i = 0; i < n; i++) {
            uint8_t b[8];
            if (s_read(r, b, esz))
                return -1;
            gguf_kv tmp = { 0 };
            s_set_scalar(&tmp, et, s_le(b, esz));
            kv->arr_f64[i] = tmp.f64;
        }
        return 0;
    }
    kv->arr_u64 = malloc(n ? (size_t)n * sizeof(uint64_t) : 1);
    if (!kv->arr_u64) {
        gguf_err(r->err, r->errlen, r->path, "out of memory for array of %llu", (unsigned long long)n);
        return -1;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint8_t b[8];
        if (s_read(r, b, esz))
            return -1;
        gguf_kv tmp = { 0 };
        s_set_scalar(&tmp, et, s_le(b, esz));
        kv->arr_u64[i] = tmp.u64;
    }
    return 0;
}

static int s_read_value(s_reader *r, gguf_kv *kv)
{
    if (kv->type == GGUF_T_STRING)
        return s_read_str(r, &kv->str);
    if (kv->type == GGUF_T_ARRAY)
        return s_read_array(r, kv);
    uint32_t sz = s_scalar_size(kv->type);
    if (sz == 0) {
        gguf_err(r->err, r->errlen, r->path, "%s: unknown value type %u", r->what, kv->type);
        return -1;
    }
    uint8_t b[8];
    if (s_read(r, b, sz))
        return -1;
    s_set_scalar(kv, kv->type, s_le(b, sz));
    return 0;
}

static int s_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int s_cmp_off(const void *a, const void *b)
{
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Reject duplicate names among n strings (sorted copy of the pointers). */
static int s_check_dups(char **names, uint64_t n, const char *kind, const char *path, char *err,
                        size_t errlen)
{
    if (n < 2)
        return 0;
    char **v = malloc((size_t)n * sizeof *v);
    if (!v) {
        gguf_err(err, errlen, path, "out of memory");
        return -1;
    }
    memcpy(v, names, (size_t)n * sizeof *v);
    qsort(v, (size_t)n, sizeof *v, s_cmp_str);
    int rc = 0;
    for (uint64_t i = 1; i < n; i++) {
        if (strcmp(v[i - 1], v[i]) == 0) {
            gguf_err(err, errlen, path, "duplicate %s '%s'", kind, v[i]);
            rc = -1;
            break;
        }
    }
    free(v);
    return rc;
}

static int s_check_layout(gguf_file *g, char *err, size_t errlen)
{
    int rc = -1;
    gguf_tensor **v = NULL;
    char **names = NULL;
    if (g->n_tensors == 0)
        return 0;
    v = malloc((size_t)g->n_tensors * sizeof *v);
    names = malloc((size_t)g->n_tensors * sizeof *names);
    if (!v || !names) {
        gguf_err(err, errlen, g->path, "out of memory");
        goto err;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        v[i] = &g->tensors[i];
        names[i] = g->tensors[i].name;
    }
    if (s_check_dups(names, g->n_tensors, "tensor name", g->path, err, errlen))
        goto err;
    qsort(v, (size_t)g->n_tensors, sizeof *v, s_cmp_off);
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        /* extents are already known to fit in the file, so offset + nbytes cannot overflow */
        if (v[i - 1]->offset + v[i - 1]->nbytes > v[i]->offset) {
            gguf_err(err, errlen, g->path,
                  "tensors '%s' (offset %llu, %llu bytes) and '%s' (offset %llu) overlap",
                  v[i - 1]->name, (unsigned long long)v[i - 1]->offset,
                  (unsigned long long)v[i - 1]->nbytes, v[i]->name,
                  (unsigned long long)v[i]->offset);
            goto err;
        }
    }
    rc = 0;
err:
    free(v);
    free(names);
    return rc;
}

gguf_file *gguf_open(const char *path, char *err, size_t errlen)
{
    s_reader r = { .fd = -1, .path = path, .err = err, .errlen = errlen };
    gguf_file *g = NULL;
    struct stat st;
    uint32_t magic;
    if (err && errlen)
        err[0] = '\0';

    r.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r.fd < 0) {
        gguf_err(err, errlen, path, "open: %s", strerror(errno));
        goto err;
    }
    if (fstat(r.fd, &st) || !S_ISREG(st.st_mode)) {
        gguf_err(err, errlen, path, "not a regular file");
        goto err;
    }
    r.size = (uint64_t)st.st_size;
    r.buf = malloc(S_RD_BUF);
    g = calloc(1, sizeof *g);
    if (!r.buf || !g || !(g->path = strdup(path))) {
        gguf_err(err, errlen, path, "out of memory");
        goto err;
    }
    g->file_size = r.size;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;

    snprintf(r.what, sizeof r.what, "header");
    if (s_read_u32(&r, &magic))
        goto err;
    if (magic != GGUF_MAGIC) {
        gguf_err(err, errlen, path, "not a GGUF file (magic 0x%08x, want 0x%08x \"GGUF\")", magic,
              GGUF_MAGIC);
        goto err;
    }
    if (s_read_u32(&r, &g->version))
        goto err;
    if (g->version < GGUF_VERSION_MIN || g->version > GGUF_VERSION) {
        if (__builtin_bswap32(g->version) == 2 || __builtin_bswap32(g->version) == 3)
            gguf_err(err, errlen, path, "big-endian GGUF is not supported");
        else
            gguf_err(err, errlen, path, "unsupported GGUF version %u (this reader handles %d..%d)",
                  g->version, GGUF_VERSION_MIN, GGUF_VERSION);
        goto err;
    }
    uint64_t n_tensors, n_kv, t1, t2, min_bytes = UINT64_MAX; /* stays MAX on overflow */
    if (s_read_u64(&r, &n_tensors) || s_read_u64(&r, &n_kv))
        goto err;
    if (n_tensors > GGUF_MAX_TENSORS || n_kv > GGUF_MAX_KV) {
        gguf_err(err, errlen, path, "header claims %llu tensors and %llu kv pairs (limits %u, %u)",
              (unsigned long long)n_tensors, (unsigned long long)n_kv, GGUF_MAX_TENSORS,
              GGUF_MAX_KV);
        goto err;
    }
    /* Every entry takes at least its minimal encoding: check before allocating the arrays. */
    if (s_mul(n_kv, S_KV_MIN, &t1) || s_mul(n_tensors, S_TI_MIN, &t2) ||
        gguf_checked_add(t1, t2, &min_bytes) || min_bytes > r.size - r.pos) {
        gguf_err(err, errlen, path,
              "header claims %llu tensors and %llu kv pairs: needs at least %llu bytes, file has "
              "%llu after the header",
              (unsigned long long)n_tensors, (unsigned long long)n_kv,
              (unsigned long long)min_bytes, (unsigned long long)(r.size - r.pos));
        goto err;
    }
    g->kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) {
        gguf_err(err, errlen, path, "out of memory");
        goto err;
    }

    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        snprintf(r.what, sizeof r.what, "kv %llu key", (unsigned long long)i);
        if (s_read_str(&r, &kv->key))
            goto err;
        g->n_kv = i + 1; /* from here gguf_close frees this entry */
        if (kv->key[0] == '\0') {
            gguf_err(err, errlen, path, "kv %llu has an empty key", (unsigned long long)i);
            goto err;
        }
        snprintf(r.what, sizeof r.what, "kv %llu '%.48s'", (unsigned long long)i, kv->key);
        if (s_read_u32(&r, &kv->type) || s_read_value(&r, kv))
            goto err;
    }
    {
        char **keys = malloc((n_kv ? (size_t)n_kv : 1) * sizeof *keys);
        if (!keys) {
            gguf_err(err, errlen, path, "out of memory");
            goto err;
        }
        for (uint64_t i = 0; i < n_kv; i++)
            keys[i] = g->kv[i].key;
        int dup = s_check_dups(keys, n_kv, "key", path, err, errlen);
        free(keys);
        if (dup)
            goto err;
    }
    const gguf_kv *al = gguf_find_kv(g, "general.alignment");
    if (al) {
        if (al->type != GGUF_T_UINT32) {
            gguf_err(err, errlen, path, "general.alignment has type %s, want u32",
                  s_vtype_name(al->type));
            goto err;
        }
        if (!gguf_is_pow2(al->u64)) {
            gguf_err(err, errlen, path, "general.alignment %llu is not a nonzero power of two",
                  (unsigned long long)al->u64);
            goto err;
        }
        g->alignment = (uint32_t)al->u64;
    }

    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        uint64_t rel;
        const char *why = NULL;
        snprintf(r.what, sizeof r.what, "tensor info %llu", (unsigned long long)i);
        if (s_read_str(&r, &t->name))
            goto err;
        g->n_tensors = i + 1;
        if (t->name[0] == '\0') {
            gguf_err(err, errlen, path, "tensor %llu has an empty name", (unsigned long long)i);
            goto err;
        }
        snprintf(r.what, sizeof r.what, "tensor info %llu '%.48s'", (unsigned long long)i,
                 t->name);
        if (s_read_u32(&r, &t->n_dims))
            goto err;
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
            gguf_err(err, errlen, path, "tensor %llu '%s': n_dims %u out of range 1..%d",
                  (unsigned long long)i, t->name, t->n_dims, GGUF_MAX_DIMS);
            goto err;
        }
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (s_read_u64(&r, &t->dims[d]))
                goto err;
        if (s_read_u32(&r, &t->type) || s_read_u64(&r, &rel))
            goto err;
        if (gguf_tensor_nbytes(t->type, t->n_dims, t->dims, &t->nbytes, &why)) {
            gguf_err(err, errlen, path, "tensor %llu '%s' (type %u): %s", (unsigned long long)i,
                  t->name, t->type, why);
            goto err;
        }
        if (rel % g->alignment) {
            gguf_err(err, errlen, path, "tensor %llu '%s': offset %llu is not a multiple of the "
                  "alignment %u", (unsigned long long)i, t->name, (unsigned long long)rel,
                  g->alignment);
            goto err;
        }
        t->offset = rel; /* made absolute once the data section start is known */
    }

    /* The data section starts at the end of the tensor infos rounded up to the alignment. */
    if (gguf_checked_add(r.pos, g->alignment - 1, &g->data_offset)) {
        gguf_err(err, errlen, path, "data offset overflows");
        goto err;
    }
    g->data_offset &= ~(uint64_t)(g->alignment - 1);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        uint64_t rel = t->offset, end;
        if (gguf_checked_add(g->data_offset, rel, &t->offset) || gguf_checked_add(t->offset, t->nbytes, &end) ||
            end > r.size) {
            gguf_err(err, errlen, path,
                  "tensor %llu '%s' extends past end of file (offset %llu + %llu, size %llu, "
                  "file %llu)", (unsigned long long)i, t->name,
                  (unsigned long long)g->data_offset, (unsigned long long)rel,
                  (unsigned long long)t->nbytes, (unsigned long long)r.size);
            goto err;
        }
    }
    if (s_check_layout(g, err, errlen))
        goto err;

    free(r.buf);
    close(r.fd);
    return g;
err:
    if (err && errlen && !err[0])
        gguf_err(err, errlen, path, "invalid GGUF file");
    free(r.buf);
    if (r.fd >= 0)
        close(r.fd);
    gguf_close(&g);
    return NULL;
}

void gguf_close(gguf_file **gp)
{
    if (!gp || !*gp)
        return;
    gguf_file *g = *gp;
    if (g->kv) {
        for (uint64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            free(g->kv[i].str);
            free(g->kv[i].arr_u64);
            free(g->kv[i].arr_f64);
            free(g->kv[i].arr_str);
            free(g->kv[i].arr_blob);
        }
    }
    if (g->tensors)
        for (uint64_t i = 0; i < g->n_tensors; i++)
            free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->path);
    free(g);
    *gp = NULL;
}

const gguf_kv *gguf_find_kv(const gguf_file *g, const char *key)
{
    for (uint64_t i = 0; g && i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0)
            return &g->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name)
{
    for (uint64_t i = 0; g && i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0)
            return &g->tensors[i];
    return NULL;
}

int gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out, char *err, size_t errlen)
{
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv) {
        gguf_err(err, errlen, g ? g->path : NULL, "missing key '%s'", key);
        return -1;
    }
    switch (kv->type) {
    case GGUF_T_UINT8: case GGUF_T_UINT16: case GGUF_T_UINT32: case GGUF_T_UINT64:
        *out = kv->u64;
        return 0;
    case GGUF_T_INT8: case GGUF_T_INT16: case GGUF_T_INT32: case GGUF_T_INT64:
        if (kv->i64 >= 0) {
            *out = (uint64_t)kv->i64;
            return 0;
        }
        gguf_err(err, errlen, g->path, "key '%s' is negative (%lld)", key, (long long)kv->i64);
        return -1;
    default:
        gguf_err(err, errlen, g->path, "key '%s' has type %s, want an unsigned integer", key,
              s_vtype_name(kv->type));
        return -1;
    }
}

int gguf_get_str(const gguf_file *g, const char *key, const char **out, char *err, size_t errlen)
{
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv) {
        gguf_err(err, errlen, g ? g->path : NULL, "missing key '%s'", key);
        return -1;
    }
    if (kv->type != GGUF_T_STRING) {
        gguf_err(err, errlen, g->path, "key '%s' has type %s, want string", key,
              s_vtype_name(kv->type));
        return -1;
    }
    *out = kv->str;
    return 0;
}

/* The kv for key, or NULL with "missing key" in err. */
static const gguf_kv *s_need_kv(const gguf_file *g, const char *key, char *err, size_t errlen)
{
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv)
        gguf_err(err, errlen, g ? g->path : NULL, "missing key '%s'", key);
    return kv;
}

int gguf_get_i64(const gguf_file *g, const char *key, int64_t *out, char *err, size_t errlen)
{
    const gguf_kv *kv = s_need_kv(g, key, err, errlen);
    if (!kv)
        return -1;
    if (!s_is_int_type(kv->type)) {
        gguf_err(err, errlen, g->path, "key '%s' has type %s, want an integer", key,
                 s_vtype_name(kv->type));
        return -1;
    }
    if (kv->type == GGUF_T_UINT64 && kv->u64 > (uint64_t)INT64_MAX) {
        gguf_err(err, errlen, g->path, "key '%s' = %llu does not fit i64", key,
                 (unsigned long long)kv->u64);
        return -1;
    }
    *out = kv->type == GGUF_T_UINT64 ? (int64_t)kv->u64 : kv->i64;
    return 0;
}

int gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out, char *err, size_t errlen)
{
    int64_t v;
    if (gguf_get_i64(g, key, &v, err, errlen))
        return -1;
    if (v < 0 || v > (int64_t)UINT32_MAX) {
        gguf_err(err, errlen, g->path, "key '%s' = %lld is outside 0..%u", key, (long long)v,
                 UINT32_MAX);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

int gguf_get_f32(const gguf_file *g, const char *key, float *out, char *err, size_t errlen)
{
    const gguf_kv *kv = s_need_kv(g, key, err, errlen);
    if (!kv)
        return -1;
    if (kv->type != GGUF_T_FLOAT32 && kv->type != GGUF_T_FLOAT64) {
        gguf_err(err, errlen, g->path, "key '%s' has type %s, want f32", key,
                 s_vtype_name(kv->type));
        return -1;
    }
    if (kv->f64 > 3.4028234663852886e38 || kv->f64 < -3.4028234663852886e38) {
        gguf_err(err, errlen, g->path, "key '%s' = %g is outside float's range", key, kv->f64);
        return -1;
    }
    *out = (float)kv->f64;
    return 0;
}

int gguf_get_bool(const gguf_file *g, const char *key, int *out, char *err, size_t errlen)
{
    const gguf_kv *kv = s_need_kv(g, key, err, errlen);
    if (!kv)
        return -1;
    if (kv->type != GGUF_T_BOOL) {
        gguf_err(err, errlen, g->path, "key '%s' has type %s, want bool", key,
                 s_vtype_name(kv->type));
        return -1;
    }
    *out = kv->i64 != 0;
    return 0;
}

int gguf_get_arr(const gguf_file *g, const char *key, uint32_t want, const gguf_kv **out,
                 uint64_t *n, char *err, size_t errlen)
{
    const gguf_kv *kv = s_need_kv(g, key, err, errlen);
    if (!kv)
        return -1;
    int ok = kv->type == GGUF_T_ARRAY &&
             ((want == GGUF_T_STRING && kv->arr_str) || (want == GGUF_T_FLOAT32 && kv->arr_f64) ||
              (want == GGUF_T_INT32 && kv->arr_u64));
    if (!ok) {
        gguf_err(err, errlen, g->path, "key '%s' is %s%s%s, want an array of %s", key,
                 kv->type == GGUF_T_ARRAY ? "an array of " : "a ",
                 s_vtype_name(kv->type == GGUF_T_ARRAY ? kv->arr_type : kv->type),
                 kv->type == GGUF_T_ARRAY ? "" : " value",
                 want == GGUF_T_STRING ? "strings" : want == GGUF_T_FLOAT32 ? "floats" : "integers");
        return -1;
    }
    *out = kv;
    *n = kv->arr_n;
    return 0;
}

const char *gguf_arr_str(const gguf_kv *kv, uint64_t i)
{
    return kv && kv->arr_str && i < kv->arr_n ? kv->arr_str[i] : NULL;
}

float gguf_arr_f32(const gguf_kv *kv, uint64_t i)
{
    return kv && kv->arr_f64 && i < kv->arr_n ? (float)kv->arr_f64[i] : 0.0f;
}

int64_t gguf_arr_i64(const gguf_kv *kv, uint64_t i)
{
    return kv && kv->arr_u64 && i < kv->arr_n ? (int64_t)kv->arr_u64[i] : 0;
}

/* gguf_write.c — GGUF v3 container: the streaming writer (metadata first, then tensor data). gguf/ */
#include "gguf/gguf.h"
#include "gguf/gguf_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- writer */

typedef struct {
    char *key;
    uint64_t val_off;      /* offset of the value bytes within kvbuf (array: first element) */
} s_wkv;

typedef struct {
    char *name;
    uint32_t n_dims;
    uint64_t dims[GGUF_MAX_DIMS];
    uint32_t type;
    uint64_t nbytes;
    uint64_t rel;          /* offset relative to the data section, aligned */
} s_wtensor;

struct gguf_writer {
    uint32_t alignment;
    uint8_t *kvbuf;        /* encoded kv pairs, in order */
    size_t kvlen, kvcap;
    s_wkv *kvs;
    uint64_t n_kv, kvs_cap;
    s_wtensor *t;
    uint64_t n_t, t_cap;
    uint64_t data_len;     /* relative end of the last declared tensor, aligned */
    char fail[160];        /* first declaration error, reported by write_header */
    int header_done;
    uint64_t file_pos;     /* bytes written to fd so far */
    uint64_t next;         /* tensor whose data is being written */
    uint64_t next_done;    /* bytes of it written */
};

static int s_wfail(gguf_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int s_wfail(gguf_writer *w, const char *fmt, ...)
{
    if (!w->fail[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->fail, sizeof w->fail, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int s_buf_put(gguf_writer *w, const void *p, size_t n)
{
    if (w->kvlen + n > w->kvcap) {
        size_t cap = w->kvcap ? w->kvcap : 256;
        while (cap < w->kvlen + n)
            cap *= 2;
        uint8_t *nb = realloc(w->kvbuf, cap);
        if (!nb)
            return s_wfail(w, "out of memory");
        w->kvbuf = nb;
        w->kvcap = cap;
    }
    memcpy(w->kvbuf + w->kvlen, p, n);
    w->kvlen += n;
    return 0;
}

static int s_buf_le(gguf_writer *w, uint64_t v, uint32_t n)
{
    uint8_t b[8];
    for (uint32_t i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    return s_buf_put(w, b, n);
}

static int s_buf_str(gguf_writer *w, const char *s)
{
    size_t n = strlen(s);
    return s_buf_le(w, n, 8) || s_buf_put(w, s, n);
}

/* Start a kv: validates the key, appends key and type, records where the value starts. */
static int s_kv_begin(gguf_writer *w, const char *key, uint32_t type)
{
    if (!w || w->fail[0])
        return -1;
    if (w->header_done)
        return s_wfail(w, "kv '%s' added after the header was written", key);
    if (!key || !key[0] || strlen(key) > GGUF_MAX_STRLEN)
        return s_wfail(w, "bad kv key");
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kvs[i].key, key) == 0)
            return s_wfail(w, "duplicate kv key '%s'", key);
    if (w->n_kv == w->kvs_cap) {
        uint64_t cap = w->kvs_cap ? w->kvs_cap * 2 : 16;
        s_wkv *nk = realloc(w->kvs, (size_t)cap * sizeof *nk);
        if (!nk)
            return s_wfail(w, "out of memory");
        w->kvs = nk;
        w->kvs_cap = cap;
    }
    char *k = strdup(key);
    if (!k || s_buf_str(w, key) || s_buf_le(w, type, 4)) {
        free(k);
        return s_wfail(w, "out of memory");
    }
    w->kvs[w->n_kv].key = k;
    w->kvs[w->n_kv].val_off = w->kvlen;
    w->n_kv++;
    return 0;
}

gguf_writer *gguf_writer_new(uint32_t alignment)
{
    if (!gguf_is_pow2(alignment))
        return NULL;
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->alignment = alignment;
    if (gguf_writer_kv_u32(w, "general.alignment", alignment)) {
        gguf_writer_free(&w);
        return NULL;
    }
    return w;
}

void gguf_writer_free(gguf_writer **wp)
{
    if (!wp || !*wp)
        return;
    gguf_writer *w = *wp;
    for (uint64_t i = 0; i < w->n_kv; i++)
        free(w->kvs[i].key);
    for (uint64_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->kvs);
    free(w->t);
    free(w->kvbuf);
    free(w);
    *wp = NULL;
}

int gguf_writer_kv_str(gguf_writer *w, const char *key, const char *val)
{
    if (!val || strlen(val) > GGUF_MAX_STRLEN)
        return w ? s_wfail(w, "bad string value for '%s'", key) : -1;
    if (s_kv_begin(w, key, GGUF_T_STRING) || s_buf_str(w, val))
        return -1;
    w->kvs[w->n_kv - 1].val_off += 8; /* point at the bytes, past the length */
    return 0;
}

int gguf_writer_kv_u32(gguf_writer *w, const char *key, uint32_t val)
{
    return s_kv_begin(w, key, GGUF_T_UINT32) || s_buf_le(w, val, 4) ? -1 : 0;
}

int gguf_writer_kv_u64(gguf_writer *w, const char *key, uint64_t val)
{
    return s_kv_begin(w, key, GGUF_T_UINT64) || s_buf_le(w, val, 8) ? -1 : 0;
}

int gguf_writer_kv_f32(gguf_writer *w, const char *key, float val)
{
    uint32_t b;
    memcpy(&b, &val, 4);
    return s_kv_begin(w, key, GGUF_T_FLOAT32) || s_buf_le(w, b, 4) ? -1 : 0;
}

int gguf_writer_kv_i32(gguf_writer *w, const char *key, int32_t val)
{
    return s_kv_begin(w, key, GGUF_T_INT32) || s_buf_le(w, (uint32_t)val, 4) ? -1 : 0;
}

int gguf_writer_kv_bool(gguf_writer *w, const char *key, int val)
{
    return s_kv_begin(w, key, GGUF_T_BOOL) || s_buf_le(w, val != 0, 1) ? -1 : 0;
}

/* Start an array kv of n elements of type et; the recorded value offset is its first element. */
static int s_arr_begin(gguf_writer *w, const char *key, uint32_t et, uint64_t n, const void *vals)
{
    if (n > GGUF_MAX_ARRAY || (n && !vals))
        return w ? s_wfail(w, "bad array for '%s'", key) : -1;
    if (s_kv_begin(w, key, GGUF_T_ARRAY) || s_buf_le(w, et, 4) || s_buf_le(w, n, 8))
        return -1;
    w->kvs[w->n_kv - 1].val_off += 12; /* past element type and count */
    return 0;
}

int gguf_writer_kv_arr_i32(gguf_writer *w, const char *key, const int32_t *vals, uint64_t n)
{
    if (s_arr_begin(w, key, GGUF_T_INT32, n, vals))
        return -1;
    for (uint64_t i = 0; i < n; i++)
        if (s_buf_le(w, (uint32_t)vals[i], 4))
            return -1;
    return 0;
}

int gguf_writer_kv_arr_f32(gguf_writer *w, const char *key, const float *vals, uint64_t n)
{
    if (s_arr_begin(w, key, GGUF_T_FLOAT32, n, vals))
        return -1;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &vals[i], 4);
        if (s_buf_le(w, b, 4))
            return -1;
    }
    return 0;
}

int gguf_writer_kv_arr_str(gguf_writer *w, const char *key, const char *const *vals, uint64_t n)
{
    for (uint64_t i = 0; i < n && vals; i++)
        if (!vals[i] || strlen(vals[i]) > GGUF_MAX_STRLEN)
            return w ? s_wfail(w, "bad string %llu in array '%s'", (unsigned long long)i, key) : -1;
    if (s_arr_begin(w, key, GGUF_T_STRING, n, vals))
        return -1;
    for (uint64_t i = 0; i < n; i++)
        if (s_buf_str(w, vals[i]))
            return -1;
    return 0;
}

int gguf_writer_kv_arr_u64(gguf_writer *w, const char *key, const uint64_t *vals, uint64_t n)
{
    if (s_arr_begin(w, key, GGUF_T_UINT64, n, vals))
        return -1;
    for (uint64_t i = 0; i < n; i++)
        if (s_buf_le(w, vals[i], 8))
            return -1;
    return 0;
}

int gguf_writer_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                       const uint64_t *dims)
{
    const char *why = NULL;
    uint64_t nbytes, end;
    if (!w || w->fail[0])
        return -1;
    if (w->header_done)
        return s_wfail(w, "tensor '%s' declared after the header was written", name);
    if (!name || !name[0] || strlen(name) > GGUF_MAX_STRLEN)
        return s_wfail(w, "bad tensor name");
    if (w->n_t >= GGUF_MAX_TENSORS || w->n_t >= INT32_MAX)
        return s_wfail(w, "too many tensors");
    if (!dims || gguf_tensor_nbytes(type, n_dims, dims, &nbytes, &why))
        return s_wfail(w, "tensor '%s': %s", name, dims ? why : "no dims");
    for (uint64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return s_wfail(w, "duplicate tensor name '%s'", name);
    if (gguf_checked_add(w->data_len, nbytes, &end) || gguf_checked_add(end, w->alignment - 1, &end))
        return s_wfail(w, "tensor '%s': data section overflows", name);
    if (w->n_t == w->t_cap) {
        uint64_t cap = w->t_cap ? w->t_cap * 2 : 16;
        s_wtensor *nt = realloc(w->t, (size_t)cap * sizeof *nt);
        if (!nt)
            return s_wfail(w, "out of memory");
        w->t = nt;
        w->t_cap = cap;
    }
    s_wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return s_wfail(w, "out of memory");
    t->n_dims = n_dims;
    memcpy(t->dims, dims, n_dims * sizeof *dims);
    t->type = type;
    t->nbytes = nbytes;
    t->rel = w->data_len;
    w->data_len = end & ~(uint64_t)(w->alignment - 1);
    return (int)w->n_t++;
}

/* Bytes before the data section, unpadded: fixed header + kvs + tensor infos. */
static uint64_t s_header_len(const gguf_writer *w)
{
    uint64_t n = 24 + w->kvlen;
    for (uint64_t i = 0; i < w->n_t; i++)
        n += 8 + strlen(w->t[i].name) + 4 + 8ull * w->t[i].n_dims + 4 + 8;
    return n;
}

static uint64_t s_data_offset(const gguf_writer *w)
{
    uint64_t a = w->alignment;
    return (s_header_len(w) + a - 1) & ~(a - 1);
}

uint64_t gguf_writer_tensor_offset(const gguf_writer *w, int idx)
{
    if (!w || idx < 0 || (uint64_t)idx >= w->n_t)
        return 0;
    return s_data_offset(w) + w->t[idx].rel;
}

int gguf_writer_kv_value_offset(const gguf_writer *w, const char *key, uint64_t *off)
{
    for (uint64_t i = 0; w && i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, key) == 0) {
            *off = 24 + w->kvs[i].val_off;
            return 0;
        }
    }
    return -1;
}

static int s_write_all(int fd, const void *p, uint64_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t k = write(fd, b, n > (1u << 30) ? (1u << 30) : (size_t)n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        b += k;
        n -= (uint64_t)k;
    }
    return 0;
}

static int s_write_zeros(int fd, uint64_t n)
{
    static const uint8_t zeros[4096];
    while (n) {
        uint64_t k = n < sizeof zeros ? n : sizeof zeros;
        if (s_write_all(fd, zeros, k))
            return -1;
        n -= k;
    }
    return 0;
}

int gguf_writer_write_header(gguf_writer *w, int fd, char *err, size_t errlen)
{
    size_t kvlen;
    if (!w) {
        gguf_err(err, errlen, "gguf writer", "no writer");
        return -1;
    }
    if (w->fail[0]) {
        gguf_err(err, errlen, "gguf writer", "%s", w->fail);
        return -1;
    }
    if (w->header_done) {
        gguf_err(err, errlen, "gguf writer", "header already written");
        return -1;
    }
    /* Header and tensor infos are encoded by the kv buffer code, appended after the kvs, and cut
     * off again afterwards so the kv bytes stay as they were. */
    kvlen = w->kvlen;
    uint64_t off = s_data_offset(w);
    if (s_buf_le(w, GGUF_MAGIC, 4) || s_buf_le(w, GGUF_VERSION, 4) || s_buf_le(w, w->n_t, 8) ||
        s_buf_le(w, w->n_kv, 8))
        goto err;
    size_t hdr_at = kvlen;
    for (uint64_t i = 0; i < w->n_t; i++) {
        const s_wtensor *t = &w->t[i];
        if (s_buf_str(w, t->name) || s_buf_le(w, t->n_dims, 4))
            goto err;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (s_buf_le(w, t->dims[d], 8))
                goto err;
        if (s_buf_le(w, t->type, 4) || s_buf_le(w, t->rel, 8))
            goto err;
    }
    /* Layout in kvbuf now: [kvs][24-byte header][tensor infos]; write in file order. */
    uint64_t n_info = w->kvlen - hdr_at - 24;
    const uint8_t *b = w->kvbuf;
    if (s_write_all(fd, b + hdr_at, 24) || s_write_all(fd, b, hdr_at) ||
        s_write_all(fd, b + hdr_at + 24, n_info) ||
        s_write_zeros(fd, off - (24 + hdr_at + n_info))) {
        gguf_err(err, errlen, "gguf writer", "write header: %s", strerror(errno));
        w->kvlen = kvlen;
        return -1;
    }
    w->kvlen = kvlen;
    w->header_done = 1;
    w->file_pos = off;
    w->next = 0;
    w->next_done = 0;
    return 0;
err:
    w->kvlen = kvlen;
    gguf_err(err, errlen, "gguf writer", "%s", w->fail[0] ? w->fail : "out of memory");
    return -1;
}

int gguf_writer_write_data(gguf_writer *w, int fd, int idx, const void *data, uint64_t nbytes,
                           char *err, size_t errlen)
{
    if (!w || !w->header_done) {
        gguf_err(err, errlen, "gguf writer", "tensor data before the header");
        return -1;
    }
    if (idx < 0 || (uint64_t)idx != w->next || w->next >= w->n_t) {
        gguf_err(err, errlen, "gguf writer", "tensor %d written out of order (expected %llu of %llu)",
              idx, (unsigned long long)w->next, (unsigned long long)w->n_t);
        return -1;
    }
    const s_wtensor *t = &w->t[idx];
    if (nbytes > t->nbytes - w->next_done) {
        gguf_err(err, errlen, "gguf writer", "tensor '%s': %llu bytes more than its size %llu",
              t->name, (unsigned long long)(w->next_done + nbytes - t->nbytes),
              (unsigned long long)t->nbytes);
        return -1;
    }
    if (s_write_all(fd, data, nbytes)) {
        gguf_err(err, errlen, "gguf writer", "write tensor '%s': %s", t->name, strerror(errno));
        return -1;
    }
    w->next_done += nbytes;
    w->file_pos += nbytes;
    if (w->next_done == t->nbytes) {
        /* pad to the alignment so the next tensor (or the end of file) is aligned */
        uint64_t a = w->alignment, pad = (a - (w->file_pos & (a - 1))) & (a - 1);
        if (s_write_zeros(fd, pad)) {
            gguf_err(err, errlen, "gguf writer", "write padding: %s", strerror(errno));
            return -1;
        }
        w->file_pos += pad;
        w->next++;
        w->next_done = 0;
    }
    return 0;
}

/* Bytes of one scalar of GGUF value type t, or 0 for strings, arrays and unknown types. */
static uint32_t s_vsize(uint32_t t)
{
    switch (t) {
    case GGUF_T_UINT8: case GGUF_T_INT8: case GGUF_T_BOOL:
        return 1;
    case GGUF_T_UINT16: case GGUF_T_INT16:
        return 2;
    case GGUF_T_UINT32: case GGUF_T_INT32: case GGUF_T_FLOAT32:
        return 4;
    case GGUF_T_UINT64: case GGUF_T_INT64: case GGUF_T_FLOAT64:
        return 8;
    }
    return 0;
}

/* One scalar's bytes from the reader's widened copies: integers from their 64-bit value
 * (two's complement, so the low bytes are the original's), f32 from its exact f64. */
static int s_put_scalar(gguf_writer *w, uint32_t t, uint64_t u, double f)
{
    if (t == GGUF_T_FLOAT32) {
        float v = (float)f;
        uint32_t b;
        memcpy(&b, &v, 4);
        return s_buf_le(w, b, 4);
    }
    if (t == GGUF_T_FLOAT64) {
        uint64_t b;
        memcpy(&b, &f, 8);
        return s_buf_le(w, b, 8);
    }
    return s_buf_le(w, u, s_vsize(t));
}

int gguf_writer_kv_copy(gguf_writer *w, const gguf_kv *kv)
{
    if (kv->type == GGUF_T_STRING)
        return gguf_writer_kv_str(w, kv->key, kv->str);
    if (kv->type != GGUF_T_ARRAY) {
        if (!s_vsize(kv->type))
            return w ? s_wfail(w, "kv '%s' has unknown type %u", kv->key, kv->type) : -1;
        const int is_signed = kv->type == GGUF_T_INT8 || kv->type == GGUF_T_INT16 ||
                              kv->type == GGUF_T_INT32 || kv->type == GGUF_T_INT64;
        if (s_kv_begin(w, kv->key, kv->type) ||
            s_put_scalar(w, kv->type, is_signed ? (uint64_t)kv->i64 : kv->u64, kv->f64))
            return -1;
        return 0;
    }
    if (kv->arr_type == GGUF_T_STRING)
        return gguf_writer_kv_arr_str(w, kv->key, (const char *const *)kv->arr_str, kv->arr_n);
    if (!s_vsize(kv->arr_type) || (kv->arr_n && !kv->arr_u64 && !kv->arr_f64))
        return w ? s_wfail(w, "array '%s' of type %u cannot be copied", kv->key, kv->arr_type)
                 : -1;
    if (s_arr_begin(w, kv->key, kv->arr_type, kv->arr_n, kv->arr_n ? (void *)1 : NULL))
        return -1;
    for (uint64_t i = 0; i < kv->arr_n; i++)
        if (s_put_scalar(w, kv->arr_type, kv->arr_u64 ? kv->arr_u64[i] : 0,
                         kv->arr_f64 ? kv->arr_f64[i] : 0))
            return -1;
    return 0;
}

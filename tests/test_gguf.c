/* test_gguf.c — GGUF reader/writer and lab model: round trips, a corruption table, truncation and byte-flip fuzz. tests/ */
#include "gguf/gguf.h"
#include "arch/model.h"
#include "tests/check.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char s_dir[512];

static const char *s_path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", s_dir, name);
    return buf;
}

static int s_write_file(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return -1;
    int rc = write(fd, p, n) == (ssize_t)n ? 0 : -1;
    close(fd);
    return rc;
}

static uint8_t *s_read_file(const char *path, size_t *n)
{
    struct stat st;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &st)) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    uint8_t *p = malloc((size_t)st.st_size + 1);
    if (p && pread(fd, p, (size_t)st.st_size, 0) != st.st_size) {
        free(p);
        p = NULL;
    }
    close(fd);
    *n = (size_t)st.st_size;
    return p;
}

/* An error must name the file: "PATH: problem". */
static int s_err_names(const char *err, const char *path)
{
    size_t n = strlen(path);
    return strncmp(err, path, n) == 0 && err[n] == ':' && err[n + 1] == ' ' && err[n + 2];
}

/* ---------------------------------------------------------------- round trips */

static void s_check_model_file(const char *path, uint32_t L, uint32_t d, uint64_t seed,
                               uint32_t align)
{
    char err[512] = "";
    model_t m;
    int rc = model_open(&m, path, err, sizeof err);
    CHECK(rc == 0, "model_open %s: %s", path, err);
    if (rc)
        return;
    struct stat st;
    stat(path, &st);
    CHECK(m.n_layers == L && m.dim == d && m.seed == seed && m.alignment == align,
          "header L=%u d=%u seed=%llu align=%u", m.n_layers, m.dim, (unsigned long long)m.seed,
          m.alignment);
    CHECK(m.file_size == (uint64_t)st.st_size, "file_size");
    CHECK(st.st_size % align == 0, "file padded to alignment (%lld)", (long long)st.st_size);

    gguf_file *g = gguf_open(path, err, sizeof err);
    CHECK(g != NULL, "gguf_open: %s", err);
    if (g) {
        const gguf_kv *al = gguf_find_kv(g, "general.alignment");
        CHECK(al && al->type == GGUF_T_UINT32 && al->u64 == align, "general.alignment u32");
        CHECK(g->data_offset % align == 0, "data offset aligned");
        CHECK(g->n_tensors == 2ull * L, "tensor count");
        /* declared order: g then W per layer */
        for (uint32_t l = 0; l < L && g->n_tensors == 2ull * L; l++) {
            char n1[32], n2[32];
            snprintf(n1, sizeof n1, "blk.%u.g", l);
            snprintf(n2, sizeof n2, "blk.%u.w", l);
            CHECK(strcmp(g->tensors[2 * l].name, n1) == 0 &&
                      strcmp(g->tensors[2 * l + 1].name, n2) == 0, "order at layer %u", l);
        }
        gguf_close(&g);
    }

    float *gf = malloc((size_t)d * 4), *W = malloc((size_t)d * d * 4);
    float *gr = malloc((size_t)d * 4), *Wr = malloc((size_t)d * d * 4);
    int fd = open(path, O_RDONLY);
    for (uint32_t l = 0; l < L; l++) {
        const model_layer *ly = &m.layers[l];
        CHECK(ly->g_off % align == 0 && ly->w_off % align == 0, "layer %u offsets aligned", l);
        model_fill_layer(seed, l, d, gf, W);
        CHECK(pread(fd, gr, (size_t)d * 4, (off_t)ly->g_off) == (ssize_t)d * 4, "read g");
        CHECK(pread(fd, Wr, (size_t)d * d * 4, (off_t)ly->w_off) == (ssize_t)d * d * 4, "read W");
        CHECK(memcmp(gf, gr, (size_t)d * 4) == 0, "layer %u g bytes", l);
        CHECK(memcmp(W, Wr, (size_t)d * d * 4) == 0, "layer %u W bytes", l);
        CHECK(model_layer_checksum(gr, Wr, d) == ly->checksum, "layer %u checksum from file", l);
    }
    close(fd);
    free(gf);
    free(W);
    free(gr);
    free(Wr);
    model_close(&m);

    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0, "no .tmp left behind");
}

static void test_roundtrip(void)
{
    char p[600], err[512] = "";
    uint32_t aligns[] = { 4096, 32 };
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/rt_%u.gguf", s_dir, aligns[i]);
        int rc = model_gen(p, 3, 64, 7, aligns[i], err, sizeof err);
        CHECK(rc == 0, "model_gen align %u: %s", aligns[i], err);
        if (rc == 0)
            s_check_model_file(p, 3, 64, 7, aligns[i]);
    }
    /* d = 1000: rows are not a multiple of 4 floats' worth of anything convenient */
    s_path(p, sizeof p, "rt_d1000.gguf");
    CHECK(model_gen(p, 2, 1000, 11, 32, err, sizeof err) == 0, "gen d=1000: %s", err);
    s_check_model_file(p, 2, 1000, 11, 32);
    /* odd d: W has an odd element count only when d is odd */
    s_path(p, sizeof p, "rt_d7.gguf");
    CHECK(model_gen(p, 1, 7, 3, 64, err, sizeof err) == 0, "gen d=7: %s", err);
    s_check_model_file(p, 1, 7, 3, 64);

    /* bad arguments fail cleanly and leave nothing behind */
    s_path(p, sizeof p, "bad_gen.gguf");
    CHECK(model_gen(p, 2, 8, 1, 3, err, sizeof err) == -1 && s_err_names(err, p), "align 3: %s", err);
    CHECK(model_gen(p, 0, 8, 1, 32, err, sizeof err) == -1, "0 layers");
    CHECK(model_gen(p, 1, 0, 1, 32, err, sizeof err) == -1, "dim 0");
    CHECK(access(p, F_OK) != 0, "nothing written for bad args");
    CHECK(model_gen("/nonexistent-dir/x.gguf", 1, 4, 1, 32, err, sizeof err) == -1 && err[0],
          "unwritable dir: %s", err);
}

static void test_fill(void)
{
    enum { D = 256 };
    static float g1[D], W1[D * D], g2[D], W2[D * D];
    model_fill_layer(5, 2, D, g1, W1);
    model_fill_layer(5, 2, D, g2, W2);
    CHECK(memcmp(g1, g2, sizeof g1) == 0 && memcmp(W1, W2, sizeof W1) == 0, "deterministic");
    float a = 1.0f / 16.0f;
    int gok = 1, wok = 1;
    double sum = 0, sq = 0;
    for (int i = 0; i < D; i++)
        gok &= g1[i] > 0.5f && g1[i] < 1.5f;
    for (int i = 0; i < D * D; i++) {
        wok &= W1[i] > -a && W1[i] < a;
        sum += W1[i];
        sq += (double)W1[i] * W1[i];
    }
    CHECK(gok, "g in (0.5, 1.5)");
    CHECK(wok, "W in (-a, a)");
    double mean = sum / (D * D), var = sq / (D * D) - mean * mean;
    /* U(-a,a): mean 0, variance a^2/3 */
    CHECK(fabs(mean) < 0.01 * a && fabs(var / (a * a / 3.0) - 1.0) < 0.02, "W moments mean %g var %g",
          mean, var);
    model_fill_layer(5, 3, D, g2, W2);
    CHECK(memcmp(W1, W2, sizeof W1) != 0 && memcmp(g1, g2, sizeof g1) != 0, "layers differ");
    model_fill_layer(6, 2, D, g2, W2);
    CHECK(memcmp(W1, W2, sizeof W1) != 0, "seeds differ");
    CHECK(model_layer_checksum(g1, W1, D) != model_layer_checksum(g2, W2, D), "checksums differ");
}

/* ---------------------------------------------------------------- writer */

static void test_writer(void)
{
    char p[600], err[512] = "";
    CHECK(gguf_writer_new(0) == NULL && gguf_writer_new(3) == NULL && gguf_writer_new(48) == NULL,
          "writer rejects bad alignment");

    gguf_writer *w = gguf_writer_new(64);
    uint64_t arr[3] = { 1, UINT64_MAX, 42 };
    uint64_t d2[2] = { 3, 5 }, d1[1] = { 9 }, dq[1] = { 64 };
    CHECK(w && gguf_writer_kv_str(w, "a.str", "hello") == 0, "kv str");
    CHECK(gguf_writer_kv_u64(w, "a.u64", 1ull << 40) == 0, "kv u64");
    CHECK(gguf_writer_kv_f32(w, "a.f32", 0.25f) == 0, "kv f32");
    CHECK(gguf_writer_kv_arr_u64(w, "a.arr", arr, 3) == 0, "kv arr");
    CHECK(gguf_writer_kv_arr_u64(w, "a.empty", NULL, 0) == 0, "kv empty arr");
    CHECK(gguf_writer_tensor(w, "t0", GGML_TYPE_F32, 2, d2) == 0, "tensor 0");
    CHECK(gguf_writer_tensor(w, "t1", GGML_TYPE_F16, 1, d1) == 1, "tensor 1");
    CHECK(gguf_writer_tensor(w, "t2", 8 /* Q8_0 */, 1, dq) == 2, "tensor 2 (Q8_0 sizing)");
    CHECK(gguf_writer_tensor(w, "t3", 8, 1, d1) == -1, "Q8_0 with ne0 not a multiple of 32 rejected");
    /* that failure is sticky: the header refuses to go out */
    s_path(p, sizeof p, "writer.gguf");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(gguf_writer_write_header(w, fd, err, sizeof err) == -1 && err[0], "sticky fail: %s", err);
    close(fd);
    gguf_writer_free(&w);

    w = gguf_writer_new(64);
    gguf_writer_kv_str(w, "a.str", "hello");
    gguf_writer_kv_u64(w, "a.u64", 1ull << 40);
    gguf_writer_kv_f32(w, "a.f32", 0.25f);
    gguf_writer_kv_arr_u64(w, "a.arr", arr, 3);
    gguf_writer_kv_arr_u64(w, "a.empty", NULL, 0);
    gguf_writer_tensor(w, "t0", GGML_TYPE_F32, 2, d2);
    gguf_writer_tensor(w, "t1", GGML_TYPE_F16, 1, d1);
    gguf_writer_tensor(w, "t2", 8, 1, dq);
    CHECK(gguf_writer_kv_u32(w, "a.str", 1) == -1, "duplicate key rejected");
    gguf_writer_free(&w);

    w = gguf_writer_new(64);
    gguf_writer_kv_str(w, "a.str", "hello");
    gguf_writer_kv_u64(w, "a.u64", 1ull << 40);
    gguf_writer_kv_f32(w, "a.f32", 0.25f);
    gguf_writer_kv_arr_u64(w, "a.arr", arr, 3);
    gguf_writer_kv_arr_u64(w, "a.empty", NULL, 0);
    gguf_writer_tensor(w, "t0", GGML_TYPE_F32, 2, d2);
    gguf_writer_tensor(w, "t1", GGML_TYPE_F16, 1, d1);
    gguf_writer_tensor(w, "t2", 8, 1, dq);
    CHECK(gguf_writer_tensor(w, "t0", GGML_TYPE_F32, 1, d1) == -1, "duplicate tensor rejected");
    gguf_writer_free(&w);

    w = gguf_writer_new(64);
    gguf_writer_kv_str(w, "a.str", "hello");
    gguf_writer_kv_u64(w, "a.u64", 1ull << 40);
    gguf_writer_kv_f32(w, "a.f32", 0.25f);
    gguf_writer_kv_arr_u64(w, "a.arr", arr, 3);
    gguf_writer_kv_arr_u64(w, "a.empty", NULL, 0);
    gguf_writer_tensor(w, "t0", GGML_TYPE_F32, 2, d2);
    gguf_writer_tensor(w, "t1", GGML_TYPE_F16, 1, d1);
    gguf_writer_tensor(w, "t2", 8, 1, dq);
    uint8_t data[68];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 7 + 1);
    fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(gguf_writer_write_data(w, fd, 0, data, 60, err, sizeof err) == -1, "data before header");
    CHECK(gguf_writer_write_header(w, fd, err, sizeof err) == 0, "header: %s", err);
    CHECK(gguf_writer_write_data(w, fd, 1, data, 18, err, sizeof err) == -1, "out of order: %s", err);
    CHECK(gguf_writer_write_data(w, fd, 0, data, 61, err, sizeof err) == -1, "too many bytes");
    CHECK(gguf_writer_write_data(w, fd, 0, data, 20, err, sizeof err) == 0 &&
              gguf_writer_write_data(w, fd, 0, data + 20, 40, err, sizeof err) == 0,
          "t0 in two pieces: %s", err);
    CHECK(gguf_writer_write_data(w, fd, 1, data, 18, err, sizeof err) == 0, "t1: %s", err);
    CHECK(gguf_writer_write_data(w, fd, 2, data, 68, err, sizeof err) == 0, "t2: %s", err);
    CHECK(gguf_writer_write_data(w, fd, 3, data, 1, err, sizeof err) == -1, "past last tensor");
    uint64_t off0 = gguf_writer_tensor_offset(w, 0), off2 = gguf_writer_tensor_offset(w, 2);
    close(fd);
    gguf_writer_free(&w);

    gguf_file *g = gguf_open(p, err, sizeof err);
    CHECK(g != NULL, "reopen: %s", err);
    if (!g)
        return;
    const char *s = NULL;
    uint64_t u = 0;
    CHECK(gguf_get_str(g, "a.str", &s, err, sizeof err) == 0 && strcmp(s, "hello") == 0, "str");
    CHECK(gguf_get_u64(g, "a.u64", &u, err, sizeof err) == 0 && u == 1ull << 40, "u64");
    const gguf_kv *kv = gguf_find_kv(g, "a.f32");
    CHECK(kv && kv->type == GGUF_T_FLOAT32 && kv->f64 == 0.25, "f32");
    kv = gguf_find_kv(g, "a.arr");
    CHECK(kv && kv->type == GGUF_T_ARRAY && kv->arr_type == GGUF_T_UINT64 && kv->arr_n == 3 &&
              kv->arr_u64[1] == UINT64_MAX && kv->arr_u64[2] == 42, "arr");
    kv = gguf_find_kv(g, "a.empty");
    CHECK(kv && kv->arr_n == 0, "empty arr");
    CHECK(gguf_get_u64(g, "a.str", &u, err, sizeof err) == -1 && s_err_names(err, p), "wrong type: %s", err);
    CHECK(gguf_get_str(g, "nope", &s, err, sizeof err) == -1 && strstr(err, "nope"), "missing: %s", err);
    const gguf_tensor *t = gguf_find_tensor(g, "t2");
    CHECK(t && t->nbytes == 68 && t->offset == off2 && t->offset % 64 == 0, "t2 extent");
    t = gguf_find_tensor(g, "t0");
    CHECK(t && t->nbytes == 60 && t->offset == off0 && t->n_dims == 2 && t->dims[0] == 3 &&
              t->dims[1] == 5, "t0 shape");
    CHECK(g->file_size == off2 + 128, "file ends padded after the last tensor (%llu)",
          (unsigned long long)g->file_size);
    gguf_close(&g);
}

/* ---------------------------------------------------------------- corruption table */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} s_buf;

static void s_put(s_buf *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void s_u32(s_buf *b, uint32_t v) { s_put(b, &v, 4); }
static void s_u64(s_buf *b, uint64_t v) { s_put(b, &v, 8); }
static void s_str(s_buf *b, const char *s) { s_u64(b, strlen(s)); s_put(b, s, strlen(s)); }
static void s_pad(s_buf *b, uint64_t a)
{
    while (b->n % a)
        s_put(b, "", 1);
}

/* Knobs over one valid one-layer model (d = 4, alignment 32). Zero means "as normal". */
typedef struct {
    const char *label;
    int model_only;          /* a valid GGUF that is not a valid swarm model */
    uint32_t magic, version;
    int set_nt, set_nkv;
    uint64_t nt, nkv;
    int set_keylen;          /* first key's length field */
    uint64_t keylen;
    int set_arr_n;
    uint64_t arr_n;
    int set_arr_type;
    uint32_t arr_type;
    int set_align;
    uint32_t align_val;
    int align_u64;
    int bad_vtype;           /* swarm.seed gets value type 99 */
    int arch_nul;            /* architecture string with an embedded NUL */
    const char *arch;
    int no_checksums;
    const char *t1_name;
    int set_t1_dims;
    uint32_t t1_ndims;
    uint64_t t1_dims[5];
    int set_t1_type;
    uint32_t t1_type;
    int set_t1_off;
    uint64_t t1_off;
    int dup_key;
    uint32_t n_cs;           /* checksum elements written (default 1 = L) */
} s_spec;

static void s_build(const s_spec *sp, s_buf *b)
{
    enum { D = 4 };
    float g[D], W[D * D];
    model_fill_layer(1, 0, D, g, W);
    uint64_t cs = model_layer_checksum(g, W, D);
    uint32_t align = sp->set_align ? sp->align_val : 32;
    uint64_t A = sp->set_align && (align == 0 || (align & (align - 1))) ? 32 : align;
    uint64_t nkv = 7 - (sp->no_checksums ? 1 : 0) + (sp->dup_key ? 1 : 0);

    s_u32(b, sp->magic ? sp->magic : GGUF_MAGIC);
    s_u32(b, sp->version ? sp->version : 3);
    s_u64(b, sp->set_nt ? sp->nt : 2);
    s_u64(b, sp->set_nkv ? sp->nkv : nkv);

    s_u64(b, sp->set_keylen ? sp->keylen : 17);
    s_put(b, "general.alignment", 17);
    if (sp->align_u64) {
        s_u32(b, GGUF_T_UINT64);
        s_u64(b, align);
    } else {
        s_u32(b, GGUF_T_UINT32);
        s_u32(b, align);
    }
    s_str(b, "general.architecture");
    s_u32(b, GGUF_T_STRING);
    if (sp->arch_nul) {
        s_u64(b, 11);
        s_put(b, "swarm\0dense", 11);
    } else {
        s_str(b, sp->arch ? sp->arch : MODEL_ARCH);
    }
    s_str(b, "swarm.layer_count");
    s_u32(b, GGUF_T_UINT32);
    s_u32(b, 1);
    s_str(b, "swarm.dim");
    s_u32(b, GGUF_T_UINT32);
    s_u32(b, D);
    s_str(b, "swarm.seed");
    s_u32(b, sp->bad_vtype ? 99 : GGUF_T_UINT64);
    s_u64(b, 1);
    s_str(b, "swarm.checksum_algo");
    s_u32(b, GGUF_T_STRING);
    s_str(b, "xxh3-64");
    if (!sp->no_checksums) {
        s_str(b, "swarm.layer_checksums");
        s_u32(b, GGUF_T_ARRAY);
        s_u32(b, sp->set_arr_type ? sp->arr_type : GGUF_T_UINT64);
        uint32_t n_cs = sp->n_cs ? sp->n_cs : 1;
        s_u64(b, sp->set_arr_n ? sp->arr_n : n_cs);
        for (uint32_t i = 0; i < n_cs; i++)
            s_u64(b, cs);
    }
    if (sp->dup_key) {
        s_str(b, "swarm.dim");
        s_u32(b, GGUF_T_UINT32);
        s_u32(b, D);
    }

    s_str(b, "blk.0.g");
    s_u32(b, 1);
    s_u64(b, D);
    s_u32(b, GGML_TYPE_F32);
    s_u64(b, 0);

    s_str(b, sp->t1_name ? sp->t1_name : "blk.0.w");
    uint32_t nd = sp->set_t1_dims ? sp->t1_ndims : 2;
    s_u32(b, nd);
    for (uint32_t i = 0; i < nd && i < 5; i++)
        s_u64(b, sp->set_t1_dims ? sp->t1_dims[i] : D);
    s_u32(b, sp->set_t1_type ? sp->t1_type : GGML_TYPE_F32);
    s_u64(b, sp->set_t1_off ? sp->t1_off : (D * 4 + A - 1) / A * A);

    s_pad(b, A);
    s_put(b, g, sizeof g);
    s_pad(b, A);
    s_put(b, W, sizeof W);
    s_pad(b, A);
}

static void test_corrupt(void)
{
    char p[600], err[512];
    const s_spec cases[] = {
        { .label = "valid base" },
        { .label = "bad magic", .magic = 0x46554748 },
        { .label = "version 2 (read as v3)", .version = 2 },
        { .label = "version 1", .version = 1 },
        { .label = "version 4", .version = 4 },
        { .label = "version huge", .version = 0xfffffff0u },
        { .label = "big-endian", .version = 0x03000000u },
        { .label = "huge tensor count", .set_nt = 1, .nt = 1ull << 62 },
        { .label = "tensor count over remaining bytes", .set_nt = 1, .nt = 1000 },
        { .label = "huge kv count", .set_nkv = 1, .nkv = UINT64_MAX },
        { .label = "kv count over remaining bytes", .set_nkv = 1, .nkv = 100000 },
        { .label = "huge key length", .set_keylen = 1, .keylen = UINT64_MAX - 3 },
        { .label = "key length past end", .set_keylen = 1, .keylen = 1000000 },
        { .label = "huge array count", .set_arr_n = 1, .arr_n = UINT64_MAX / 4 },
        { .label = "array count over remaining", .set_arr_n = 1, .arr_n = 1u << 27 },
        { .label = "nested array", .set_arr_type = 1, .arr_type = GGUF_T_ARRAY },
        { .label = "unknown array type", .set_arr_type = 1, .arr_type = 77 },
        { .label = "unknown value type", .bad_vtype = 1 },
        { .label = "string with NUL", .arch_nul = 1 },
        { .label = "offset past end", .set_t1_off = 1, .t1_off = 1ull << 20 },
        { .label = "offset near 2^64", .set_t1_off = 1, .t1_off = UINT64_MAX - 31 },
        { .label = "misaligned offset", .set_t1_off = 1, .t1_off = 20 },
        { .label = "overlapping tensors", .set_t1_off = 1, .t1_off = 0 },
        { .label = "dims product overflow", .set_t1_dims = 1, .t1_ndims = 4,
          .t1_dims = { 1ull << 20, 1ull << 20, 1ull << 20, 1ull << 20 } },
        { .label = "dim zero", .set_t1_dims = 1, .t1_ndims = 2, .t1_dims = { 4, 0 } },
        { .label = "n_dims 0", .set_t1_dims = 1, .t1_ndims = 0 },
        { .label = "n_dims 5", .set_t1_dims = 1, .t1_ndims = 5, .t1_dims = { 4, 4, 1, 1, 1 } },
        { .label = "unknown tensor type", .set_t1_type = 1, .t1_type = 31 },
        { .label = "alignment 0", .set_align = 1, .align_val = 0 },
        { .label = "alignment 3", .set_align = 1, .align_val = 3 },
        { .label = "alignment 48", .set_align = 1, .align_val = 48 },
        { .label = "alignment as u64", .align_u64 = 1 },
        { .label = "duplicate tensor name", .t1_name = "blk.0.g" },
        { .label = "duplicate key", .dup_key = 1 },
        { .label = "wrong arch", .model_only = 1, .arch = "llama" },
        { .label = "missing checksum key", .model_only = 1, .no_checksums = 1 },
        { .label = "checksum count != L", .model_only = 1, .n_cs = 2 },
        { .label = "wrong tensor shape", .model_only = 1, .set_t1_dims = 1, .t1_ndims = 2,
          .t1_dims = { 4, 2 } },
        { .label = "W as 1-d", .model_only = 1, .set_t1_dims = 1, .t1_ndims = 1,
          .t1_dims = { 16 } },
        { .label = "wrong tensor type", .model_only = 1, .set_t1_type = 1,
          .t1_type = GGML_TYPE_F16 },
        { .label = "missing W", .model_only = 1, .t1_name = "other.w" },
        { .label = "tensor for layer past L", .model_only = 1, .t1_name = "blk.1.w" },
    };
    s_path(p, sizeof p, "corrupt.gguf");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const s_spec *c = &cases[i];
        s_buf b = { 0 };
        s_build(c, &b);
        s_write_file(p, b.p, b.n);
        free(b.p);
        int valid = i == 0 || c->version == 2; /* v2 differs from v3 only in byte order */
        err[0] = '\0';
        gguf_file *g = gguf_open(p, err, sizeof err);
        if (valid || c->model_only)
            CHECK(g != NULL, "%s: gguf_open should accept: %s", c->label, err);
        else
            CHECK(g == NULL && s_err_names(err, p), "%s: gguf_open should reject (err '%s')",
                  c->label, err);
        if (!g && !valid && !c->model_only)
            printf("  %-34s -> %s\n", c->label, err);
        gguf_close(&g);
        model_t m;
        err[0] = '\0';
        int rc = model_open(&m, p, err, sizeof err);
        if (valid) {
            CHECK(rc == 0, "base must open: %s", err);
            model_close(&m);
        } else {
            CHECK(rc == -1 && s_err_names(err, p), "%s: model_open should reject (err '%s')",
                  c->label, err);
            if (c->model_only)
                printf("  %-34s -> %s\n", c->label, err);
        }
    }

    s_path(p, sizeof p, "missing.gguf");
    unlink(p);
    CHECK(gguf_open(p, err, sizeof err) == NULL && s_err_names(err, p), "missing file: %s", err);
    CHECK(gguf_open(s_dir, err, sizeof err) == NULL, "directory rejected: %s", err);
}

/* A file like the ones llama.cpp writes: every scalar type, string and float arrays, no
 * general.alignment (so 32), a quantized tensor. */
static void test_foreign(void)
{
    char p[600], err[512];
    s_buf b = { 0 };
    s_u32(&b, GGUF_MAGIC);
    s_u32(&b, 3);
    s_u64(&b, 2);
    s_u64(&b, 11);
    uint8_t u8 = 200, bo = 1;
    int8_t i8 = -5;
    int16_t i16 = -300;
    int32_t i32 = -70000;
    int64_t i64 = -(1ll << 40);
    double f64 = 2.5;
    s_str(&b, "k.u8"); s_u32(&b, GGUF_T_UINT8); s_put(&b, &u8, 1);
    s_str(&b, "k.i8"); s_u32(&b, GGUF_T_INT8); s_put(&b, &i8, 1);
    s_str(&b, "k.i16"); s_u32(&b, GGUF_T_INT16); s_put(&b, &i16, 2);
    s_str(&b, "k.i32"); s_u32(&b, GGUF_T_INT32); s_put(&b, &i32, 4);
    s_str(&b, "k.i64"); s_u32(&b, GGUF_T_INT64); s_put(&b, &i64, 8);
    s_str(&b, "k.f64"); s_u32(&b, GGUF_T_FLOAT64); s_put(&b, &f64, 8);
    s_str(&b, "k.bool"); s_u32(&b, GGUF_T_BOOL); s_put(&b, &bo, 1);
    s_str(&b, "k.u16"); s_u32(&b, GGUF_T_UINT16); s_put(&b, "\x34\x12", 2);
    s_str(&b, "tokenizer.ggml.tokens"); s_u32(&b, GGUF_T_ARRAY); s_u32(&b, GGUF_T_STRING);
    s_u64(&b, 3); s_str(&b, "a"); s_str(&b, ""); s_str(&b, "<s>");
    s_str(&b, "tokenizer.ggml.scores"); s_u32(&b, GGUF_T_ARRAY); s_u32(&b, GGUF_T_FLOAT32);
    s_u64(&b, 2); s_u32(&b, 0); s_u32(&b, 0);
    s_str(&b, "k.i32arr"); s_u32(&b, GGUF_T_ARRAY); s_u32(&b, GGUF_T_INT32);
    s_u64(&b, 2); s_put(&b, &i32, 4); s_u32(&b, 7);
    s_str(&b, "q"); s_u32(&b, 2); s_u64(&b, 512); s_u64(&b, 3); s_u32(&b, 12 /* Q4_K */); s_u64(&b, 0);
    s_str(&b, "h"); s_u32(&b, 1); s_u64(&b, 5); s_u32(&b, GGML_TYPE_F16); s_u64(&b, 864);
    s_pad(&b, 32);
    for (int i = 0; i < 864 + 10; i++)
        s_put(&b, "", 1);
    s_path(p, sizeof p, "foreign.gguf");
    s_write_file(p, b.p, b.n);
    free(b.p);
    gguf_file *g = gguf_open(p, err, sizeof err);
    CHECK(g != NULL, "foreign file: %s", err);
    if (!g)
        return;
    uint64_t u = 0;
    CHECK(g->alignment == 32, "default alignment");
    CHECK(gguf_get_u64(g, "k.u8", &u, err, sizeof err) == 0 && u == 200, "u8");
    CHECK(gguf_get_u64(g, "k.u16", &u, err, sizeof err) == 0 && u == 0x1234, "u16");
    CHECK(gguf_get_u64(g, "k.i8", &u, err, sizeof err) == -1 && s_err_names(err, p), "negative i8: %s", err);
    const gguf_kv *kv = gguf_find_kv(g, "k.i16");
    CHECK(kv && kv->i64 == -300, "i16");
    kv = gguf_find_kv(g, "k.i32");
    CHECK(kv && kv->i64 == -70000 && kv->f64 == -70000.0, "i32");
    kv = gguf_find_kv(g, "k.i64");
    CHECK(kv && kv->i64 == -(1ll << 40), "i64");
    kv = gguf_find_kv(g, "k.f64");
    CHECK(kv && kv->f64 == 2.5, "f64");
    kv = gguf_find_kv(g, "k.bool");
    CHECK(kv && kv->u64 == 1, "bool");
    kv = gguf_find_kv(g, "tokenizer.ggml.tokens");
    CHECK(kv && kv->arr_type == GGUF_T_STRING && kv->arr_n == 3 && !kv->arr_u64, "string array");
    CHECK(kv && !strcmp(gguf_arr_str(kv, 0), "a") && !strcmp(gguf_arr_str(kv, 1), "") &&
              !strcmp(gguf_arr_str(kv, 2), "<s>") && gguf_arr_str(kv, 3) == NULL, "string array kept");
    kv = gguf_find_kv(g, "tokenizer.ggml.scores");
    CHECK(kv && kv->arr_type == GGUF_T_FLOAT32 && kv->arr_n == 2 && kv->arr_f64 &&
              gguf_arr_f32(kv, 1) == 0.0f, "float array kept");
    kv = gguf_find_kv(g, "k.i32arr");
    CHECK(kv && kv->arr_u64 && (int64_t)kv->arr_u64[0] == -70000 && kv->arr_u64[1] == 7, "i32 array");
    const gguf_tensor *t = gguf_find_tensor(g, "q");
    CHECK(t && t->nbytes == 2 * 144 * 3 && t->offset == g->data_offset, "Q4_K size");
    t = gguf_find_tensor(g, "h");
    CHECK(t && t->nbytes == 10 && t->offset == g->data_offset + 864, "F16 size");
    gguf_close(&g);
    model_t m;
    CHECK(model_open(&m, p, err, sizeof err) == -1 && strstr(err, "general.architecture"),
          "not a swarm model: %s", err);
}

/* Typed getters and array writers round trip; corrupt string and float arrays are refused. */
static void test_arrays(void)
{
    char p[600], err[512];
    s_path(p, sizeof p, "arrays.gguf");
    gguf_writer *w = gguf_writer_new(32);
    const char *strs[] = { "\xE2\x96\x81the", "", "<0x0A>", "a b" };
    float f[] = { 0.0f, -1.5f, -1e9f };
    int32_t i32[] = { 1, 3, 6, -1 };
    CHECK(gguf_writer_kv_arr_str(w, "t.strs", strs, 4) == 0 && gguf_writer_kv_arr_f32(w, "t.f", f, 3) == 0 &&
              gguf_writer_kv_arr_i32(w, "t.i", i32, 4) == 0 && gguf_writer_kv_bool(w, "t.b", 1) == 0 &&
              gguf_writer_kv_i32(w, "t.neg", -1) == 0 && gguf_writer_kv_u64(w, "t.big", 1ull << 33) == 0 &&
              gguf_writer_kv_f32(w, "t.eps", 1e-5f) == 0 && gguf_writer_kv_arr_str(w, "t.none", NULL, 0) == 0,
          "array writers");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && gguf_writer_write_header(w, fd, err, sizeof err) == 0, "write: %s", err);
    close(fd);
    gguf_writer_free(&w);
    gguf_file *g = gguf_open(p, err, sizeof err);
    CHECK(g != NULL, "arrays: %s", err);
    if (g) {
        const gguf_kv *kv;
        uint64_t n = 0;
        uint32_t u32;
        int64_t i64;
        float fv;
        int b;
        CHECK(gguf_get_arr(g, "t.strs", GGUF_T_STRING, &kv, &n, err, sizeof err) == 0 && n == 4 &&
                  !strcmp(gguf_arr_str(kv, 0), strs[0]) && !strcmp(gguf_arr_str(kv, 1), "") &&
                  !strcmp(gguf_arr_str(kv, 3), "a b"), "strings: %s", err);
        CHECK(gguf_get_arr(g, "t.f", GGUF_T_FLOAT32, &kv, &n, err, sizeof err) == 0 && n == 3 &&
                  gguf_arr_f32(kv, 1) == -1.5f && gguf_arr_f32(kv, 2) == -1e9f, "floats: %s", err);
        CHECK(gguf_get_arr(g, "t.i", GGUF_T_INT32, &kv, &n, err, sizeof err) == 0 && n == 4 &&
                  gguf_arr_i64(kv, 2) == 6 && gguf_arr_i64(kv, 3) == -1, "ints: %s", err);
        CHECK(gguf_get_arr(g, "t.none", GGUF_T_STRING, &kv, &n, err, sizeof err) == 0 && n == 0,
              "empty string array: %s", err);
        CHECK(gguf_get_arr(g, "t.f", GGUF_T_STRING, &kv, &n, err, sizeof err) == -1 &&
                  s_err_names(err, p) && strstr(err, "t.f") && strstr(err, "strings"),
              "float array as strings: %s", err);
        CHECK(gguf_get_arr(g, "t.b", GGUF_T_INT32, &kv, &n, err, sizeof err) == -1 && strstr(err, "t.b"),
              "scalar as array: %s", err);
        CHECK(gguf_get_bool(g, "t.b", &b, err, sizeof err) == 0 && b == 1, "bool");
        CHECK(gguf_get_i64(g, "t.neg", &i64, err, sizeof err) == 0 && i64 == -1, "i32 -1");
        CHECK(gguf_get_u32(g, "t.neg", &u32, err, sizeof err) == -1 && strstr(err, "t.neg"),
              "negative as u32: %s", err);
        CHECK(gguf_get_u32(g, "t.big", &u32, err, sizeof err) == -1 && strstr(err, "t.big"),
              "2^33 as u32: %s", err);
        CHECK(gguf_get_f32(g, "t.eps", &fv, err, sizeof err) == 0 && fv == 1e-5f, "f32");
        CHECK(gguf_get_f32(g, "t.b", &fv, err, sizeof err) == -1 && strstr(err, "want f32"),
              "bool as f32: %s", err);
        CHECK(gguf_get_u32(g, "t.missing", &u32, err, sizeof err) == -1 && strstr(err, "missing key 't.missing'"),
              "missing: %s", err);
    }
    gguf_close(&g);

    /* Corrupt arrays: each file is a header, one array kv, as llama.cpp would write it. */
    enum { C_TRUNC_STRS, C_HUGE_STRLEN, C_LONG_STRLEN, C_NUL_IN_ELEM, C_FLOAT_SHORT,
           C_STR_COUNT_HUGE, C_N };
    const char *labels[C_N] = { "string array shorter than its count", "string element length near 2^64",
                                "string element over the 1 MiB limit", "string element with a NUL",
                                "float array shorter than its count", "string array count 2^40" };
    for (int c = 0; c < C_N; c++) {
        s_buf b = { 0 };
        s_u32(&b, GGUF_MAGIC);
        s_u32(&b, 3);
        s_u64(&b, 0);
        s_u64(&b, 1);
        s_str(&b, "tokenizer.ggml.tokens");
        s_u32(&b, GGUF_T_ARRAY);
        s_u32(&b, c == C_FLOAT_SHORT ? GGUF_T_FLOAT32 : GGUF_T_STRING);
        s_u64(&b, c == C_STR_COUNT_HUGE ? 1ull << 40 : c == C_FLOAT_SHORT ? 1000 : 3);
        if (c == C_FLOAT_SHORT) {
            s_u32(&b, 0);
        } else {
            s_str(&b, "ok");
            if (c == C_HUGE_STRLEN)
                s_u64(&b, UINT64_MAX - 2);
            else if (c == C_LONG_STRLEN)
                s_u64(&b, (1u << 20) + 1);
            else if (c == C_NUL_IN_ELEM)
                s_u64(&b, 3), s_put(&b, "a\0b", 3);
            else
                s_str(&b, "two");
            if (c != C_TRUNC_STRS)
                s_str(&b, "three");
        }
        s_pad(&b, 32);
        s_write_file(p, b.p, b.n);
        free(b.p);
        err[0] = '\0';
        g = gguf_open(p, err, sizeof err);
        CHECK(g == NULL && s_err_names(err, p) && strstr(err, "tokenizer.ggml.tokens"),
              "%s: should be refused naming the key (err '%s')", labels[c], err);
        printf("  %-40s -> %s\n", labels[c], err);
        gguf_close(&g);
    }
}

/* Truncate a real model at every byte through the header and at points into the data. */
static void test_truncation(void)
{
    char p[600], t[600], err[512];
    s_path(p, sizeof p, "trunc_src.gguf");
    s_path(t, sizeof t, "trunc.gguf");
    CHECK(model_gen(p, 3, 64, 9, 32, err, sizeof err) == 0, "gen: %s", err);
    size_t n = 0;
    uint8_t *buf = s_read_file(p, &n);
    CHECK(buf != NULL, "read src");
    if (!buf)
        return;
    gguf_file *g = gguf_open(p, err, sizeof err);
    uint64_t data_off = g ? g->data_offset : 0;
    gguf_close(&g);
    CHECK(s_write_file(t, buf, n) == 0, "write copy");
    int fd = open(t, O_WRONLY);
    uint64_t points[] = { n - 1, n - 4, n - 100, n / 2, data_off + 64 * 4 + 1, data_off + 1 };
    int bad = 0;
    long first_bad = -1;
    for (size_t i = 0; i < sizeof points / sizeof points[0]; i++) {
        if (ftruncate(fd, (off_t)points[i]) == 0 && gguf_open(t, err, sizeof err) != NULL) {
            bad++;
            first_bad = (long)points[i];
        }
    }
    for (uint64_t k = data_off + 1; k-- > 0;) {
        gguf_file *x = NULL;
        if (ftruncate(fd, (off_t)k) == 0 && (x = gguf_open(t, err, sizeof err)) != NULL) {
            gguf_close(&x);
            bad++;
            first_bad = (long)k;
        } else if (!s_err_names(err, t)) {
            bad++;
            first_bad = (long)k;
        }
        if (k == data_off - 5)
            printf("  truncated at %llu -> %s\n", (unsigned long long)k, err);
    }
    close(fd);
    CHECK(bad == 0, "%d truncations accepted (e.g. at %ld of %zu, data at %llu)", bad, first_bad,
          n, (unsigned long long)data_off);

    /* Byte-flip fuzz over the header: anything goes except crashing, leaking, or accepting a
     * tensor outside the file. */
    size_t accepted = 0, hdr = (size_t)data_off;
    uint8_t vals[] = { 0x00, 0xff, 0x80, 0x01, 0x7f, 0x20 };
    int escaped = 0;
    /* patch one byte in place: rewriting the file each time costs a writeback per variant on ext4 */
    s_write_file(t, buf, n);
    fd = open(t, O_WRONLY);
    for (size_t i = 0; i < hdr; i++) {
        for (size_t v = 0; v < sizeof vals; v++) {
            if (buf[i] == vals[v])
                continue;
            if (pwrite(fd, &vals[v], 1, (off_t)i) != 1)
                escaped++;
            gguf_file *x = gguf_open(t, err, sizeof err);
            if (x) {
                accepted++;
                for (uint64_t j = 0; j < x->n_tensors; j++)
                    if (x->tensors[j].offset + x->tensors[j].nbytes > x->file_size)
                        escaped++;
                gguf_close(&x);
                model_t m;
                if (model_open(&m, t, err, sizeof err) == 0)
                    model_close(&m);
            }
        }
        if (pwrite(fd, &buf[i], 1, (off_t)i) != 1)
            escaped++;
    }
    close(fd);
    CHECK(escaped == 0, "fuzz: a tensor escaped the file (or a write failed)");
    printf("  byte-flip fuzz: %zu header bytes x %zu values, %zu variants still parse\n", hdr,
           sizeof vals, accepted);
    free(buf);
}

int main(void)
{
    const char *d = getenv("SWARM_TEST_TMP");
    snprintf(s_dir, sizeof s_dir, "%s", d && *d ? d : "tests/tmp");
    if (mkdir(s_dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "mkdir %s: %s\n", s_dir, strerror(errno));
        return 1;
    }
    test_fill();
    test_writer();
    test_roundtrip();
    test_corrupt();
    test_foreign();
    test_arrays();
    test_truncation();
    return CHECK_DONE("test_gguf");
}

/* test_requant.c — `swarm quantize` (quant/requant.c): types per tensor, metadata kept, the
 * output readable, the dense model's checksums, fallbacks and clear errors. tests/
 *
 * The input is a small random llama-shaped file written here with gguf_writer (8 layers,
 * 256-wide, F16 matrices, F32 norms, a tokenizer and keys of every GGUF value type).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "gguf/gguf.h"
#include "arch/model.h"
#include "quant/quant.h"
#include "quant/requant.h"
#include "tests/check.h"

enum { E = 256, FF = 512, L = 8 };
static uint32_t s_kv_heads = 4; /* of 4 heads: 1 makes n_gqa() 4 */
static uint64_t V = 300; /* vocabulary: 300 made-up tokens, or SWARM_REQUANT_VOCAB's */
static gguf_file *s_vocab;

static uint64_t s_rng = 0x13198a2e03707344ull;
static float s_unif(void)
{
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return (float)((s_rng >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

typedef struct {
    char name[64];
    uint32_t type;
    uint32_t nd;
    uint64_t dims[2];
} s_t;

static int s_ntensors;
static s_t s_tensors[128];

static void s_add(const char *name, uint32_t type, uint32_t nd, uint64_t d0, uint64_t d1)
{
    s_t *t = &s_tensors[s_ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->nd = nd;
    t->dims[0] = d0;
    t->dims[1] = d1;
}

/* A llama-shaped file: returns 0 on success. emb_cols lets a test make rows that do not
 * fit a 256-block. */
static int s_make_llama(const char *path, uint64_t emb)
{
    char err[256];
    s_ntensors = 0;
    s_add("token_embd.weight", QUANT_F16, 2, emb, V);
    for (int l = 0; l < L; l++) {
        char n[64];
        const char *mats[] = { "attn_q", "attn_k", "attn_v", "attn_output" };
        snprintf(n, sizeof n, "blk.%d.attn_norm.weight", l);
        s_add(n, QUANT_F32, 1, emb, 0);
        for (int m = 0; m < 4; m++) {
            snprintf(n, sizeof n, "blk.%d.%s.weight", l, mats[m]);
            s_add(n, QUANT_F16, 2, emb, emb);
        }
        snprintf(n, sizeof n, "blk.%d.ffn_norm.weight", l);
        s_add(n, QUANT_F32, 1, emb, 0);
        snprintf(n, sizeof n, "blk.%d.ffn_gate.weight", l);
        s_add(n, QUANT_BF16, 2, emb, FF);
        snprintf(n, sizeof n, "blk.%d.ffn_up.weight", l);
        s_add(n, QUANT_F32, 2, emb, FF);
        snprintf(n, sizeof n, "blk.%d.ffn_down.weight", l);
        s_add(n, QUANT_Q8_0, 2, FF, emb);
    }
    s_add("output_norm.weight", QUANT_F32, 1, emb, 0);
    s_add("output.weight", QUANT_F16, 2, emb, V);

    gguf_writer *w = gguf_writer_new(32);
    static const char *toks[300];
    static char tokbuf[300][8];
    static float scores[300];
    static int32_t ttype[300];
    for (int i = 0; i < 300; i++) {
        /* llama.cpp's SPM vocabulary looks up the newline's byte token when it loads */
        snprintf(tokbuf[i], sizeof tokbuf[i], i == 3 ? "<0x0A>" : "t%d", i);
        toks[i] = tokbuf[i];
        scores[i] = -(float)i;
        ttype[i] = i == 0 ? 2 : i < 3 ? 3 : i == 3 ? 6 : 1; /* unknown, control, byte, normal */
    }
    gguf_writer_kv_str(w, "general.architecture", "llama");
    gguf_writer_kv_u32(w, "general.file_type", 1);
    gguf_writer_kv_u32(w, "llama.block_count", L);
    gguf_writer_kv_u32(w, "llama.embedding_length", (uint32_t)emb);
    gguf_writer_kv_u32(w, "llama.context_length", 512);
    gguf_writer_kv_u32(w, "llama.feed_forward_length", FF);
    gguf_writer_kv_u32(w, "llama.attention.head_count", 4);
    gguf_writer_kv_u32(w, "llama.attention.head_count_kv", s_kv_heads);
    gguf_writer_kv_u32(w, "llama.rope.dimension_count", (uint32_t)emb / 4);
    gguf_writer_kv_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    if (!s_vocab)
        gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", 1);
    gguf_writer_kv_i32(w, "test.negative", -7);
    gguf_writer_kv_u64(w, "test.big", 0x123456789abcdefull);
    if (s_vocab) {
        for (uint64_t i = 0; i < s_vocab->n_kv; i++)
            if (!strncmp(s_vocab->kv[i].key, "tokenizer.", 10))
                gguf_writer_kv_copy(w, &s_vocab->kv[i]);
    } else {
        gguf_writer_kv_str(w, "tokenizer.ggml.model", "llama");
        gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", toks, V);
        gguf_writer_kv_arr_f32(w, "tokenizer.ggml.scores", scores, V);
        gguf_writer_kv_arr_i32(w, "tokenizer.ggml.token_type", ttype, V);
    }
    for (int i = 0; i < s_ntensors; i++)
        gguf_writer_tensor(w, s_tensors[i].name, s_tensors[i].type, s_tensors[i].nd,
                           s_tensors[i].dims);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), rc = -1;
    if (fd < 0 || gguf_writer_write_header(w, fd, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", path, fd < 0 ? "cannot create" : err);
        goto out;
    }
    for (int i = 0; i < s_ntensors; i++) {
        const s_t *t = &s_tensors[i];
        const uint64_t rows = t->nd > 1 ? t->dims[1] : 1;
        uint64_t rb;
        quant_row_bytes((quant_type)t->type, t->dims[0], &rb, err, sizeof err);
        float *f = malloc(t->dims[0] * sizeof *f);
        uint8_t *buf = malloc(rb);
        for (uint64_t r = 0; r < rows; r++) {
            for (uint64_t c = 0; c < t->dims[0]; c++)
                f[c] = t->nd == 1 ? 1.0f + 0.1f * s_unif() : 0.05f * s_unif();
            quant_quantize_row((quant_type)t->type, f, buf, t->dims[0], err, sizeof err);
            if (gguf_writer_write_data(w, fd, i, buf, rb, err, sizeof err))
                goto out;
        }
        free(f);
        free(buf);
    }
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    gguf_writer_free(&w);
    return rc;
}

static const char *s_dir;

static void s_path(char *p, size_t n, const char *name)
{
    snprintf(p, n, "%s/%s", s_dir, name);
}

/* Every kv of a is in b with the same type and value (general.file_type aside). */
static int s_same_kvs(const gguf_file *a, const gguf_file *b)
{
    for (uint64_t i = 0; i < a->n_kv; i++) {
        const gguf_kv *x = &a->kv[i], *y = gguf_find_kv(b, x->key);
        if (!strcmp(x->key, "general.file_type"))
            continue;
        if (!y || x->type != y->type || x->u64 != y->u64 || x->i64 != y->i64 ||
            (x->f64 != y->f64 && !(isnan(x->f64) && isnan(y->f64))) ||
            (x->str && strcmp(x->str, y->str)) || x->arr_type != y->arr_type ||
            x->arr_n != y->arr_n) {
            fprintf(stderr, "kv '%s' differs\n", x->key);
            return 0;
        }
        for (uint64_t j = 0; j < x->arr_n; j++) {
            if ((x->arr_u64 && x->arr_u64[j] != y->arr_u64[j]) ||
                (x->arr_f64 && x->arr_f64[j] != y->arr_f64[j]) ||
                (x->arr_str && strcmp(x->arr_str[j], y->arr_str[j]))) {
                fprintf(stderr, "kv '%s' element %llu differs\n", x->key, (unsigned long long)j);
                return 0;
            }
        }
    }
    return a->n_kv == b->n_kv;
}

static uint32_t s_type_of(const gguf_file *g, const char *name)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    return t ? t->type : 9999;
}

/* llama.cpp's type (src/llama-quant.cpp llama_tensor_get_type, no importance matrix) for
 * tensor kind `cat` of layer l in an 8-layer llama whose rows all fit, written out per mix. */
static uint32_t s_want(const char *mix, const char *cat, int l)
{
    static const int more[L] = { 1, 0, 0, 1, 0, 0, 1, 1 }; /* use_more_bits for 8 layers */
    const int gqa4 = 4 / s_kv_heads >= 4;
    struct { const char *name; uint32_t base; } bases[] = {
        { "Q4_K_M", QUANT_Q4_K }, { "q5_k_m", QUANT_Q5_K }, { "Q4_K_S", QUANT_Q4_K },
        { "Q6_K", QUANT_Q6_K },   { "Q8_0", QUANT_Q8_0 },   { "Q4_0", QUANT_Q4_0 },
        { "Q4_K", QUANT_Q4_K },   { "Q4_1", QUANT_Q4_1 },   { "Q5_0", QUANT_Q5_0 },
        { "Q5_1", QUANT_Q5_1 },   { "IQ4_NL", QUANT_IQ4_NL }, { "IQ4_XS", QUANT_IQ4_XS },
        { "Q2_K", QUANT_Q2_K },   { "Q3_K_S", QUANT_Q3_K }, { "Q3_K_M", QUANT_Q3_K },
        { "Q3_K", QUANT_Q3_K },   { "Q3_K_L", QUANT_Q3_K },
    };
    uint32_t base = 0;
    for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++)
        if (!strcmp(mix, bases[i].name))
            base = bases[i].base;
    const int km = !strcmp(mix, "Q4_K_M") || !strcmp(mix, "Q4_K") || !strcmp(mix, "q5_k_m");
    const int q3m = !strcmp(mix, "Q3_K_M") || !strcmp(mix, "Q3_K"), q3l = !strcmp(mix, "Q3_K_L");
    const int q2 = !strcmp(mix, "Q2_K"), iq4 = !strncmp(mix, "IQ4", 3);
    if (!strcmp(cat, "attn_v")) {
        if (km)
            return more[l] ? QUANT_Q6_K : base;
        if (!strcmp(mix, "Q4_K_S"))
            return l < 4 ? QUANT_Q5_K : base;
        if (q2)
            return gqa4 ? QUANT_Q4_K : QUANT_Q3_K;
        if (q3m)
            return l < 2 ? QUANT_Q5_K : QUANT_Q4_K;
        if (q3l || (iq4 && gqa4))
            return QUANT_Q5_K;
        return base;
    }
    if (!strcmp(cat, "ffn_down")) {
        if (km)
            return more[l] ? QUANT_Q6_K : base;
        if (!strcmp(mix, "Q4_K_S") || iq4)
            return l < L / 8 ? QUANT_Q5_K : base;
        if (q2)
            return QUANT_Q3_K;
        if (q3m)
            return l < L / 16 ? QUANT_Q5_K : QUANT_Q4_K;
        return q3l ? QUANT_Q5_K : base;
    }
    if (!strcmp(cat, "attn_output"))
        return q2 ? QUANT_Q3_K : q3m ? QUANT_Q4_K : q3l ? QUANT_Q5_K : base;
    return base;
}

static void test_llama_mixes(void)
{
    char in[512], out[512], err[512];
    requant_stats st;
    s_path(in, sizeof in, "llama.gguf");
    s_path(out, sizeof out, "llama-q.gguf");
    CHECK(s_make_llama(in, E) == 0, "make input");
    gguf_file *gi = gguf_open(in, err, sizeof err);
    CHECK(gi != NULL, "%s", err);
    const char *types[] = { "Q4_K_M", "q5_k_m", "Q4_K_S", "Q6_K", "Q8_0", "Q4_0", "Q4_K",
                            "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "IQ4_XS", "Q2_K", "Q3_K_S",
                            "Q3_K_M", "Q3_K", "Q3_K_L" };
    const uint32_t ftype[] = { 15, 17, 14, 18, 7, 2, 15, 3, 8, 9, 25, 30, 10, 11, 12, 12, 13 };
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        CHECK(requant_file(in, out, types[k], 2, 0, &st, err, sizeof err) == 0, "%s: %s", types[k],
              err);
        gguf_file *go = gguf_open(out, err, sizeof err);
        CHECK(go != NULL, "output of %s opens: %s", types[k], err);
        if (!go || !gi)
            continue;
        uint32_t ft = 0;
        CHECK(gguf_get_u32(go, "general.file_type", &ft, err, sizeof err) == 0 && ft == ftype[k],
              "%s file_type %u", types[k], ft);
        CHECK(s_same_kvs(gi, go), "%s: every metadata key kept", types[k]);
        CHECK(go->n_tensors == gi->n_tensors && go->alignment == gi->alignment,
              "%s: tensors and alignment", types[k]);
        const uint32_t base = s_want(types[k], "base", 0);
        int ok = 1;
        for (int l = 0; l < L; l++) {
            char n[64];
            snprintf(n, sizeof n, "blk.%d.attn_v.weight", l);
            ok &= s_type_of(go, n) == s_want(types[k], "attn_v", l);
            snprintf(n, sizeof n, "blk.%d.ffn_down.weight", l);
            ok &= s_type_of(go, n) == s_want(types[k], "ffn_down", l);
            snprintf(n, sizeof n, "blk.%d.attn_output.weight", l);
            ok &= s_type_of(go, n) == s_want(types[k], "attn_output", l);
            snprintf(n, sizeof n, "blk.%d.attn_q.weight", l);
            ok &= s_type_of(go, n) == base;
            snprintf(n, sizeof n, "blk.%d.ffn_norm.weight", l);
            ok &= s_type_of(go, n) == QUANT_F32;
        }
        ok &= s_type_of(go, "token_embd.weight") == base;
        ok &= s_type_of(go, "output.weight") == (base == QUANT_Q8_0 ? QUANT_Q8_0 : QUANT_Q6_K);
        ok &= s_type_of(go, "output_norm.weight") == QUANT_F32;
        CHECK(ok, "%s: types per tensor follow llama_tensor_get_type", types[k]);
        /* the weights survive: a dequantized matrix is close to the input's */
        const gguf_tensor *ti = gguf_find_tensor(gi, "blk.2.ffn_up.weight");
        const gguf_tensor *to = gguf_find_tensor(go, "blk.2.ffn_up.weight");
        FILE *fi = fopen(in, "rb"), *fo = fopen(out, "rb");
        uint8_t *bi = malloc(ti->nbytes), *bo = malloc(to->nbytes);
        float *xi = malloc(ti->nbytes), *xo = malloc(ti->nbytes);
        fseek(fi, (long)ti->offset, SEEK_SET);
        fseek(fo, (long)to->offset, SEEK_SET);
        CHECK(fread(bi, 1, ti->nbytes, fi) == ti->nbytes && fread(bo, 1, to->nbytes, fo) ==
              to->nbytes, "read back");
        quant_dequantize_row(QUANT_F32, bi, xi, E * FF, err, sizeof err);
        quant_dequantize_row((quant_type)to->type, bo, xo, E * FF, err, sizeof err);
        double se = 0, sx = 0;
        for (int i = 0; i < E * FF; i++) {
            se += ((double)xi[i] - xo[i]) * ((double)xi[i] - xo[i]);
            sx += (double)xi[i] * xi[i];
        }
        /* 2 and 3 bits cost more: Q2_K ~0.23, Q3_K ~0.125 on these rows */
        const double lim = base == QUANT_Q2_K ? 0.3 : base == QUANT_Q3_K ? 0.16 : 0.12;
        CHECK(sqrt(se / sx) < lim, "%s: ffn_up rms error %.4f", types[k], sqrt(se / sx));
        printf("%-6s: %llu tensors, %llu quantized, %.2f MiB -> %.2f MiB, ffn_up rms error %.4f\n",
               types[k], (unsigned long long)st.tensors, (unsigned long long)st.quantized,
               st.bytes_in / 1048576.0, st.bytes_out / 1048576.0, sqrt(se / sx));
        free(bi);
        free(bo);
        free(xi);
        free(xo);
        fclose(fi);
        fclose(fo);
        gguf_close(&go);
        /* SWARM_REQUANT_KEEP=DIR keeps each output for other readers (llama.cpp) to load */
        const char *keep = getenv("SWARM_REQUANT_KEEP");
        if (keep) {
            char cmd[1200];
            snprintf(cmd, sizeof cmd, "cp '%s' '%s/llama-%s.gguf'", out, keep, types[k]);
            CHECK(system(cmd) == 0, "keep %s", types[k]);
        }
    }
    gguf_close(&gi);
    /* The file does not depend on the thread count. */
    char out1[512], out3[512];
    s_path(out1, sizeof out1, "llama-t1.gguf");
    s_path(out3, sizeof out3, "llama-t3.gguf");
    CHECK(requant_file(in, out1, "Q4_K_M", 1, 0, &st, err, sizeof err) == 0 &&
              requant_file(in, out3, "Q4_K_M", 3, 0, &st, err, sizeof err) == 0, "%s", err);
    char cmp[1200];
    snprintf(cmp, sizeof cmp, "cmp -s '%s' '%s'", out1, out3);
    CHECK(system(cmp) == 0, "1 and 3 threads write the same bytes");
    /* Grouped KV heads (n_gqa() 4): Q2_K's and the IQ4 mixes' attn_v take more bits. */
    s_kv_heads = 1;
    char ing[512];
    s_path(ing, sizeof ing, "llama-gqa.gguf");
    CHECK(s_make_llama(ing, E) == 0, "make gqa input");
    const char *gq[] = { "Q2_K", "IQ4_XS", "Q3_K_M" };
    for (int k = 0; k < 3; k++) {
        CHECK(requant_file(ing, out, gq[k], 1, 0, &st, err, sizeof err) == 0, "%s", err);
        gguf_file *go = gguf_open(out, err, sizeof err);
        int ok = go != NULL;
        for (int l = 0; ok && l < L; l++) {
            char n[64];
            snprintf(n, sizeof n, "blk.%d.attn_v.weight", l);
            ok &= s_type_of(go, n) == s_want(gq[k], "attn_v", l);
        }
        CHECK(ok, "%s with 4 heads per KV head: attn_v as llama.cpp", gq[k]);
        gguf_close(&go);
    }
    s_kv_heads = 4;
    /* Unknown type: named, with the list; the output is not created. */
    unlink(out);
    CHECK(requant_file(in, out, "Q3_K_XL", 2, 0, &st, err, sizeof err) == -1 &&
              strstr(err, "Q3_K_XL") && strstr(err, "Q4_K_M") && access(out, F_OK) != 0,
          "unknown type: %s", err);
}

/* Rows of 96 do not fit a 256-block: llama.cpp's fallbacks (Q4_K -> Q5_0, Q6_K -> Q8_0,
 * Q2_K / Q3_K -> Q4_0, IQ4_XS -> IQ4_NL; Q4_0 keeps Q4_0). */
static void test_fallback(void)
{
    char in[512], out[512], err[512];
    requant_stats st;
    s_path(in, sizeof in, "narrow.gguf");
    s_path(out, sizeof out, "narrow-q.gguf");
    CHECK(s_make_llama(in, 96) == 0, "make narrow input");
    CHECK(requant_file(in, out, "Q4_K_M", 2, 0, &st, err, sizeof err) == 0, "%s", err);
    gguf_file *go = gguf_open(out, err, sizeof err);
    CHECK(go && s_type_of(go, "blk.1.attn_q.weight") == QUANT_Q5_0 &&
              s_type_of(go, "blk.0.attn_v.weight") == QUANT_Q8_0 &&
              s_type_of(go, "output.weight") == QUANT_Q8_0 &&
              s_type_of(go, "blk.1.ffn_down.weight") == QUANT_Q4_K && st.fallbacks > 0,
          "96-wide rows: q4_K -> q5_0, q6_K -> q8_0 (%llu fallbacks); 512-wide ffn_down stays "
          "q4_K", (unsigned long long)st.fallbacks);
    gguf_close(&go);
    const char *mix[] = { "Q2_K", "Q3_K_M", "IQ4_XS", "Q5_K_M" };
    const uint32_t want[] = { QUANT_Q4_0, QUANT_Q4_0, QUANT_IQ4_NL, QUANT_Q5_1 };
    for (int k = 0; k < 4; k++) {
        CHECK(requant_file(in, out, mix[k], 1, 0, &st, err, sizeof err) == 0, "%s", err);
        go = gguf_open(out, err, sizeof err);
        CHECK(go && s_type_of(go, "blk.1.attn_q.weight") == want[k], "%s: 96-wide attn_q -> %s",
              mix[k], quant_type_name(want[k]));
        gguf_close(&go);
    }
}

/* Corrupt and missing inputs: clear errors naming the file; no output left behind. */
static void test_bad_inputs(void)
{
    char in[512], out[512], err[512];
    requant_stats st;
    s_path(in, sizeof in, "llama.gguf");
    s_path(out, sizeof out, "bad-q.gguf");
    CHECK(requant_file("/nonexistent/x.gguf", out, "Q8_0", 2, 0, &st, err, sizeof err) == -1 &&
              strstr(err, "/nonexistent/x.gguf"), "missing input: %s", err);
    char trunc[512];
    s_path(trunc, sizeof trunc, "trunc.gguf");
    FILE *fi = fopen(in, "rb"), *ft = fopen(trunc, "wb");
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, fi);
    fwrite(buf, 1, n / 2, ft);
    fclose(fi);
    fclose(ft);
    CHECK(requant_file(trunc, out, "Q8_0", 2, 0, &st, err, sizeof err) == -1 &&
              strstr(err, trunc) &&
              access(out, F_OK) != 0, "truncated input: %s", err);
    ft = fopen(trunc, "wb");
    fwrite("GGUF\x03\0\0\0garbage", 1, 15, ft);
    fclose(ft);
    CHECK(requant_file(trunc, out, "Q8_0", 2, 0, &st, err, sizeof err) == -1 && strstr(err, trunc),
          "garbage header: %s", err);
    /* an already-quantized input is not quantized twice */
    char q[512];
    s_path(q, sizeof q, "llama-q4.gguf");
    CHECK(requant_file(in, q, "Q4_0", 2, 0, &st, err, sizeof err) == 0, "%s", err);
    CHECK(requant_file(q, out, "Q8_0", 2, 0, &st, err, sizeof err) == -1 && strstr(err, "q4_0") &&
              strstr(err, "token_embd.weight"), "requantizing q4_0: %s", err);
}

/* Keys of every GGUF value type (scalars and arrays), written byte by byte, survive
 * gguf_writer_kv_copy: what `swarm quantize` relies on to keep every metadata key. */
static void s_put(FILE *f, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        fputc((int)((v >> (8 * i)) & 0xFF), f);
}

static void s_key(FILE *f, const char *k, uint32_t type)
{
    s_put(f, strlen(k), 8);
    fputs(k, f);
    s_put(f, type, 4);
}

static void test_every_kv_type(void)
{
    char in[512], out[512], err[512];
    s_path(in, sizeof in, "kvs.gguf");
    s_path(out, sizeof out, "kvs-copy.gguf");
    const uint32_t sizes[13] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
    FILE *f = fopen(in, "wb");
    s_put(f, GGUF_MAGIC, 4);
    s_put(f, 3, 4);
    s_put(f, 0, 8);   /* tensors */
    s_put(f, 22, 8);  /* kvs: 11 scalars + 11 arrays */
    double d = -2.5;
    uint64_t dbits;
    memcpy(&dbits, &d, 8);
    float fl = 0.1f;
    uint32_t fbits;
    memcpy(&fbits, &fl, 4);
    const uint64_t vals[13] = { 0xAB, 0xF6 /* -10 */, 0xBEEF, 0x8001, 0xDEADBEEF, 0xFFFFFFFE,
                                fbits, 1, 0, 0, 0x0123456789ABCDEFull, 0xFFFFFFFFFFFFFFF0ull,
                                dbits };
    char k[32];
    for (uint32_t t = 0; t < 13; t++) {
        if (t == GGUF_T_STRING || t == GGUF_T_ARRAY)
            continue;
        snprintf(k, sizeof k, "x.scalar%u", t);
        s_key(f, k, t);
        s_put(f, vals[t], (int)sizes[t]);
        snprintf(k, sizeof k, "x.array%u", t);
        s_key(f, k, GGUF_T_ARRAY);
        s_put(f, t, 4);
        s_put(f, 3, 8);
        for (int i = 0; i < 3; i++)
            s_put(f, t == GGUF_T_BOOL ? (uint64_t)(i & 1)
                                      : vals[t] - (uint64_t)i * (t < 6 || t > 9),
                  (int)sizes[t]);
    }
    s_key(f, "x.string", GGUF_T_STRING);
    s_put(f, 5, 8);
    fputs("hello", f);
    s_key(f, "x.strings", GGUF_T_ARRAY);
    s_put(f, GGUF_T_STRING, 4);
    s_put(f, 2, 8);
    s_put(f, 1, 8);
    fputs("a", f);
    s_put(f, 0, 8);
    fclose(f);
    gguf_file *gi = gguf_open(in, err, sizeof err);
    CHECK(gi != NULL && gi->n_kv == 22, "hand-written kvs open: %s", gi ? "" : err);
    if (!gi)
        return;
    gguf_writer *w = gguf_writer_new(32);
    for (uint64_t i = 0; i < gi->n_kv; i++)
        CHECK(gguf_writer_kv_copy(w, &gi->kv[i]) == 0, "copy %s", gi->kv[i].key);
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && gguf_writer_write_header(w, fd, err, sizeof err) == 0, "%s", err);
    if (fd >= 0)
        close(fd);
    gguf_writer_free(&w);
    gguf_file *go = gguf_open(out, err, sizeof err);
    CHECK(go != NULL, "copy opens: %s", err);
    if (go) {
        /* the copy has general.alignment besides: compare the other way round too */
        CHECK(go->n_kv == gi->n_kv + 1, "kv count %llu", (unsigned long long)go->n_kv);
        int same = 1;
        for (uint64_t i = 0; i < gi->n_kv; i++) {
            const gguf_kv *x = &gi->kv[i], *y = gguf_find_kv(go, x->key);
            same &= y && x->type == y->type && x->u64 == y->u64 && x->i64 == y->i64 &&
                    x->f64 == y->f64 && x->arr_type == y->arr_type && x->arr_n == y->arr_n;
            for (uint64_t j = 0; same && j < x->arr_n; j++)
                same &= (!x->arr_u64 || x->arr_u64[j] == y->arr_u64[j]) &&
                        (!x->arr_f64 || x->arr_f64[j] == y->arr_f64[j]) &&
                        (!x->arr_str || !strcmp(x->arr_str[j], y->arr_str[j]));
            same &= !x->str || !strcmp(x->str, y->str);
            if (!same) {
                fprintf(stderr, "kv %s differs\n", x->key);
                break;
            }
        }
        CHECK(same, "every value type copied exactly (u8..f64, bool, string, their arrays)");
    }
    gguf_close(&go);
    gguf_close(&gi);
}

/* The lab's dense model: its matrices quantized, norms kept, checksums over the new bytes. */
static void test_dense(void)
{
    char in[512], out[512], err[512];
    requant_stats st;
    s_path(in, sizeof in, "dense.gguf");
    s_path(out, sizeof out, "dense-q.gguf");
    CHECK(model_gen(in, 3, 256, 7, 32, err, sizeof err) == 0, "gen: %s", err);
    CHECK(requant_file(in, out, "Q8_0", 2, 0, &st, err, sizeof err) == 0, "%s", err);
    gguf_file *go = gguf_open(out, err, sizeof err);
    const gguf_kv *cs = go ? gguf_find_kv(go, "swarm.layer_checksums") : NULL;
    CHECK(cs && cs->arr_n == 3, "checksums present");
    FILE *fo = fopen(out, "rb");
    int ok = go && cs && fo;
    for (int l = 0; ok && l < 3; l++) {
        char n[32];
        XXH3_state_t xs;
        XXH3_64bits_reset(&xs);
        const char *kinds[2] = { "g", "w" };
        for (int k = 0; k < 2; k++) {
            snprintf(n, sizeof n, "blk.%d.%s", l, kinds[k]);
            const gguf_tensor *t = gguf_find_tensor(go, n);
            ok &= t && t->type == (k ? QUANT_Q8_0 : QUANT_F32);
            if (!ok)
                break;
            uint8_t *b = malloc(t->nbytes);
            fseek(fo, (long)t->offset, SEEK_SET);
            ok &= fread(b, 1, t->nbytes, fo) == t->nbytes;
            XXH3_64bits_update(&xs, b, t->nbytes);
            free(b);
        }
        ok &= XXH3_64bits_digest(&xs) == cs->arr_u64[l];
    }
    CHECK(ok, "dense: W is q8_0, g f32, checksums = xxh3 of the bytes as stored");
    if (fo)
        fclose(fo);
    gguf_close(&go);
}

int main(void)
{
    char tmpl[] = "/tmp/test_requant.XXXXXX";
    s_dir = mkdtemp(tmpl);
    if (!s_dir)
        return 1;
    /* SWARM_REQUANT_VOCAB=FILE.gguf: take a real tokenizer (e.g. the TinyLlama vocabulary of
     * tests/fixtures/tok) so llama.cpp can run the kept outputs, not only load them. */
    const char *vp = getenv("SWARM_REQUANT_VOCAB");
    char verr[256];
    if (vp) {
        s_vocab = gguf_open(vp, verr, sizeof verr);
        const gguf_kv *tk = s_vocab ? gguf_find_kv(s_vocab, "tokenizer.ggml.tokens") : NULL;
        CHECK(tk != NULL, "vocabulary %s: %s", vp, s_vocab ? "no tokens" : verr);
        if (tk)
            V = tk->arr_n;
    }
    test_llama_mixes();
    test_fallback();
    test_bad_inputs();
    test_dense();
    test_every_kv_type();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s_dir);
    gguf_close(&s_vocab);
    return CHECK_DONE("test_requant");
}

/* test_gemm.c — the batched kernels (quant/gemm*.c): every kernel family this CPU runs, and
 * the fallbacks always, give each (row, position) pair exactly the bits of the scalar
 * one-row dot product, for any batch size, row count and thread count: a position computed
 * alone is bit for bit the same position computed in a batch of 1..N. tests/ */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/gemm.h"
#include "quant/quant.h"
#include "tests/check.h"

static uint32_t s_seed = 12345;
static float s_unif(float lo, float hi)
{
    s_seed = s_seed * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(s_seed >> 8) / (float)(1u << 24);
}

static const quant_type s_types[] = { QUANT_F32,  QUANT_F16,  QUANT_BF16, QUANT_Q8_0,
                                      QUANT_Q4_0, QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K,
                                      QUANT_Q4_1, QUANT_Q5_0, QUANT_Q5_1, QUANT_IQ4_NL,
                                      QUANT_IQ4_XS };
#define S_NT (sizeof s_types / sizeof s_types[0])

/* One shape of one type: W (rows x cols, random), X (B x cols), every batch size 1..B
 * through quant_matmat against the scalar dots of each position's activation form. */
static int s_shape(quant_type t, uint64_t rows, uint64_t cols, uint64_t B, int threads,
                   const char *label)
{
    char err[256];
    uint64_t rb, ab;
    if (quant_row_bytes(t, cols, &rb, err, sizeof err) ||
        quant_act_bytes(t, cols, &ab, err, sizeof err))
        return 0;
    uint8_t *W = malloc(rows * rb), *act = malloc(ab);
    float *f = malloc(sizeof(float) * cols), *X = malloc(sizeof(float) * B * cols);
    float *ref = malloc(sizeof(float) * B * rows), *Y = malloc(sizeof(float) * B * rows);
    for (uint64_t r = 0; r < rows; r++) {
        for (uint64_t i = 0; i < cols; i++)
            f[i] = s_unif(-1.0f, 1.0f) * (i % 7 == 0 ? 3.0f : 1.0f);
        quant_quantize_row(t, f, W + r * rb, cols, err, sizeof err);
    }
    for (uint64_t i = 0; i < B * cols; i++)
        X[i] = s_unif(-2.0f, 2.0f);
    const quant_dot_fn dot = quant_dot_get(t, QUANT_ISA_SCALAR);
    for (uint64_t b = 0; b < B; b++) {
        quant_act_prepare_isa(QUANT_ISA_SCALAR, t, X + b * cols, cols, act, err, sizeof err);
        for (uint64_t r = 0; r < rows; r++)
            ref[b * rows + r] = dot(cols, W + r * rb, act);
    }
    int bad = 0;
    for (uint64_t n = 1; n <= B && !bad; n = n < 15 ? n + 1 : (n == B ? B + 1 : B)) {
        memset(Y, 0xFF, sizeof(float) * n * rows);
        if (quant_matmat(t, rows, cols, W, n, X, Y, threads, err, sizeof err)) {
            CHECK(0, "%s: %s", label, err);
            bad = 1;
            break;
        }
        for (uint64_t i = 0; i < n * rows && !bad; i++)
            if (memcmp(&Y[i], &ref[i], 4)) {
                CHECK(0, "%s %s %llu x %llu, batch %llu, %d threads: position %llu row %llu: "
                      "%.9g, alone %.9g", label, quant_type_name(t), (unsigned long long)rows,
                      (unsigned long long)cols, (unsigned long long)n, threads,
                      (unsigned long long)(i / rows), (unsigned long long)(i % rows),
                      (double)Y[i], (double)ref[i]);
                bad = 1;
            }
    }
    CHECK(!bad, "%s %s", label, quant_type_name(t));
    free(W);
    free(act);
    free(f);
    free(X);
    free(ref);
    free(Y);
    return 1;
}

/* Every type over shapes that reach the tiles' edges: one group of blocks, a row length whose
 * blocks are not whole groups (the kernels decline it), odd row counts, batches past a tile. */
static void s_all(const char *label, quant_isa isa)
{
    static const uint64_t cols_list[] = { 256, 1024 + 256, 2048, 32 * 9 * 4 };
    /* 25: one 16-row group then 9 rows (AVX-512), 16 + 8 + 1 (256 bits): the narrow groups */
    static const uint64_t rows_list[] = { 1, 3, 25, 37 };
    int shapes = 0;
    for (size_t k = 0; k < S_NT; k++)
        for (size_t c = 0; c < sizeof cols_list / sizeof cols_list[0]; c++)
            for (size_t m = 0; m < sizeof rows_list / sizeof rows_list[0]; m++)
                shapes += s_shape(s_types[k], rows_list[m], cols_list[c],
                                  rows_list[m] >= 25 ? 13 : 6, rows_list[m] == 37 ? 2 : 1,
                                  label);
    /* a long row, a batch of a prompt's size, three threads */
    for (size_t k = 0; k < S_NT; k++)
        shapes += s_shape(s_types[k], 66, 5632 / 256 * 256, 19, 3, label);
    /* the K-quants' tiles of 24 positions (gemm_k_avx512.c's K4_P): batches past two tiles,
     * odd and even, with a row count past the 2-row tiles */
    shapes += s_shape(QUANT_Q4_K, 7, 2048, 53, 2, label);
    shapes += s_shape(QUANT_Q5_K, 7, 2048, 53, 2, label);
    shapes += s_shape(QUANT_Q6_K, 7, 2048, 53, 2, label);
    /* gemm_x_avx2.c's tiles of 8 positions: 53 = 6 x 8 + 5; blocks of 32 whose last group of
     * four is partial (9 blocks: 2 + 1; 90, gpt-oss's 2880: 22 + 2), super-blocks not whole
     * groups of four (1280: 5) */
    static const quant_type xs[] = { QUANT_Q4_1, QUANT_Q5_0, QUANT_Q5_1, QUANT_IQ4_NL,
                                     QUANT_IQ4_XS };
    for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
        shapes += s_shape(xs[k], 7, 2048, 53, 2, label);
        shapes += s_shape(xs[k], 5, 1280, 53, 1, label);
        shapes += s_shape(xs[k], 9, 32 * 9, 21, 2, label);
        shapes += s_shape(xs[k], 6, 2880, 11, 1, label);
    }
    /* the float types' widened panels (gemm_f_avx512.c, from 16 positions): several panels a
     * share with a short last one (4 x 32 + 22 rows of 2048), a long row in chunks (12 + 12 +
     * 11 rows of 5376 a share, chunks of 5 x 1024 + 256), edges of the row and position
     * tiles */
    static const quant_type floats[] = { QUANT_F16, QUANT_BF16 };
    for (size_t k = 0; k < 2; k++) {
        shapes += s_shape(floats[k], 150, 2048, 20, 1, label);
        shapes += s_shape(floats[k], 70, 5632 / 256 * 256, 17, 2, label);
    }
    printf("%s (isa %s): %d shapes, batches 1..N = each position alone (scalar dots)\n", label,
           quant_isa_name(isa), shapes);
}

/* The K-quants' activation form: every ISA's bytes are the scalar reference's (ggml's
 * quantize_row_q8_K_ref), on random rows and on the cases its max and rounding turn on: a max
 * reached twice with both signs, exact halves after scaling, zeros, tiny values. */
static void s_q8_K_forms(void)
{
    enum { N = 1024 };
    static float x[N];
    static uint8_t a[8192], b[8192];
    char err[256];
    int same = 1, cases = 0;
    for (int k = 0; k < 40; k++) {
        for (int i = 0; i < N; i++)
            x[i] = s_unif(-1.0f, 1.0f) * (k % 4 == 1 ? 1e-30f : 1.0f);
        if (k % 5 == 2) { /* the max twice, negative first, then positive */
            x[17] = -1.5f;
            x[200] = 1.5f;
        }
        if (k % 5 == 3) /* a zero super-block */
            memset(x + 256, 0, 256 * sizeof(float));
        if (k % 5 == 4) /* values that scale to exact halves: 127 / 1.0 * (j + 0.5) / 127 */
            for (int i = 0; i < 256; i++)
                x[i] = (float)(i % 254 - 127) / 254.0f + (i == 0 ? 1.0f : 0.0f);
        for (int isa = 1; isa < QUANT_ISA_COUNT; isa++) {
            if (!quant_dot_get(QUANT_Q4_K, (quant_isa)isa))
                continue;
            memset(a, 0, sizeof a);
            memset(b, 0xA5, sizeof b);
            quant_act_prepare_isa(QUANT_ISA_SCALAR, QUANT_Q4_K, x, N, a, err, sizeof err);
            quant_act_prepare_isa((quant_isa)isa, QUANT_Q4_K, x, N, b, err, sizeof err);
            uint64_t ab;
            quant_act_bytes(QUANT_Q4_K, N, &ab, err, sizeof err);
            same &= !memcmp(a, b, ab);
            cases++;
        }
    }
    CHECK(same, "Q8_K activation forms: every ISA = the scalar reference, byte for byte");
    printf("Q8_K activation forms: %d cases, every ISA = scalar\n", cases);
}

int main(void)
{
    s_q8_K_forms();
    static const struct {
        int kind;
        const char *name;
        quant_isa isa;
    } runs[] = {
        { QUANT_GEMM_NONE, "fallback (no batched kernel)", QUANT_ISA_SCALAR },
        { QUANT_GEMM_AVX2, "avx2 batched kernels", QUANT_ISA_AVX2 },
        { QUANT_GEMM_AVXVNNI, "avx-vnni batched kernels", QUANT_ISA_AVX2 },
        { QUANT_GEMM_AVX512, "avx-512 vnni batched kernels", QUANT_ISA_AVX512 },
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        if (quant_gemm_force(runs[i].kind) || quant_isa_set(runs[i].isa)) {
            printf("SKIP %s: this CPU cannot run it\n", runs[i].name);
            continue;
        }
        s_all(runs[i].name, runs[i].isa);
        if (runs[i].kind == QUANT_GEMM_NONE && !quant_isa_set(QUANT_ISA_AVX512))
            s_all("fallback tiles (no batched kernel)", QUANT_ISA_AVX512);
    }
    /* the K-quants' AVX2 kernels (gemm_k_avx2.c) and quant_x.h's blocks of 32 and IQ4_XS's
     * (gemm_x_avx2.c) are registered, so the AVX2 run above held them, not the fallback, to
     * the scalar bits */
    if (!quant_gemm_force(QUANT_GEMM_AVX2)) {
        static const quant_type k[] = { QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K,
                                        QUANT_Q4_1, QUANT_Q5_0, QUANT_Q5_1, QUANT_IQ4_NL,
                                      QUANT_IQ4_XS };
        for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
            CHECK(quant_gemm_get_kind(k[i], QUANT_GEMM_AVX2) != NULL, "%s: an avx2 batched kernel",
                  quant_type_name(k[i]));
    }
    /* which kernel each type gets by default here (informational) */
    quant_gemm_force(QUANT_GEMM_AUTO);
    quant_isa_set(quant_isa_best());
    for (size_t k = 0; k < S_NT; k++) {
        const quant_gemm *g = quant_gemm_get(s_types[k]);
        printf("  %s: %s\n", quant_type_name(s_types[k]), g ? g->name : "rows (no batched kernel)");
    }
    quant_pool_shutdown();
    return CHECK_DONE("test_gemm");
}

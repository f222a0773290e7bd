/* test_mxfp4.c — MXFP4 (gpt-oss's expert type): layout, ggml's bytes, scalar vs SIMD, threads,
 * batching. tests/
 *
 * Known answers are ggml's own: tests/mxfp4_kat.py calls ggml's quantize_mxfp4 and
 * dequantize_row_mxfp4 in a built libggml-base.so on fixed inputs (every branch of the
 * quantizer: ties, powers of two, wrapped exponents, huge and tiny blocks) and commits the
 * bytes and a hash of the floats as tests/mxfp4_kat.h. Dot products are held to the scalar
 * reference bit for bit on every ISA this machine runs and every thread count, and the scalar
 * reference to the exact (double) dot product of the dequantized row with the activation.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/mxfp4.h"
#include "quant/quant.h"
#include "tests/check.h"
#include "tests/mxfp4_kat.h"
#include "tests/quant_test.h"

static void test_table(void)
{
    char err[256];
    uint64_t b;
    const quant_type_info *ti = quant_type_get(39);
    CHECK(ti && ti->type == QUANT_MXFP4 && ti->block == 32 && ti->block_bytes == 17 &&
              !strcmp(ti->name, "mxfp4") && !strcmp(quant_type_name(39), "mxfp4"),
          "mxfp4 (ggml id 39) in the table: 32 elements in 17 bytes");
    CHECK(quant_row_bytes(QUANT_MXFP4, 2880, &b, err, sizeof err) == 0 && b == 2880 / 32 * 17,
          "a gpt-oss row of 2880: %llu bytes", (unsigned long long)b);
    CHECK(quant_row_bytes(QUANT_MXFP4, 2880 + 16, &b, err, sizeof err) == -1 &&
              strstr(err, "mxfp4") && strstr(err, "2896"), "row of 2896 rejected: %s", err);
    quant_type t;
    CHECK(quant_type_parse("MXFP4", &t, err, sizeof err) == 0 && t == QUANT_MXFP4, "parse");
    CHECK(strstr(quant_type_list(), "mxfp4") != NULL, "listed");
    CHECK(quant_act_type(QUANT_MXFP4) == QUANT_Q8_0, "meets Q8_0 (ggml's vec_dot_type)");
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++)
        CHECK((quant_dot_get(QUANT_MXFP4, (quant_isa)isa) != NULL) ==
                  (quant_dot_get(QUANT_Q4_0, (quant_isa)isa) != NULL),
              "an %s kernel wherever Q4_0 has one", quant_isa_name((quant_isa)isa));
    /* the scale: 2^(e - 128), the two subnormals and the largest */
    CHECK(quant_e8m0_half(0) == 0x1p-128f && quant_e8m0_half(1) == 0x1p-127f &&
              quant_e8m0_half(128) == 1.0f && quant_e8m0_half(254) == 0x1p126f &&
              quant_e8m0_half(255) == 0x1p127f, "e8m0 halves");
}

static void test_known_answers(void)
{
    char err[256];
    static float x[MKAT_N], y[MKAT_N];
    static uint8_t buf[MKAT_N];
    _Static_assert(sizeof kat_in + sizeof mkat_edge == sizeof x, "kat_in, then the edge blocks");
    memcpy(x, kat_in, sizeof kat_in);
    memcpy(x + KAT_IN_N, mkat_edge, sizeof mkat_edge);
    memset(buf, 0xA5, sizeof buf);
    CHECK(quant_quantize_row(QUANT_MXFP4, x, buf, MKAT_N, err, sizeof err) == 0, "%s", err);
    const size_t first = qtest_first_diff(buf, mkat_mxfp4, sizeof mkat_mxfp4);
    CHECK(first == sizeof mkat_mxfp4, "bytes = ggml's quantize_mxfp4 (first difference at "
          "byte %zu, block %zu)", first, first / 17);
    CHECK(quant_dequantize_row(QUANT_MXFP4, mkat_mxfp4, y, MKAT_N, err, sizeof err) == 0 &&
              qtest_fnv(y, sizeof y) == MKAT_MXFP4_DEQ,
          "dequantized = ggml's dequantize_row_mxfp4");
    /* every exponent byte with mixed nibbles */
    static uint8_t all[256 * 17];
    static float ya[256 * 32];
    for (int e = 0; e < 256; e++) {
        all[e * 17] = (uint8_t)e;
        for (int j = 0; j < 16; j++)
            all[e * 17 + 1 + j] = (uint8_t)(((e * 16 + j) * 37 + 11) & 0xFF);
    }
    CHECK(quant_dequantize_row(QUANT_MXFP4, all, ya, 256 * 32, err, sizeof err) == 0 &&
              qtest_fnv(ya, sizeof ya) == MKAT_ALL_E_DEQ, "every exponent = ggml's");
    x[300] = NAN;
    CHECK(quant_quantize_row(QUANT_MXFP4, x, buf, MKAT_N, err, sizeof err) == -1 &&
              strstr(err, "element 300"), "nan rejected: %s", err);
}

/* Random rows (every nibble and a spread of exponents) against random activations. */
static void test_simd_vs_scalar(void)
{
    char err[256];
    enum { NMAX = 4096 + 512 };
    _Alignas(32) static uint8_t w[NMAX], act[NMAX * 8];
    static float x[NMAX], wd[NMAX];
    const uint64_t ns[] = { 32, 64, 96, 128, 160, 256, 2880, 4096 + 96 };
    int compared = 0;
    double worst = 0;
    for (size_t m = 0; m < sizeof ns / sizeof ns[0]; m++) {
        const uint64_t n = ns[m], nb = n / 32;
        for (int rep = 0; rep < 20; rep++) {
            for (uint64_t i = 0; i < nb * 17; i++)
                w[i] = (uint8_t)qtest_next();
            /* exponents near 1 mostly; every fourth row the subnormal scales (e 0, 1) and
             * their neighbours, every other fourth any exponent up to 2^71 */
            for (uint64_t b = 0; b < nb; b++)
                w[b * 17] = (uint8_t)(rep % 4 == 1   ? qtest_next() % 4
                                      : rep % 4 == 2 ? qtest_next() % 200
                                                     : 118 + qtest_next() % 20);
            for (uint64_t i = 0; i < n; i++)
                x[i] = qtest_unif(-1.0f, 1.0f) * (rep % 3 == 0 ? 100.0f : 1.0f) *
                       (i % 97 == 0 ? 20.0f : 1.0f);
            CHECK(quant_act_prepare(QUANT_MXFP4, x, n, act, err, sizeof err) == 0, "%s", err);
            char what[64];
            snprintf(what, sizeof what, "mxfp4 n=%llu rep %d", (unsigned long long)n, rep);
            const float r = qtest_dot_isas(QUANT_MXFP4, n, w, act, what, &compared);
            quant_dequantize_row(QUANT_MXFP4, w, wd, n, err, sizeof err);
            const quant_act_q8 y = quant_act_view(act, n);
            double exact = 0, mag = 0;
            for (uint64_t i = 0; i < n; i++) {
                const double xv = (double)y.qs[i] * y.d[i / 32];
                exact += (double)wd[i] * xv;
                mag += fabs((double)wd[i] * xv);
            }
            const double e = fabs((double)r - exact) / (mag * 0x1p-24 * (double)(nb * 4 + 8));
            worst = e > worst ? e : worst;
            CHECK(e <= 1.0, "n=%llu: scalar %g vs exact %g", (unsigned long long)n, (double)r,
                  exact);
        }
    }
    printf("mxfp4 simd vs scalar: %d rows bit for bit (best ISA here: %s); scalar vs exact: "
           "worst %.3f of the f32 bound\n", compared, quant_isa_name(quant_isa_best()), worst);
}

/* matvec for 1..3 threads and matmat on every ISA = the scalar dots. */
static void test_products(void)
{
    char err[256];
    enum { C = 2880, R = 37, B = 5 };
    static uint8_t W[R * C];
    static float f[C], X[B * C], yv[R], Y[B * R], ref[B][R];
    _Alignas(32) static uint8_t act[C * 8];
    uint64_t rb;
    quant_row_bytes(QUANT_MXFP4, C, &rb, err, sizeof err);
    for (uint64_t r = 0; r < R; r++) {
        for (int i = 0; i < C; i++)
            f[i] = qtest_unif(-1.0f, 1.0f) * (r % 2 ? 3.0f : 0.1f);
        CHECK(quant_quantize_row(QUANT_MXFP4, f, W + r * rb, C, err, sizeof err) == 0, "%s", err);
    }
    for (int i = 0; i < B * C; i++)
        X[i] = qtest_unif(-1.0f, 1.0f);
    for (int b = 0; b < B; b++) {
        quant_act_prepare_isa(QUANT_ISA_SCALAR, QUANT_MXFP4, X + b * C, C, act, err, sizeof err);
        for (uint64_t r = 0; r < R; r++)
            ref[b][r] = quant_dot_mxfp4_scalar(C, W + r * rb, act);
    }
    const quant_isa best = quant_isa_current();
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
        if (quant_isa_set((quant_isa)isa))
            continue;
        for (int th = 1; th <= 3; th++) {
            CHECK(quant_matvec(QUANT_MXFP4, R, C, W, X, yv, th, err, sizeof err) == 0, "%s", err);
            CHECK(!memcmp(yv, ref[0], sizeof yv), "%s matvec %d threads = scalar dots",
                  quant_isa_name((quant_isa)isa), th);
        }
        CHECK(quant_matmat(QUANT_MXFP4, R, C, W, B, X, Y, 2, err, sizeof err) == 0, "%s", err);
        CHECK(!memcmp(Y, ref, sizeof Y), "%s matmat of %d = scalar dots",
              quant_isa_name((quant_isa)isa), B);
    }
    quant_isa_set(best);
}

int main(void)
{
    qtest_seed(0x243f6a8885a308d3ull);
    test_table();
    test_known_answers();
    test_simd_vs_scalar();
    test_products();
    quant_pool_shutdown();
    return CHECK_DONE("test_mxfp4");
}

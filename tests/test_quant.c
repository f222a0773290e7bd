/* test_quant.c — tensor types: layouts, known answers, scalar vs SIMD, threads, batching. tests/
 *
 * Known answers come from tests/quant_kat.py (an independent Python implementation; its
 * output is committed as tests/quant_kat.h). Scalar and SIMD dot products are held to the
 * same bits: quant.h fixes one order of float operations that every implementation follows,
 * and the integer parts are exact, so no tolerance is needed anywhere a bit-for-bit claim is
 * made.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "quant/quant.h"
#include "tests/check.h"
#include "tests/quant_kat.h"
#include "tests/quant_test.h"

/* Room for any type's activation form of n elements (quant_act_bytes is at most ~4.2 n). */
#define ACT_ROOM(n) (5 * (n) + 256)

static float s_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_table(void)
{
    char err[256];
    uint64_t b = 0;
    const quant_type_info *q8 = quant_type_get(8), *q4 = quant_type_get(2);
    CHECK(q8 && q8->block == 32 && q8->block_bytes == 34 && !strcmp(q8->name, "q8_0"), "q8_0");
    CHECK(q4 && q4->block == 32 && q4->block_bytes == 18 && !strcmp(q4->name, "q4_0"), "q4_0");
    CHECK(quant_type_get(30) && quant_type_get(30)->block_bytes == 2, "bf16");
    CHECK(quant_type_get(16) == NULL && !strcmp(quant_type_name(16), "iq2_xxs"), "iq2_xxs unsupported");
    CHECK(!strcmp(quant_type_name(1000), "unknown"), "past the enum");
    quant_type t;
    CHECK(quant_type_parse("Q8_0", &t, err, sizeof err) == 0 && t == QUANT_Q8_0, "parse");
    CHECK(quant_type_parse("iq2_xs", &t, err, sizeof err) == -1 && strstr(err, "iq2_xs"), "%s",
          err);

    CHECK(quant_row_bytes(QUANT_Q8_0, 64, &b, err, sizeof err) == 0 && b == 68, "q8_0 row");
    CHECK(quant_row_bytes(QUANT_Q4_0, 2048, &b, err, sizeof err) == 0 && b == 1152, "q4_0 row");
    CHECK(quant_row_bytes(QUANT_F16, 7, &b, err, sizeof err) == 0 && b == 14, "f16 row");
    CHECK(quant_row_bytes(QUANT_Q4_0, 100, &b, err, sizeof err) == -1 &&
              strstr(err, "q4_0") && strstr(err, "100") && strstr(err, "32-element"),
          "bad length: %s", err);
    CHECK(quant_row_bytes((quant_type)16, 256, &b, err, sizeof err) == -1 && strstr(err, "iq2_xxs"),
          "%s", err);
    CHECK(quant_row_bytes(QUANT_F32, 1ull << 62, &b, err, sizeof err) == -1 &&
              strstr(err, "too large"), "row overflow: %s", err);
    CHECK(quant_tensor_bytes(QUANT_Q8_0, 1ull << 60, 64, &b, err, sizeof err) == -1 &&
              strstr(err, "too large"), "tensor overflow: %s", err);
    CHECK(quant_tensor_bytes(QUANT_Q8_0, 5632, 2048, &b, err, sizeof err) == 0 &&
              b == 5632ull * 64 * 34, "ffn tensor");
}

static void test_conversions(void)
{
    int bad = 0;
    for (size_t i = 0; i < sizeof kat_f16 / sizeof kat_f16[0]; i += 2) {
        uint16_t h = quant_f32_to_f16(s_f(kat_f16[i]));
        if (h != kat_f16[i + 1]) {
            bad++;
            fprintf(stderr, "f16(%08x) = %04x, expected %04x\n", kat_f16[i], h,
                    kat_f16[i + 1]);
        }
        /* Widening is exact: back to the same half. */
        if (quant_f32_to_f16(quant_f16_to_f32(h)) != h)
            bad++;
    }
    CHECK(bad == 0, "%d f16 conversions differ from the known answers", bad);
    bad = 0;
    for (size_t i = 0; i < sizeof kat_bf16 / sizeof kat_bf16[0]; i += 2) {
        uint16_t h = quant_f32_to_bf16(s_f(kat_bf16[i]));
        if (h != kat_bf16[i + 1]) {
            bad++;
            fprintf(stderr, "bf16(%08x) = %04x, expected %04x\n", kat_bf16[i], h,
                    kat_bf16[i + 1]);
        }
        if (qtest_bits(quant_bf16_to_f32(h)) != (uint32_t)h << 16)
            bad++;
    }
    CHECK(bad == 0, "%d bf16 conversions differ from the known answers", bad);
}

/* Blocks worked out by hand from ggml-common.h's layouts and the reference quantizers. */
static void test_hand_blocks(void)
{
    char err[256];
    float x[32];
    /* Q4_0: x[0] = -8 is the largest magnitude, so d = -8 / -8 = 1 (f16 0x3c00), id = 1 and
     * q = x + 8. x[j] = j - 8 for j < 16 gives low nibble j; x[16+j] = 7 - j gives high
     * nibble 15 - j: byte j = j | (15 - j) << 4. */
    for (int j = 0; j < 16; j++) {
        x[j] = (float)(j - 8);
        x[16 + j] = (float)(7 - j);
    }
    uint8_t q4[18], want4[18] = { 0x00, 0x3c };
    for (int j = 0; j < 16; j++)
        want4[2 + j] = (uint8_t)(j | (15 - j) << 4);
    CHECK(quant_quantize_row(QUANT_Q4_0, x, q4, 32, err, sizeof err) == 0, "%s", err);
    CHECK(!memcmp(q4, want4, 18), "q4_0 hand block: byte 2 %02x (want f0), byte 17 %02x (0f)",
          q4[2], q4[17]);
    float y[32];
    CHECK(quant_dequantize_row(QUANT_Q4_0, q4, y, 32, err, sizeof err) == 0 &&
              !memcmp(x, y, sizeof x), "q4_0 hand block dequantizes exactly");

    /* Q8_0: amax = 127 gives d = 1 (f16 0x3c00), id = 1, q = roundf(x): halves go away from
     * zero (2.5 -> 3, -2.5 -> -3, 0.5 -> 1, 126.5 -> 127), unlike round-half-even. */
    const float in8[8] = { 127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, 126.5f, -0.49999997f };
    const int8_t want8[8] = { 127, 3, -3, 1, -1, 2, 127, 0 };
    memset(x, 0, sizeof x);
    memcpy(x, in8, sizeof in8);
    x[31] = -127.0f;
    quant_block_q8_0 b8;
    CHECK(quant_quantize_row(QUANT_Q8_0, x, &b8, 32, err, sizeof err) == 0, "%s", err);
    uint8_t raw[34];
    memcpy(raw, &b8, 34);
    CHECK(raw[0] == 0x00 && raw[1] == 0x3c, "q8_0 d bytes %02x %02x", raw[0], raw[1]);
    CHECK(!memcmp(b8.qs, want8, 8) && b8.qs[31] == -127 && b8.qs[8] == 0, "q8_0 hand quants");

    /* A block of zeros: q4_0's d = max / -8 = 0 / -8 is -0 (f16 0x8000, as ggml writes it),
     * id = 0, every nibble 8; q8_0's d = +0. */
    memset(x, 0, sizeof x);
    CHECK(quant_quantize_row(QUANT_Q4_0, x, q4, 32, err, sizeof err) == 0 && q4[0] == 0 &&
              q4[1] == 0x80 && q4[2] == 0x88 && q4[17] == 0x88, "q4_0 zero block: %02x%02x %02x",
          q4[1], q4[0], q4[2]);
    CHECK(quant_quantize_row(QUANT_Q8_0, x, &b8, 32, err, sizeof err) == 0 && b8.d == 0 &&
              b8.qs[0] == 0, "q8_0 zero block");
}

static void test_known_answers(void)
{
    char err[256];
    float x[KAT_N], act[KAT_N];
    /* Blocks hold uint16 scales: keep the buffers the kernels read 2-aligned (or more). */
    _Alignas(32) uint8_t q8[KAT_N / 32 * 34], q4[KAT_N / 32 * 18], aq[KAT_N / 32 * 34];
    _Alignas(32) static uint8_t form[ACT_ROOM(KAT_N)];
    uint64_t fb = 0;
    for (int i = 0; i < KAT_N; i++) {
        x[i] = s_f(kat_x[i]);
        act[i] = s_f(kat_act[i]);
    }
    CHECK(quant_quantize_row(QUANT_Q8_0, x, q8, KAT_N, err, sizeof err) == 0 &&
              !memcmp(q8, kat_q8_0, sizeof q8), "q8_0 bytes = quantize_row_q8_0_ref's");
    CHECK(quant_quantize_row(QUANT_Q4_0, x, q4, KAT_N, err, sizeof err) == 0 &&
              !memcmp(q4, kat_q4_0, sizeof q4), "q4_0 bytes = quantize_row_q4_0_ref's");
    CHECK(quant_quantize_row(QUANT_Q8_0, act, aq, KAT_N, err, sizeof err) == 0 &&
              !memcmp(aq, kat_act_q8_0, sizeof aq), "activation q8_0 bytes");
    /* The activation form holds the same numbers as those Q8_0 blocks, rearranged. */
    CHECK(quant_act_bytes(QUANT_Q4_0, KAT_N, &fb, err, sizeof err) == 0 && fb <= sizeof form &&
              quant_act_prepare(QUANT_Q4_0, act, KAT_N, form, err, sizeof err) == 0, "%s", err);
    quant_act_q8 v = quant_act_view(form, KAT_N);
    int same = 1;
    const int nb = KAT_N / 32;
    for (int b = 0; b < nb; b++) {
        quant_block_q8_0 blk; /* copied: the byte array need not be 2-aligned */
        memcpy(&blk, kat_act_q8_0 + 34 * b, sizeof blk);
        same &= !memcmp(v.qs + 32 * b, blk.qs, 32) && v.d[b] == quant_f16_to_f32(blk.d);
        /* Q4_0's grouped copy: a group's (here: k = nb - 4g blocks) elements 0..15, block
         * after block, then their elements 16..31; its bias lanes 4p + q and 16 + 4p + q. */
        const int g = b / 4, p = b % 4, k = nb - 4 * g < 4 ? nb - 4 * g : 4;
        same &= !memcmp(v.qs4 + 128 * g + 16 * p, blk.qs, 16) &&
                !memcmp(v.qs4 + 128 * g + 16 * k + 16 * p, blk.qs + 16, 16);
        for (int q = 0; q < 8; q++) {
            int sum = blk.qs[4 * q] + blk.qs[4 * q + 1] + blk.qs[4 * q + 2] + blk.qs[4 * q + 3];
            int lane = q < 4 ? 4 * p + q : 16 + 4 * p + q - 4;
            same &= v.bias128[8 * b + q] == -128 * sum && v.bias8[32 * g + lane] == -8 * sum;
        }
    }
    CHECK(same, "activation form = the known Q8_0 blocks");

    uint16_t w16[KAT_NF], wbf[KAT_NF];
    quant_quantize_row(QUANT_F16, x, w16, KAT_NF, err, sizeof err);
    quant_quantize_row(QUANT_BF16, x, wbf, KAT_NF, err, sizeof err);
    const struct { quant_type t; uint64_t n; const void *w, *a; } c[5] = {
        { QUANT_F32, KAT_NF, x, act }, { QUANT_F16, KAT_NF, w16, act },
        { QUANT_BF16, KAT_NF, wbf, act }, { QUANT_Q8_0, KAT_N, q8, form },
        { QUANT_Q4_0, KAT_N, q4, form },
    };
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
        for (int k = 0; k < 5; k++) {
            quant_dot_fn f = quant_dot_get(c[k].t, (quant_isa)isa);
            if (!f)
                continue;
            float r = f(c[k].n, c[k].w, c[k].a);
            CHECK(qtest_bits(r) == kat_dot[k], "%s %s dot %a, known answer %a",
                  quant_isa_name((quant_isa)isa), quant_type_name(c[k].t), (double)r,
                  (double)s_f(kat_dot[k]));
        }
    }
    /* The ordered f32 sums stay close to the exact rational value: a sanity bound of 1e-5
     * relative (205 terms of magnitude <= 127 * 4: rounding error is ~1e-6 relative). */
    for (int k = 0; k < 3; k++)
        CHECK(fabs(s_f(kat_dot[k]) - kat_dot_exact[k]) <= 1e-5 * fabs(kat_dot_exact[k]) + 1e-4,
              "type %d: %g vs exact %g", k, (double)s_f(kat_dot[k]), kat_dot_exact[k]);
}

/* Quantize-dequantize error per type on random rows, against each type's stated bound. */
static void test_round_trip(void)
{
    enum { N = 4096 };
    char err[256];
    static float x[N], y[N];
    _Alignas(32) static uint8_t buf[N * 4];
    for (int i = 0; i < N; i++)
        x[i] = qtest_unif(-3.0f, 3.0f) * (i % 64 == 0 ? 10.0f : 1.0f);
    const quant_type ts[] = { QUANT_F32, QUANT_F16, QUANT_BF16, QUANT_Q8_0, QUANT_Q4_0 };
    for (size_t k = 0; k < 5; k++) {
        quant_type t = ts[k];
        CHECK(quant_quantize_row(t, x, buf, N, err, sizeof err) == 0 &&
                  quant_dequantize_row(t, buf, y, N, err, sizeof err) == 0, "%s", err);
        double worst = 0; /* error / bound, over all elements */
        for (int i = 0; i < N; i++) {
            double e = fabs((double)x[i] - y[i]), bound;
            if (t == QUANT_F32) {
                bound = 0;
            } else if (t == QUANT_F16) {
                bound = fabs(x[i]) * 0x1p-11; /* half an ulp of an 11-bit significand */
            } else if (t == QUANT_BF16) {
                bound = fabs(x[i]) * 0x1p-8;  /* half an ulp of an 8-bit significand */
            } else {
                float amax = 0;
                for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++)
                    amax = fmaxf(amax, fabsf(x[j]));
                /* Q8_0: half a step d = amax/127, plus d's own f16 rounding times |q| <= 127.
                 * Q4_0: d = amax/8 and the largest value of the other sign maps to +8,
                 * clamped to 7: up to a whole step there, half a step elsewhere. */
                double d = t == QUANT_Q8_0 ? amax / 127.0 : amax / 8.0;
                double qmax = t == QUANT_Q8_0 ? 127 : 8;
                bound = (t == QUANT_Q8_0 ? 0.5 : 1.0) * d + qmax * d * 0x1p-11 + 1e-7;
            }
            if (bound == 0 ? e > 0 : e / bound > worst)
                worst = bound == 0 ? 1e9 : e / bound;
        }
        CHECK(worst <= 1.0, "%s round trip: error %.3f x its bound", quant_type_name(t), worst);
        printf("round trip %-5s worst error / bound %.3f\n", quant_type_name(t), worst);
    }
    float bad[32] = { 0 };
    bad[7] = NAN;
    CHECK(quant_quantize_row(QUANT_Q8_0, bad, buf, 32, err, sizeof err) == -1 &&
              strstr(err, "element 7"), "NaN rejected: %s", err);
}

/* Fill a row of type t with random content: quantized types get raw random quants (every
 * byte value, -128 included) and random scales, so SIMD meets inputs no quantizer makes. */
static void s_random_row(quant_type t, uint64_t n, void *w, float *f)
{
    char err[256];
    for (uint64_t i = 0; i < n; i++)
        f[i] = qtest_unif(-2.0f, 2.0f);
    if (t == QUANT_Q8_0 || t == QUANT_Q4_0) {
        uint8_t *p = w;
        uint64_t bytes;
        quant_row_bytes(t, n, &bytes, err, sizeof err);
        uint64_t bb = t == QUANT_Q8_0 ? 34 : 18;
        for (uint64_t i = 0; i < bytes; i++)
            p[i] = (uint8_t)qtest_next();
        for (uint64_t b = 0; b < bytes / bb; b++) { /* finite scales in [2^-10, 2) */
            uint16_t d = quant_f32_to_f16(qtest_unif(-2.0f, 2.0f) + 0x1p-10f);
            memcpy(p + b * bb, &d, 2);
        }
    } else {
        quant_quantize_row(t, f, w, n, err, sizeof err);
    }
}

static void test_simd_vs_scalar(void)
{
    char err[256];
    const quant_type ts[] = { QUANT_F32, QUANT_F16, QUANT_BF16, QUANT_Q8_0, QUANT_Q4_0 };
    const uint64_t ns[] = { 32, 64, 96, 128, 160, 224, 2048, 5632, 1, 7, 31, 33, 77, 2050 };
    _Alignas(32) static uint8_t w[5632 * 4], act[ACT_ROOM(5632)];
    static float f[5632], x[5632];
    int compared = 0;
    for (size_t k = 0; k < 5; k++) {
        quant_dot_fn ref = quant_dot_get(ts[k], QUANT_ISA_SCALAR);
        uint32_t blk = quant_type_get(ts[k])->block;
        for (size_t m = 0; m < sizeof ns / sizeof ns[0]; m++) {
            if (ns[m] % blk)
                continue;
            for (int rep = 0; rep < 20; rep++) {
                s_random_row(ts[k], ns[m], w, f);
                for (uint64_t i = 0; i < ns[m]; i++)
                    x[i] = qtest_unif(-1.0f, 1.0f) * (rep % 3 == 0 ? 100.0f : 1.0f);
                quant_act_prepare(ts[k], x, ns[m], act, err, sizeof err);
                float r = ref(ns[m], w, act);
                for (int isa = 1; isa < QUANT_ISA_COUNT; isa++) {
                    quant_dot_fn g = quant_dot_get(ts[k], (quant_isa)isa);
                    if (!g)
                        continue;
                    float s = g(ns[m], w, act);
                    compared++;
                    CHECK(qtest_bits(s) == qtest_bits(r), "%s %s n=%llu rep %d: %a vs scalar %a",
                          quant_isa_name((quant_isa)isa), quant_type_name(ts[k]),
                          (unsigned long long)ns[m], rep, (double)s, (double)r);
                }
            }
        }
    }
    printf("simd vs scalar: %d rows compared bit for bit (best ISA here: %s)\n", compared,
           quant_isa_name(quant_isa_best()));
}

/* Matrix products: odd row counts, thread counts 1..3 (and more threads than rows), and
 * batches, all against the scalar dot of each row. */
static void test_products(void)
{
    char err[256];
    const quant_type ts[] = { QUANT_F32, QUANT_F16, QUANT_BF16, QUANT_Q8_0, QUANT_Q4_0 };
    const uint64_t rows_list[] = { 1, 3, 37, 131 };
    /* Lengths: a float tail of 13; 3 blocks (no whole group of 4); 7 blocks (a group and a
     * short one). Batches of 5 and 11: whole tiles of 4 positions and leftovers. */
    const uint64_t cols_list[] = { 77, 96, 224 };
    enum { MAXC = 224, MAXB = 11, MAXR = 131 };
    _Alignas(32) static uint8_t W[MAXR * MAXC * 4], act[ACT_ROOM(MAXC)];
    static float f[MAXC], X[MAXB * MAXC], y[4][MAXR], Y[MAXB * MAXR], ref[MAXR];
    int checked = 0;
    for (size_t k = 0; k < 5; k++) {
        quant_type t = ts[k];
        for (size_t c = 0; c < 3; c++) {
            const uint64_t cols = cols_list[c], B = c == 2 ? 11 : 5;
            uint64_t rb;
            if (cols % quant_type_get(t)->block)
                continue;
            quant_row_bytes(t, cols, &rb, err, sizeof err);
            for (size_t m = 0; m < 4; m++) {
                uint64_t rows = rows_list[m];
                for (uint64_t r = 0; r < rows; r++)
                    s_random_row(t, cols, W + r * rb, f);
                for (uint64_t i = 0; i < B * cols; i++)
                    X[i] = qtest_unif(-1.0f, 1.0f);
                quant_act_prepare(t, X, cols, act, err, sizeof err);
                for (uint64_t r = 0; r < rows; r++)
                    ref[r] = quant_dot_get(t, QUANT_ISA_SCALAR)(cols, W + r * rb, act);
                const int threads[4] = { 1, 2, 3, 7 };
                for (int ti = 0; ti < 4; ti++)
                    CHECK(quant_matvec(t, rows, cols, W, X, y[ti], threads[ti], err, sizeof err) ==
                              0, "%s", err);
                CHECK(!memcmp(y[0], ref, rows * 4), "%s %llu x %llu: matvec = scalar dots",
                      quant_type_name(t), (unsigned long long)rows, (unsigned long long)cols);
                for (int ti = 1; ti < 4; ti++)
                    CHECK(!memcmp(y[0], y[ti], rows * 4), "%s %llu rows: %d threads differ",
                          quant_type_name(t), (unsigned long long)rows, threads[ti]);
                CHECK(quant_matmat(t, rows, cols, W, B, X, Y, 2, err, sizeof err) == 0, "%s", err);
                int same = 1;
                for (uint64_t b = 0; b < B; b++) {
                    quant_matvec(t, rows, cols, W, X + b * cols, y[0], 3, err, sizeof err);
                    same &= !memcmp(y[0], Y + b * rows, rows * 4);
                }
                CHECK(same, "%s %llu x %llu: batch of %llu = one position at a time",
                      quant_type_name(t), (unsigned long long)rows, (unsigned long long)cols,
                      (unsigned long long)B);
                checked++;
            }
        }
    }
    printf("products: %d shapes, matvec = scalar dots for 1, 2, 3, 7 threads, matmat = matvec\n",
           checked);
    /* A batch big enough that rows are taken in groups and positions in tiles. */
    for (size_t k = 0; k < 5; k++) {
        enum { R = 301, C = 2048, BB = 19 };
        uint64_t rb;
        quant_row_bytes(ts[k], C, &rb, err, sizeof err);
        uint8_t *Wb = malloc(R * rb);
        float *Xb = malloc(sizeof(float) * BB * C), *Yb = malloc(sizeof(float) * BB * R);
        float *yb = malloc(sizeof(float) * R), *fb = malloc(sizeof(float) * C);
        int same = 1;
        for (int r = 0; r < R; r++)
            s_random_row(ts[k], C, Wb + r * rb, fb);
        for (int i = 0; i < BB * C; i++)
            Xb[i] = qtest_unif(-1.0f, 1.0f);
        CHECK(quant_matmat(ts[k], R, C, Wb, BB, Xb, Yb, 3, err, sizeof err) == 0, "%s", err);
        for (int b = 0; b < BB; b++) {
            quant_matvec(ts[k], R, C, Wb, Xb + b * C, yb, 1, err, sizeof err);
            same &= !memcmp(yb, Yb + b * R, sizeof(float) * R);
        }
        CHECK(same, "%s 301 x 2048, batch of 19 = one position at a time",
              quant_type_name(ts[k]));
        free(Wb);
        free(Xb);
        free(Yb);
        free(yb);
        free(fb);
    }
    /* Rejects: a length that is not whole blocks, an unsupported type, bad thread counts. */
    CHECK(quant_matvec(QUANT_Q4_0, 4, 100, W, X, y[0], 1, err, sizeof err) == -1 &&
              strstr(err, "not a multiple"), "%s", err);
    CHECK(quant_matvec((quant_type)16, 4, 256, W, X, y[0], 1, err, sizeof err) == -1 &&
              strstr(err, "iq2_xxs"), "%s", err);
    CHECK(quant_matvec(QUANT_F32, 4, 32, W, X, y[0], 0, err, sizeof err) == -1 &&
              strstr(err, "thread count 0"), "%s", err);
    CHECK(quant_matvec(QUANT_F32, 4, 32, W, X, y[0], QUANT_MAX_THREADS + 1, err, sizeof err) == -1,
          "too many threads");
    CHECK(quant_matvec(QUANT_Q8_0, 4, 32, W + 1, X, y[0], 1, err, sizeof err) == -1 &&
              strstr(err, "2-byte aligned"), "odd weights pointer: %s", err);
    CHECK(quant_matvec(QUANT_F16, 3, 7, W + 2, X, y[0], 1, err, sizeof err) == 0,
          "f16 rows of 14 bytes at a 2-byte boundary: %s", err);
    X[5] = NAN;
    CHECK(quant_matvec(QUANT_Q8_0, 4, 32, W, X, y[0], 1, err, sizeof err) == -1 &&
              strstr(err, "non-finite"), "NaN activation: %s", err);
    /* the Q8_K form's check goes 64 elements at a time: each bad element named, in a whole
     * chunk or the tail */
    static float xk[600];
    static uint8_t actk[4096];
    uint64_t ab = 0;
    CHECK(quant_act_bytes(QUANT_Q4_K, 512, &ab, err, sizeof err) == 0 && ab <= sizeof actk, "%s",
          err);
    static const uint32_t at[] = { 0, 63, 64, 300, 511 };
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        for (int k = 0; k < 512; k++)
            xk[k] = (float)(k % 13) - 6;
        CHECK(quant_act_prepare(QUANT_Q4_K, xk, 512, actk, err, sizeof err) == 0, "%s", err);
        xk[at[i]] = i % 2 ? INFINITY : -NAN;
        char want[32];
        snprintf(want, sizeof want, "element %u)", at[i]);
        CHECK(quant_act_prepare(QUANT_Q4_K, xk, 512, actk, err, sizeof err) == -1 &&
                  strstr(err, want), "bad element %u: %s", at[i], err);
    }
}

/* The activation quantizer: the SIMD path writes the scalar reference's bytes, ties and
 * all (blocks with amax = 127 make d = id = 1, so x = k + 0.5 is an exact tie for roundf). */
static void test_act_simd(void)
{
    enum { N = 4096 };
    char err[256];
    _Alignas(32) static uint8_t a[ACT_ROOM(N)], b[ACT_ROOM(N)];
    static float x[N];
    uint64_t bytes;
    int same = 1, blocks = 0;
    quant_act_bytes(QUANT_Q8_0, N, &bytes, err, sizeof err);
    for (int rep = 0; rep < 20; rep++) {
        for (int i = 0; i < N; i++) {
            if (rep % 2 == 0 && i % 32 == 0)
                x[i] = 127.0f;
            else if (rep % 2 == 0)
                x[i] = (float)((int)(qtest_next() % 253) - 126) + 0.5f * (float)(qtest_next() % 2);
            else
                x[i] = qtest_unif(-1.0f, 1.0f) * (float)(1 << (qtest_next() % 20)) * 1e-3f;
        }
        x[64 + rep] = -0.0f;
        for (int i = 96; i < 128; i++) /* a block of zeros */
            x[i] = 0.0f;
        for (int isa = 1; isa < QUANT_ISA_COUNT; isa++) {
            if (!quant_dot_get(QUANT_Q8_0, (quant_isa)isa))
                continue;
            const quant_isa si = (quant_isa)isa;
            CHECK(quant_act_prepare_isa(QUANT_ISA_SCALAR, QUANT_Q8_0, x, N, a, err, sizeof err) ==
                          0 &&
                      quant_act_prepare_isa(si, QUANT_Q8_0, x, N, b, err, sizeof err) == 0,
                  "%s", err);
            same &= !memcmp(a, b, bytes);
            blocks += N / 32;
        }
    }
    CHECK(same, "SIMD activation quantizer = scalar reference");
    printf("activation quantizer: %d blocks compared byte for byte\n", blocks);
    x[77] = __builtin_inff();
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++)
        if (quant_dot_get(QUANT_Q8_0, (quant_isa)isa))
            CHECK(quant_act_prepare_isa((quant_isa)isa, QUANT_Q8_0, x, N, b, err, sizeof err) ==
                          -1 && strstr(err, "element 77"),
                  "%s: inf rejected: %s", quant_isa_name((quant_isa)isa), err);
}

/* What quantizing the activation to Q8_0 costs (docs/design.md, "Tensor types"). For a Q8_0 or Q4_0
 * weight row w (its exact dequantized values) and an f32 activation x, compare our dot
 * product (x quantized to Q8_0 first, as llama.cpp does) with the exact one in double. Each
 * activation element moves by at most half a step of its block (d = amax/127) plus the
 * rounding of d to f16 (|q| * d * 2^-11 <= amax * 2^-11), so the error is bounded by
 * sum |w_i| * amax_b(i) * (1/254 + 2^-11), plus f32 accumulation (n * 2^-24 * sum |w_i x_i|).
 * Printed: the error relative to |w| |x| (scale-free), median and worst over the rows, beside
 * the error the weight quantization itself makes against the f32 row, for scale. */
static int s_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_activation_cost(void)
{
    enum { N = 2048, ROWS = 400 };
    char err[256];
    const quant_type ts[2] = { QUANT_Q8_0, QUANT_Q4_0 };
    _Alignas(32) static uint8_t w[N * 2], act[ACT_ROOM(N)];
    static float f[N], x[N], wd[N];
    static double rel[ROWS], relw[ROWS];
    for (int k = 0; k < 2; k++) {
        int over = 0;
        for (int r = 0; r < ROWS; r++) {
            for (int i = 0; i < N; i++) {
                f[i] = qtest_unif(-1.0f, 1.0f);
                /* activations with a few large channels, as in transformer residuals */
                x[i] = qtest_unif(-1.0f, 1.0f) * (i % 97 == 0 ? 20.0f : 1.0f);
            }
            quant_quantize_row(ts[k], f, w, N, err, sizeof err);
            quant_dequantize_row(ts[k], w, wd, N, err, sizeof err);
            quant_act_prepare(ts[k], x, N, act, err, sizeof err);
            double exact = 0, bound = 0, wn = 0, xn = 0, absum = 0, orig = 0;
            for (int i = 0; i < N; i++) {
                float amax = 0;
                for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++)
                    amax = fmaxf(amax, fabsf(x[j]));
                exact += (double)wd[i] * x[i];
                orig += (double)f[i] * x[i];
                absum += fabs((double)wd[i] * x[i]);
                bound += fabs(wd[i]) * amax * (1.0 / 254 + 0x1p-11);
                wn += (double)wd[i] * wd[i];
                xn += (double)x[i] * x[i];
            }
            bound += N * 0x1p-24 * (absum + bound);
            double e = fabs(quant_vec_dot(ts[k], N, w, act) - exact);
            over += e > bound;
            rel[r] = e / sqrt(wn * xn);
            relw[r] = fabs(exact - orig) / sqrt(wn * xn); /* the weight's own rounding */
        }
        qsort(rel, ROWS, sizeof rel[0], s_cmp_d);
        qsort(relw, ROWS, sizeof relw[0], s_cmp_d);
        CHECK(over == 0, "%s: %d rows beyond the activation-rounding bound", quant_type_name(ts[k]),
              over);
        printf("q8_0 activation with %s weights, n=%d: error / (|w| |x|) median %.2e, max %.2e "
               "(the weights' own %s rounding: median %.2e, max %.2e)\n",
               quant_type_name(ts[k]), N, rel[ROWS / 2], rel[ROWS - 1], quant_type_name(ts[k]),
               relw[ROWS / 2], relw[ROWS - 1]);
    }
}

/* A child of fork() gets an empty pool (the parent's threads do not exist there) and its
 * products still work and agree with the parent's. */
static void test_fork(void)
{
    char err[256];
    enum { R = 64, C = 256 };
    _Alignas(32) static uint8_t W[R * C * 2];
    static float f[C], x[C], y[R], yc[R];
    for (int r = 0; r < R; r++)
        s_random_row(QUANT_F16, C, W + r * C * 2, f);
    for (int i = 0; i < C; i++)
        x[i] = qtest_unif(-1.0f, 1.0f);
    CHECK(quant_matvec(QUANT_F16, R, C, W, x, y, 3, err, sizeof err) == 0, "%s", err);
    int fd[2];
    if (pipe(fd)) {
        CHECK(0, "pipe");
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        int ok = quant_matvec(QUANT_F16, R, C, W, x, yc, 2, err, sizeof err) == 0;
        ssize_t wr = write(fd[1], ok ? (void *)yc : (void *)"", ok ? sizeof yc : 1);
        _exit(wr == (ssize_t)sizeof yc ? 0 : 1);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t rd;
    while (got < sizeof yc && (rd = read(fd[0], (char *)yc + got, sizeof yc - got)) > 0)
        got += (size_t)rd;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && got == sizeof yc && !memcmp(y, yc, sizeof y),
          "matvec in a forked child (status %d, %zu bytes)", st, got);
}

/* The pool closes a product once its rows are all taken, so workers that have not started
 * skip it; a fixed-share job right after must still run every share. Many small products
 * (a worker often still asleep when the caller has taken every chunk) alternate with
 * fixed-share jobs; each product must equal the 1-thread one and each job see all shares. */
typedef struct {
    int ran[8];
} s_shares;

static void s_share_task(void *arg, int i, int n)
{
    (void)n;
    s_shares *s = arg;
    __atomic_add_fetch(&s->ran[i], 1, __ATOMIC_RELAXED);
}

static void test_pool_close(void)
{
    char err[256];
    enum { R = 40, C = 64, B = 3, ROUNDS = 3000 };
    _Alignas(32) static uint8_t W[R * C * 4];
    static float f[C], X[B * C], ref[B * R], Y[B * R], y[R], yref[R];
    for (int r = 0; r < R; r++)
        s_random_row(QUANT_F32, C, W + r * C * 4, f);
    for (int i = 0; i < B * C; i++)
        X[i] = qtest_unif(-1.0f, 1.0f);
    CHECK(quant_matmat(QUANT_F32, R, C, W, B, X, ref, 1, err, sizeof err) == 0, "%s", err);
    CHECK(quant_matvec(QUANT_F32, R, C, W, X, yref, 1, err, sizeof err) == 0, "%s", err);
    int bad = 0, missed = 0;
    for (int k = 0; k < ROUNDS; k++) {
        const int nt = 2 + k % 6;
        memset(Y, 0, sizeof Y);
        memset(y, 0, sizeof y);
        bad += quant_matmat(QUANT_F32, R, C, W, B, X, Y, nt, err, sizeof err) != 0 ||
               memcmp(Y, ref, sizeof Y) != 0;
        bad += quant_matvec(QUANT_F32, R, C, W, X, y, nt, err, sizeof err) != 0 ||
               memcmp(y, yref, sizeof y) != 0;
        s_shares sh = { 0 };
        if (quant_pool_run(nt, s_share_task, &sh, err, sizeof err) != 0) {
            missed++;
            continue;
        }
        for (int i = 0; i < nt; i++)
            missed += sh.ran[i] != 1;
    }
    CHECK(bad == 0, "%d of %d products differ from 1 thread's after closing early", bad,
          2 * ROUNDS);
    CHECK(missed == 0, "%d shares of fixed-share jobs did not run once", missed);
}

int main(void)
{
    qtest_seed(0x9e3779b97f4a7c15ull);
    test_table();
    test_conversions();
    test_hand_blocks();
    test_known_answers();
    test_round_trip();
    test_simd_vs_scalar();
    test_act_simd();
    test_activation_cost();
    test_products();
    test_fork();
    test_pool_close();
    quant_pool_shutdown();
    return CHECK_DONE("test_quant");
}

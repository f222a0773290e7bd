/* test_kquant.c — K-quants: layouts, ggml's bytes, scalar vs SIMD, threads, batching. tests/
 *
 * Known answers are ggml's own: tests/kquant_kat.py calls quantize_row_q4_K_ref (and q5_K,
 * q6_K, q8_K) and dequantize_row_* of a built libggml-base.so on fixed inputs and commits the
 * bytes as tests/kquant_kat.h. Dot products are held to the scalar reference bit for bit on
 * every ISA and thread count, and to the exact (double) dot product of the dequantized rows
 * within the bound the Q8_K activation's rounding implies.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "tests/check.h"
#include "tests/kquant_kat.h"
#include "tests/quant_test.h"

static const quant_type s_ts[3] = { QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K };

static void test_table(void)
{
    char err[256];
    uint64_t b;
    const uint32_t bytes[3] = { 144, 176, 210 };
    const char *names[3] = { "q4_K", "q5_K", "q6_K" };
    for (int k = 0; k < 3; k++) {
        const quant_type_info *ti = quant_type_get((uint32_t)s_ts[k]);
        CHECK(ti && ti->block == 256 && ti->block_bytes == bytes[k] && !strcmp(ti->name, names[k]),
              "%s in the table", names[k]);
        CHECK(quant_row_bytes(s_ts[k], 2048, &b, err, sizeof err) == 0 && b == 8 * bytes[k],
              "%s row of 2048: %llu", names[k], (unsigned long long)b);
        CHECK(quant_row_bytes(s_ts[k], 2080, &b, err, sizeof err) == -1 && strstr(err, names[k]) &&
                  strstr(err, "2080") && strstr(err, "256-element"),
              "row of 2080 rejected: %s", err);
        quant_type t;
        CHECK(quant_type_parse(names[k], &t, err, sizeof err) == 0 && t == s_ts[k], "parse %s",
              names[k]);
    }
    CHECK(quant_type_get(QUANT_Q8_K) == NULL, "q8_K is an activation form, not a weight type");
    CHECK(quant_act_type(QUANT_Q4_K) == QUANT_Q8_K && quant_act_type(QUANT_Q6_K) == QUANT_Q8_K,
          "K-quants meet a Q8_K activation");
    CHECK(quant_act_bytes(QUANT_Q5_K, 512, &b, err, sizeof err) == 0 && b == 2 * (292 + 256),
          "activation bytes");
}

/* The quantizers write ggml's bytes, the dequantizers give ggml's floats, and the Q8_K
 * activation form is ggml's block_q8_K, on inputs that reach every branch (kquant_kat.py). */
static void test_known_answers(void)
{
    char err[256];
    static float x[KAT_IN_N], y[KAT_IN_N];
    _Alignas(32) static uint8_t buf[KAT_IN_N * 2];
    memcpy(x, kat_in, sizeof x);
    const unsigned char *want[3] = { kkat_q4_K, kkat_q5_K, kkat_q6_K };
    const unsigned char *deq[3] = { kkat_q4_K_deq, kkat_q5_K_deq, kkat_q6_K_deq };
    const size_t sz[3] = { sizeof kkat_q4_K, sizeof kkat_q5_K, sizeof kkat_q6_K };
    for (int k = 0; k < 3; k++) {
        CHECK(quant_quantize_row(s_ts[k], x, buf, KAT_IN_N, err, sizeof err) == 0, "%s", err);
        const size_t first = qtest_first_diff(buf, want[k], sz[k]);
        CHECK(first == sz[k], "%s bytes = ggml's quantize_row_%s_ref (first difference at %zu)",
              quant_type_name(s_ts[k]), quant_type_name(s_ts[k]), first);
        /* dequantize ggml's own bytes */
        CHECK(quant_dequantize_row(s_ts[k], want[k], y, KAT_IN_N, err, sizeof err) == 0 &&
                  !memcmp(y, deq[k], sizeof y),
              "%s dequantized = ggml's dequantize_row", quant_type_name(s_ts[k]));
    }
    _Alignas(32) static uint8_t act[KAT_IN_N / 256 * 548];
    CHECK(quant_act_prepare(QUANT_Q4_K, x, KAT_IN_N, act, err, sizeof err) == 0 &&
              !memcmp(act, kkat_q8_K, sizeof kkat_q8_K),
          "Q8_K activation = ggml's quantize_row_q8_K_ref");
    /* then the pair-ordered copy: chunks 0, 2, 1, 3, 4, 6, 5, 7 of each super-block */
    const int order[8] = { 0, 2, 1, 3, 4, 6, 5, 7 };
    int pairs_ok = 1;
    for (int b = 0; b < KAT_IN_N / 256; b++)
        for (int i = 0; i < 8; i++)
            pairs_ok &= !memcmp(act + sizeof kkat_q8_K + b * 256 + 32 * i,
                                kkat_q8_K + b * 292 + 4 + 32 * order[i], 32);
    CHECK(pairs_ok, "the activation's pair-ordered copy");
    x[300] = INFINITY;
    CHECK(quant_quantize_row(QUANT_Q4_K, x, buf, KAT_IN_N, err, sizeof err) == -1 &&
              strstr(err, "element 300"), "inf rejected: %s", err);
}

/* Rows of random bytes (every scale, min, level and high bit; finite f16 scales) meet random
 * activations: every ISA gives the scalar reference's bits, and the scalar reference is the
 * exact dot product of the dequantized row with the Q8_K activation, within f32 rounding. */
static void test_simd_vs_scalar(void)
{
    char err[256];
    enum { NMAX = 4096 };
    _Alignas(32) static uint8_t w[NMAX], act[NMAX / 256 * 548];
    static float x[NMAX], wd[NMAX];
    const uint64_t ns[] = { 256, 512, 768, 1024, 1280, 2048, 4096 / 2 + 256 };
    int compared = 0;
    double worst = 0;
    for (int k = 0; k < 3; k++) {
        const quant_type_info *ti = quant_type_get((uint32_t)s_ts[k]);
        for (size_t m = 0; m < sizeof ns / sizeof ns[0]; m++) {
            const uint64_t n = ns[m], nb = n / 256;
            for (int rep = 0; rep < 30; rep++) {
                for (uint64_t i = 0; i < nb * ti->block_bytes; i++)
                    w[i] = (uint8_t)qtest_next();
                for (uint64_t b = 0; b < nb; b++) {
                    uint8_t *p = w + b * ti->block_bytes;
                    uint16_t d = quant_f32_to_f16(qtest_unif(-2.0f, 2.0f) + 0x1p-10f);
                    uint16_t dm = quant_f32_to_f16(qtest_unif(0.0f, 0.5f));
                    if (s_ts[k] == QUANT_Q6_K) {
                        memcpy(p + 208, &d, 2);
                    } else {
                        memcpy(p, &d, 2);
                        memcpy(p + 2, &dm, 2);
                    }
                }
                for (uint64_t i = 0; i < n; i++)
                    x[i] = qtest_unif(-1.0f, 1.0f) * (rep % 3 == 0 ? 100.0f : 1.0f) *
                           (i % 97 == 0 ? 20.0f : 1.0f);
                CHECK(quant_act_prepare(s_ts[k], x, n, act, err, sizeof err) == 0, "%s", err);
                char what[64];
                snprintf(what, sizeof what, "%s n=%llu rep %d", ti->name, (unsigned long long)n,
                         rep);
                const float r = qtest_dot_isas(s_ts[k], n, w, act, what, &compared);
                /* the exact value of what the reference computes, from the dequantized row
                 * and the activation's own values (q * d) */
                quant_dequantize_row(s_ts[k], w, wd, n, err, sizeof err);
                const quant_block_q8_K *y = (const quant_block_q8_K *)act;
                double exact = 0, mag = 0;
                for (uint64_t i = 0; i < n; i++) {
                    const double xv = (double)y[i / 256].qs[i % 256] * y[i / 256].d;
                    exact += (double)wd[i] * xv;
                    mag += fabs((double)wd[i] * xv);
                }
                /* f32 rounding: the scale products, each fma, the tree, the dequantizer's
                 * own roundings: a few ulps of the magnitude, times the terms' count */
                const double e = fabs((double)r - exact) / (mag * 0x1p-24 * (double)(nb * 16 + 8));
                worst = e > worst ? e : worst;
                CHECK(e <= 1.0, "%s n=%llu: scalar %g vs exact %g", ti->name,
                      (unsigned long long)n, (double)r, exact);
            }
        }
    }
    printf("k-quant simd vs scalar: %d rows bit for bit (best ISA here: %s); scalar vs exact: "
           "worst %.3f of the f32 bound\n", compared, quant_isa_name(quant_isa_best()), worst);
}

/* matvec for 1, 2, 3, 7 threads and odd row counts = the scalar dots; matmat = matvec. */
static void test_products(void)
{
    char err[256];
    enum { C = 768, MAXR = 37, B = 5 };
    _Alignas(32) static uint8_t W[MAXR * 3 * 210], act[3 * 548];
    static float f[C], X[B * C], y[4][MAXR], Y[B * MAXR], ref[MAXR];
    const uint64_t rows_list[] = { 1, 3, 37 };
    int checked = 0;
    for (int k = 0; k < 3; k++) {
        uint64_t rb;
        quant_row_bytes(s_ts[k], C, &rb, err, sizeof err);
        for (size_t m = 0; m < 3; m++) {
            const uint64_t rows = rows_list[m];
            for (uint64_t r = 0; r < rows; r++) {
                for (int i = 0; i < C; i++)
                    f[i] = qtest_unif(-1.0f, 1.0f) + (r % 2 ? 0.7f : 0.0f);
                CHECK(quant_quantize_row(s_ts[k], f, W + r * rb, C, err, sizeof err) == 0, "%s",
                      err);
            }
            for (int i = 0; i < B * C; i++)
                X[i] = qtest_unif(-1.0f, 1.0f);
            quant_act_prepare(s_ts[k], X, C, act, err, sizeof err);
            for (uint64_t r = 0; r < rows; r++)
                ref[r] = quant_dot_get(s_ts[k], QUANT_ISA_SCALAR)(C, W + r * rb, act);
            const int threads[4] = { 1, 2, 3, 7 };
            for (int ti = 0; ti < 4; ti++)
                CHECK(quant_matvec(s_ts[k], rows, C, W, X, y[ti], threads[ti], err, sizeof err) ==
                          0, "%s", err);
            CHECK(!memcmp(y[0], ref, rows * 4), "%s %llu rows: matvec = scalar dots",
                  quant_type_name(s_ts[k]), (unsigned long long)rows);
            for (int ti = 1; ti < 4; ti++)
                CHECK(!memcmp(y[0], y[ti], rows * 4), "%s: %d threads differ",
                      quant_type_name(s_ts[k]), threads[ti]);
            CHECK(quant_matmat(s_ts[k], rows, C, W, B, X, Y, 2, err, sizeof err) == 0, "%s", err);
            int same = 1;
            for (int b = 0; b < B; b++) {
                quant_matvec(s_ts[k], rows, C, W, X + b * C, y[0], 3, err, sizeof err);
                same &= !memcmp(y[0], Y + b * rows, rows * 4);
            }
            CHECK(same, "%s: batch = one position at a time", quant_type_name(s_ts[k]));
            checked++;
        }
    }
    /* a batch big enough for row groups and 2 x 4 tiles with leftovers on both sides */
    for (int k = 0; k < 3; k++) {
        enum { R = 301, CB = 2048, BB = 19 };
        uint64_t rb;
        quant_row_bytes(s_ts[k], CB, &rb, err, sizeof err);
        uint8_t *Wb = malloc(R * rb);
        float *Xb = malloc(sizeof(float) * BB * CB), *Yb = malloc(sizeof(float) * BB * R);
        float *yb = malloc(sizeof(float) * R), *fb = malloc(sizeof(float) * CB);
        int same = 1;
        for (int r = 0; r < R; r++) {
            for (int i = 0; i < CB; i++)
                fb[i] = qtest_unif(-1.0f, 1.0f);
            quant_quantize_row(s_ts[k], fb, Wb + r * rb, CB, err, sizeof err);
        }
        for (int i = 0; i < BB * CB; i++)
            Xb[i] = qtest_unif(-1.0f, 1.0f) * (i % 53 == 0 ? 30.0f : 1.0f);
        CHECK(quant_matmat(s_ts[k], R, CB, Wb, BB, Xb, Yb, 3, err, sizeof err) == 0, "%s", err);
        for (int b = 0; b < BB; b++) {
            quant_matvec(s_ts[k], R, CB, Wb, Xb + b * CB, yb, 1, err, sizeof err);
            same &= !memcmp(yb, Yb + b * R, sizeof(float) * R);
        }
        CHECK(same, "%s 301 x 2048, batch of 19 = one position at a time",
              quant_type_name(s_ts[k]));
        free(Wb);
        free(Xb);
        free(Yb);
        free(yb);
        free(fb);
    }
    CHECK(quant_matvec(QUANT_Q4_K, 4, 300, W, X, y[0], 1, err, sizeof err) == -1 &&
              strstr(err, "256-element"), "row of 300: %s", err);
    CHECK(quant_matvec(QUANT_Q6_K, 2, 256, W + 1, X, y[0], 1, err, sizeof err) == -1 &&
              strstr(err, "aligned"), "odd pointer: %s", err);
    printf("k-quant products: %d shapes, threads 1/2/3/7 and batches agree bit for bit\n",
           checked);
}

/* What quantizing costs, on random rows: each type's round trip as RMS error / RMS value. */
static void test_round_trip(void)
{
    enum { N = 4096 };
    char err[256];
    static float x[N], y[N];
    _Alignas(32) static uint8_t buf[N];
    for (int i = 0; i < N; i++)
        x[i] = qtest_unif(-1.0f, 1.0f) * (i % 64 == 0 ? 5.0f : 1.0f);
    const double limit[3] = { 0.12, 0.06, 0.03 }; /* 4, 5, 6 bits: ~1/16, 1/32, 1/64 steps */
    for (int k = 0; k < 3; k++) {
        CHECK(quant_quantize_row(s_ts[k], x, buf, N, err, sizeof err) == 0 &&
                  quant_dequantize_row(s_ts[k], buf, y, N, err, sizeof err) == 0, "%s", err);
        double se = 0, sx = 0;
        for (int i = 0; i < N; i++) {
            se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
            sx += (double)x[i] * x[i];
        }
        const double rel = sqrt(se / sx);
        CHECK(rel < limit[k], "%s round trip: rms error %.4f of rms value",
              quant_type_name(s_ts[k]), rel);
        printf("round trip %s: rms error / rms value %.4f\n", quant_type_name(s_ts[k]), rel);
    }
}

static int s_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* What the Q8_K activation costs (one scale per 256 values, where Q8_0 has one per 32), on
 * test_quant's distribution: 2048-element rows of uniform weights, activations with a few 20x
 * channels. Error of the product against the exact dot of the dequantized weights with the
 * f32 activation, over |w| |x|; beside it the weights' own rounding. Bound: half a step of
 * each activation super-block (amax / 254) times |w|, plus f32 rounding. */
static void test_activation_cost(void)
{
    enum { N = 2048, ROWS = 400 };
    char err[256];
    _Alignas(32) static uint8_t w[N], act[N / 256 * 548];
    static float f[N], x[N], wd[N];
    static double rel[ROWS], relw[ROWS];
    for (int k = 0; k < 3; k++) {
        int over = 0;
        for (int r = 0; r < ROWS; r++) {
            for (int i = 0; i < N; i++) {
                f[i] = qtest_unif(-1.0f, 1.0f);
                x[i] = qtest_unif(-1.0f, 1.0f) * (i % 97 == 0 ? 20.0f : 1.0f);
            }
            quant_quantize_row(s_ts[k], f, w, N, err, sizeof err);
            quant_dequantize_row(s_ts[k], w, wd, N, err, sizeof err);
            quant_act_prepare(s_ts[k], x, N, act, err, sizeof err);
            double exact = 0, orig = 0, bound = 0, wn = 0, xn = 0, absum = 0;
            for (int i = 0; i < N; i++) {
                float amax = 0;
                for (int j = i / 256 * 256; j < i / 256 * 256 + 256; j++)
                    amax = fmaxf(amax, fabsf(x[j]));
                exact += (double)wd[i] * x[i];
                orig += (double)f[i] * x[i];
                absum += fabs((double)wd[i] * x[i]);
                bound += fabs(wd[i]) * amax / 254.0;
                wn += (double)wd[i] * wd[i];
                xn += (double)x[i] * x[i];
            }
            bound += N * 0x1p-24 * (absum + bound);
            const double e = fabs(quant_vec_dot(s_ts[k], N, w, act) - exact);
            over += e > bound;
            rel[r] = e / sqrt(wn * xn);
            relw[r] = fabs(exact - orig) / sqrt(wn * xn);
        }
        qsort(rel, ROWS, sizeof rel[0], s_cmp_d);
        qsort(relw, ROWS, sizeof relw[0], s_cmp_d);
        CHECK(over == 0, "%s: %d rows beyond the activation-rounding bound",
              quant_type_name(s_ts[k]), over);
        printf("q8_K activation with %s weights, n=%d: error / (|w| |x|) median %.2e, max %.2e "
               "(the weights' own rounding: median %.2e, max %.2e)\n",
               quant_type_name(s_ts[k]), N, rel[ROWS / 2], rel[ROWS - 1], relw[ROWS / 2],
               relw[ROWS - 1]);
    }
}

int main(void)
{
    qtest_seed(0x243f6a8885a308d3ull);
    test_table();
    test_known_answers();
    test_simd_vs_scalar();
    test_products();
    test_round_trip();
    test_activation_cost();
    quant_pool_shutdown();
    return CHECK_DONE("test_kquant");
}

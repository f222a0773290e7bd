/* test_quant_x.c — Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, IQ4_XS: layouts, ggml's bytes, scalar vs
 * SIMD, threads, batching. tests/
 *
 * Known answers are ggml's own: tests/quant_x_kat.py calls ggml's quantizers and dequantizers
 * in a built libggml-base.so on fixed inputs and commits the bytes (and a hash of the floats)
 * as tests/quant_x_kat.h. Dot products are held to the scalar reference bit for bit on every
 * ISA this machine runs and every thread count, and the scalar reference to the exact (double)
 * dot product of the dequantized row with the activation's own values.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "quant/quant.h"
#include "quant/quant_x.h" /* quant_iq4_quantize's ntry; the Q8_1 sums */
#include "tests/check.h"
#include "tests/quant_x_kat.h"
#include "tests/quant_test.h"

#define S_NT 7
static const quant_type s_ts[S_NT] = { QUANT_Q4_1, QUANT_Q5_0, QUANT_Q5_1, QUANT_IQ4_NL,
                                       QUANT_Q2_K, QUANT_Q3_K, QUANT_IQ4_XS };
static const char *const s_names[S_NT] = { "q4_1", "q5_0", "q5_1", "iq4_nl",
                                           "q2_K", "q3_K", "iq4_xs" };
static const uint32_t s_block[S_NT] = { 32, 32, 32, 32, 256, 256, 256 };
static const uint32_t s_bytes[S_NT] = { 20, 22, 24, 18, 84, 110, 136 };
/* where each block keeps its f16 scale(s): d, and m / dmin (0: none) */
static const uint32_t s_doff[S_NT] = { 0, 0, 0, 0, 80, 108, 0 };
static const uint32_t s_moff[S_NT] = { 2, 0, 2, 0, 82, 0, 0 };

/* Q2_K and Q3_K have two AVX-512 kernels, with GFNI and without (quant_x_dots picks one by
 * cpuid): whichever this CPU did not get is checked here too, bit for bit against r. */
static void s_avx512_both(quant_type t, uint64_t n, const void *w, const void *act, float r,
                          const char *what, int *compared)
{
    if (!quant_dot_get(t, QUANT_ISA_AVX512) || (t != QUANT_Q2_K && t != QUANT_Q3_K))
        return;
    quant_dot_fn fs[2] = { t == QUANT_Q2_K ? quant_dot_q2_K_avx512 : quant_dot_q3_K_avx512,
                           t == QUANT_Q2_K ? quant_dot_q2_K_gfni : quant_dot_q3_K_gfni };
    for (int i = 0; i < (__builtin_cpu_supports("gfni") ? 2 : 1); i++) {
        const float v = fs[i](n, w, act);
        (*compared)++;
        CHECK(qtest_bits(v) == qtest_bits(r), "avx512%s %s: %a vs scalar %a", i ? "+gfni" : "",
              what, (double)v, (double)r);
    }
}

static void test_table(void)
{
    char err[256];
    uint64_t b;
    for (int k = 0; k < S_NT; k++) {
        const quant_type_info *ti = quant_type_get((uint32_t)s_ts[k]);
        CHECK(ti && ti->block == s_block[k] && ti->block_bytes == s_bytes[k] &&
                  !strcmp(ti->name, s_names[k]) && !strcmp(quant_type_name(s_ts[k]), s_names[k]),
              "%s in the table", s_names[k]);
        CHECK(quant_row_bytes(s_ts[k], 2048, &b, err, sizeof err) == 0 &&
                  b == 2048 / s_block[k] * s_bytes[k],
              "%s row of 2048: %llu", s_names[k], (unsigned long long)b);
        CHECK(quant_row_bytes(s_ts[k], 2048 + 16, &b, err, sizeof err) == -1 &&
                  strstr(err, s_names[k]) && strstr(err, "2064"),
              "row of 2064 rejected: %s", err);
        quant_type t;
        CHECK(quant_type_parse(s_names[k], &t, err, sizeof err) == 0 && t == s_ts[k], "parse %s",
              s_names[k]);
        CHECK(strstr(quant_type_list(), s_names[k]) != NULL, "%s listed", s_names[k]);
        CHECK(quant_act_type(s_ts[k]) == (s_block[k] == 256 ? QUANT_Q8_K : QUANT_Q8_0),
              "%s meets its activation (ggml's vec_dot_type)", s_names[k]);
        for (int isa = 0; isa < QUANT_ISA_COUNT; isa++)
            CHECK(!quant_dot_get(s_ts[k], QUANT_ISA_SCALAR) == 0 &&
                      (quant_dot_get(s_ts[k], (quant_isa)isa) != NULL) ==
                          (quant_dot_get(QUANT_Q4_0, (quant_isa)isa) != NULL),
                  "%s has a %s kernel wherever Q4_0 has", s_names[k],
                  quant_isa_name((quant_isa)isa));
    }
    quant_type t;
    CHECK(quant_type_parse("iq2_xs", &t, err, sizeof err) == -1 && strstr(err, "iq4_xs"),
          "iq2_xs is not read: %s", err);
    CHECK(quant_type_get(17) == NULL && !strcmp(quant_type_name(17), "iq2_xs"),
          "iq2_xs unsupported, named");
}

/* ggml's bytes and floats on inputs that reach every branch (quant_x_kat.py). */
static void test_known_answers(void)
{
    char err[256];
    static float x[KAT_IN_N], y[KAT_IN_N];
    _Alignas(32) static uint8_t buf[KAT_IN_N * 2];
    memcpy(x, kat_in, sizeof x);
    const unsigned char *want[S_NT] = { xkat_q4_1, xkat_q5_0, xkat_q5_1, xkat_iq4_nl,
                                        xkat_q2_K, xkat_q3_K, xkat_iq4_xs };
    const size_t sz[S_NT] = { sizeof xkat_q4_1, sizeof xkat_q5_0, sizeof xkat_q5_1,
                              sizeof xkat_iq4_nl, sizeof xkat_q2_K, sizeof xkat_q3_K,
                              sizeof xkat_iq4_xs };
    const uint64_t deq[S_NT] = { XKAT_Q4_1_DEQ, XKAT_Q5_0_DEQ, XKAT_Q5_1_DEQ, XKAT_IQ4_NL_DEQ,
                                 XKAT_Q2_K_DEQ, XKAT_Q3_K_DEQ, XKAT_IQ4_XS_DEQ };
    for (int k = 0; k < S_NT; k++) {
        memset(buf, 0xA5, sizeof buf);
        CHECK(quant_quantize_row(s_ts[k], x, buf, KAT_IN_N, err, sizeof err) == 0, "%s", err);
        const size_t first = qtest_first_diff(buf, want[k], sz[k]);
        CHECK(first == sz[k], "%s bytes = ggml's (first difference at byte %zu, block %zu)",
              s_names[k], first, first / s_bytes[k]);
        CHECK(quant_dequantize_row(s_ts[k], want[k], y, KAT_IN_N, err, sizeof err) == 0 &&
                  qtest_fnv(y, sizeof y) == deq[k],
              "%s dequantized = ggml's dequantize_row_%s", s_names[k], s_names[k]);
    }
    quant_iq4_quantize(QUANT_IQ4_NL, x, buf, KAT_IN_N, -1);
    CHECK(!memcmp(buf, xkat_iq4_nl_ref, sizeof xkat_iq4_nl_ref),
          "iq4_nl with ntry -1 = ggml's quantize_row_iq4_nl_ref");
    x[300] = NAN;
    for (int k = 0; k < S_NT; k++)
        CHECK(quant_quantize_row(s_ts[k], x, buf, KAT_IN_N, err, sizeof err) == -1 &&
                  strstr(err, "element 300"), "%s: nan rejected: %s", s_names[k], err);
}

/* Rows of random bytes (every level, high bit, scale and min; finite f16 scales) meet random
 * activations: every ISA gives the scalar reference's bits; the scalar reference is the exact
 * dot product of the dequantized row with the activation's values, within f32 rounding. */
static void test_simd_vs_scalar(void)
{
    char err[256];
    enum { NMAX = 4096 + 512 };
    _Alignas(32) static uint8_t w[NMAX], act[NMAX * 8];
    static float x[NMAX], wd[NMAX];
    const uint64_t ns[] = { 256, 512, 768, 1024, 1280, 2048, 2304, 4096 + 256 };
    int compared = 0;
    double worst = 0;
    for (int k = 0; k < S_NT; k++) {
        const uint32_t bk = s_block[k], bb = s_bytes[k];
        for (size_t m = 0; m < sizeof ns / sizeof ns[0]; m++) {
            /* blocks of 32 also get rows with 1..3 blocks past a group of 4 */
            const uint64_t n = ns[m] + (bk == 32 ? 32 * (m % 4) : 0), nb = n / bk;
            for (int rep = 0; rep < 20; rep++) {
                for (uint64_t i = 0; i < nb * bb; i++)
                    w[i] = (uint8_t)qtest_next();
                for (uint64_t b = 0; b < nb; b++) {
                    uint8_t *p = w + b * bb;
                    const uint16_t d = quant_f32_to_f16(qtest_unif(-2.0f, 2.0f) + 0x1p-10f);
                    const uint16_t dm = quant_f32_to_f16(qtest_unif(-0.5f, 0.5f));
                    memcpy(p + s_doff[k], &d, 2);
                    if (s_moff[k])
                        memcpy(p + s_moff[k], &dm, 2);
                }
                for (uint64_t i = 0; i < n; i++)
                    x[i] = qtest_unif(-1.0f, 1.0f) * (rep % 3 == 0 ? 100.0f : 1.0f) *
                           (i % 97 == 0 ? 20.0f : 1.0f);
                CHECK(quant_act_prepare(s_ts[k], x, n, act, err, sizeof err) == 0, "%s", err);
                char what[64];
                snprintf(what, sizeof what, "%s n=%llu rep %d", s_names[k],
                         (unsigned long long)n, rep);
                const float r = qtest_dot_isas(s_ts[k], n, w, act, what, &compared);
                s_avx512_both(s_ts[k], n, w, act, r, what, &compared);
                quant_dequantize_row(s_ts[k], w, wd, n, err, sizeof err);
                double exact = 0, mag = 0;
                for (uint64_t i = 0; i < n; i++) {
                    double xv;
                    if (bk == 256) {
                        const quant_block_q8_K *y = (const quant_block_q8_K *)act;
                        xv = (double)y[i / 256].qs[i % 256] * y[i / 256].d;
                    } else {
                        const quant_act_q8 y = quant_act_view(act, n);
                        xv = (double)y.qs[i] * y.d[i / 32];
                    }
                    exact += (double)wd[i] * xv;
                    mag += fabs((double)wd[i] * xv);
                }
                /* f32 rounding: the scale products, each fma, the tree, the dequantizer's
                 * own roundings: a few ulps of the magnitude, times the terms' count */
                /* Q4_1 / Q5_1 take ggml's min term m_w s_y, s_y block_q8_1's f16 of the quants'
                 * sum times the unrounded scale: 2^-11 of it twice (s's rounding, d's) */
                double slack = 0;
                if (s_moff[k] && bk == 32) {
                    const float *sums = quant_act_q8_sums(act, n);
                    for (uint64_t b = 0; b < nb; b++) {
                        uint16_t mh;
                        memcpy(&mh, w + b * bb + s_moff[k], 2);
                        slack += fabs((double)quant_f16_to_f32(mh) * sums[b]) * 0x1p-10;
                    }
                }
                const double terms = bk == 256 ? (double)(nb * 16 + 8) : (double)(nb * 4 + 8);
                const double e = fabs((double)r - exact) / (mag * 0x1p-24 * terms + slack);
                worst = e > worst ? e : worst;
                CHECK(e <= 1.0, "%s n=%llu: scalar %g vs exact %g", s_names[k],
                      (unsigned long long)n, (double)r, exact);
            }
        }
    }
    printf("quant_x simd vs scalar: %d rows bit for bit (best ISA here: %s); scalar vs exact: "
           "worst %.3f of the f32 bound\n", compared, quant_isa_name(quant_isa_best()), worst);
}

/* matvec for 1, 2, 3 threads = the scalar dots; matmat = matvec; every ISA the same. */
static void test_products(void)
{
    char err[256];
    enum { C = 1280, R = 37, B = 5 };
    static uint8_t W[R * C];
    static float f[C], X[B * C], y[QUANT_ISA_COUNT][3][R], Y[B * R], ref[R];
    _Alignas(32) static uint8_t act[C * 8];
    for (int k = 0; k < S_NT; k++) {
        uint64_t rb;
        quant_row_bytes(s_ts[k], C, &rb, err, sizeof err);
        for (uint64_t r = 0; r < R; r++) {
            for (int i = 0; i < C; i++)
                f[i] = qtest_unif(-1.0f, 1.0f) + (r % 2 ? 0.7f : 0.0f);
            CHECK(quant_quantize_row(s_ts[k], f, W + r * rb, C, err, sizeof err) == 0, "%s", err);
        }
        for (int i = 0; i < B * C; i++)
            X[i] = qtest_unif(-1.0f, 1.0f);
        quant_act_prepare_isa(QUANT_ISA_SCALAR, s_ts[k], X, C, act, err, sizeof err);
        for (uint64_t r = 0; r < R; r++)
            ref[r] = quant_dot_get(s_ts[k], QUANT_ISA_SCALAR)(C, W + r * rb, act);
        const quant_isa best = quant_isa_current();
        int same = 1;
        for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
            if (quant_isa_set((quant_isa)isa))
                continue;
            for (int th = 0; th < 3; th++) {
                CHECK(quant_matvec(s_ts[k], R, C, W, X, y[isa][th], th + 1, err, sizeof err) == 0,
                      "%s", err);
                same &= !memcmp(y[isa][th], ref, sizeof ref);
            }
        }
        quant_isa_set(best);
        CHECK(same, "%s: matvec on every ISA and 1..3 threads = the scalar dots", s_names[k]);
        CHECK(quant_matmat(s_ts[k], R, C, W, B, X, Y, 2, err, sizeof err) == 0, "%s", err);
        same = 1;
        for (int b = 0; b < B; b++) {
            quant_matvec(s_ts[k], R, C, W, X + b * C, y[0][0], 1, err, sizeof err);
            same &= !memcmp(y[0][0], Y + b * R, R * 4);
        }
        CHECK(same, "%s: batch = one position at a time", s_names[k]);
    }
}

/* What quantizing costs on random Gaussian-ish rows: RMS error / RMS value per type, ordered as
 * their bits are (a sanity check that the quantizers quantize, not a gate on ggml's design). */
static void test_round_trip(void)
{
    enum { N = 4096 };
    char err[256];
    static float x[N], y[N];
    static uint8_t q[N * 2];
    double rel[S_NT];
    for (int i = 0; i < N; i++)
        x[i] = (qtest_unif(-1, 1) + qtest_unif(-1, 1) + qtest_unif(-1, 1)) *
               (i % 256 == 7 ? 5.0f : 1.0f);
    for (int k = 0; k < S_NT; k++) {
        quant_quantize_row(s_ts[k], x, q, N, err, sizeof err);
        quant_dequantize_row(s_ts[k], q, y, N, err, sizeof err);
        double e = 0, v = 0;
        for (int i = 0; i < N; i++) {
            e += (double)(x[i] - y[i]) * (x[i] - y[i]);
            v += (double)x[i] * x[i];
        }
        rel[k] = sqrt(e / v);
        printf("round trip %-6s rms error %.4f of rms\n", s_names[k], rel[k]);
    }
    CHECK(rel[4] > rel[5] && rel[5] > rel[6] && rel[6] > rel[2] && rel[0] > rel[2] &&
              rel[1] > rel[2] && rel[2] < 0.05 && rel[4] < 0.5,
          "q2_K > q3_K > iq4_xs > q5_1, q4_1 and q5_0 > q5_1");
}

/* A row ending where its page ends, the next page unreadable: no kernel reads past the row
 * (the kernels load a row's last, partial group of blocks masked or block by block), and
 * each gives the scalar bits. Rows of 90 blocks of 32 (gpt-oss's 2880) and 11 super-blocks. */
static void test_row_end(void)
{
    char err[256];
    const long pg = sysconf(_SC_PAGESIZE);
    const size_t span = 8 * (size_t)pg;
    uint8_t *m = mmap(NULL, span + (size_t)pg, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED, "mmap");
    if (m == MAP_FAILED)
        return;
    CHECK(mprotect(m + span, (size_t)pg, PROT_NONE) == 0, "mprotect");
    static float x[2880];
    _Alignas(64) static uint8_t act[2880 * 8];
    /* and Q4_0, Q8_0, MXFP4 (their kernels' partial last pass: 2880 leaves 10 of 16 blocks,
     * 2 of 4; widths 32..480 every leftover count) */
    const quant_type more[] = { QUANT_Q4_0, QUANT_Q8_0, QUANT_MXFP4 };
    for (int k = 0; k < S_NT + 3 * 16; k++) {
        const quant_type t = k < S_NT ? s_ts[k] : more[(k - S_NT) / 16];
        const int j = (k - S_NT) % 16;
        const uint64_t n = k < S_NT ? (s_block[k] == 32 ? 2880 : 2816)
                                    : j == 0 ? 2880 : 32 * (uint64_t)j;
        uint64_t bytes = 0;
        CHECK(quant_row_bytes(t, n, &bytes, err, sizeof err) == 0, "%s", err);
        uint8_t *w = m + span - bytes;
        for (uint64_t i = 0; i < n; i++)
            x[i] = qtest_unif(-1.0f, 1.0f);
        CHECK(quant_quantize_row(t, x, w, n, err, sizeof err) == 0, "%s", err);
        for (uint64_t i = 0; i < n; i++)
            x[i] = qtest_unif(-1.0f, 1.0f);
        CHECK(quant_act_prepare(t, x, n, act, err, sizeof err) == 0, "%s", err);
        const float r = quant_dot_get(t, QUANT_ISA_SCALAR)(n, w, act);
        int unused = 0;
        s_avx512_both(t, n, w, act, r, "a row at a page's end", &unused);
        for (int isa = 1; isa < QUANT_ISA_COUNT; isa++) {
            quant_dot_fn g = quant_dot_get(t, (quant_isa)isa);
            if (g)
                CHECK(qtest_bits(g(n, w, act)) == qtest_bits(r), "%s %s n %llu: a row at a "
                      "page's end", quant_isa_name((quant_isa)isa), quant_type_name(t),
                      (unsigned long long)n);
        }
    }
    munmap(m, span + (size_t)pg);
}

int main(void)
{
    qtest_seed(0x13198a2e03707344ull);
    test_table();
    test_known_answers();
    test_simd_vs_scalar();
    test_row_end();
    test_products();
    test_round_trip();
    quant_pool_shutdown();
    return CHECK_DONE("test_quant_x");
}

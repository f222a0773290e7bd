/* gemm_x_avx2.c — batched Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS kernels for AVX2 + FMA + F16C
 * (no AVX-512): dot_x_avx2.c's row kernels with each weight group (four blocks of 32) or
 * super-block unpacked once for a tile of positions. quant/
 *
 * Without them an AVX2 prompt on these files went one position at a time through the row
 * kernel, which unpacks the nibbles, Q5's fifth bits and scales (IQ4_XS: the table lookups and
 * the 6-bit scales) again for every position: bench-llm --isa avx2 pp64 was 0.46-0.84x
 * llama.cpp's haswell build on Q5_0, Q5_1 and IQ4_XS (2026-12-03-avx2-llamacpp.md).
 *
 * The arithmetic per (row, position) is the row kernel's, lane for lane, from xq_avx2.h's one
 * copy: blocks of 32 through xq_avx2_unpack32 (once per row and group) and xq_avx2_acc32 (per
 * position: vpmaddubsw, vpmaddwd by ones, Q5_0's offset, one fma by d_w * d_x into lanes 4 (b %
 * 4) + quad, Q4_1 / Q5_1's m_w * s_y into quad 0's lane, the last partial group on a zeroed
 * copy with its absent lanes kept); IQ4_XS through xq_avx2_iq4xs_* (|k| by the activation
 * taking k's sign, vpmaddwd by the scale words, exact int32 sums whose order is free) and one
 * fma a super-block into lanes (b % 4) * 8; then quant_reduce32's tree (reduce_avx.h). A tile
 * is 1 row x 8 positions (gemm_k_avx2.c's, whose other shapes measured no better); its float
 * accumulators live in memory (8 x 32 floats). The panel holds per group (super-block) the
 * positions side by side: blocks of 32 their qs4 (padded to a whole group as quant_x_pad32
 * does), Q5_0's bias8, d_x and Q4_1 / Q5_1's s_y; IQ4_XS its Q8_K quants with each chunk
 * pair's halves already where the row kernel's two vinserti128 put them, and d_x.
 * gemm_time KIND=avx2, batch 64, 1 thread, CPU us a position, row kernels -> this (2026-12-03,
 * the shared 2-vCPU Xeon, load 4.5 from other work; 2026-12-03-l2gemm.md): 5632 x 2048 Q5_0
 * 759 -> 423, Q5_1 782 -> 392, IQ4_XS 482 -> 273, Q4_1 505 -> 366, IQ4_NL 519 -> 382. Tried, no
 * better: Q5_0's offset doubled and d_x spread over the lanes in the panel (4 shifts, an insert
 * and 2 permutes fewer a position and group: 1% on Q5_0, 4% slower on Q5_1). pp128 --isa avx2
 * against llama.cpp's haswell build, 1 thread, alternating with main: Q5_0 0.56-0.66 ->
 * 1.02-1.05, Q5_1 0.85-1.16 -> 1.66-2.20, IQ4_XS 0.47-0.57 -> 0.88-0.95.
 */
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>
#include <string.h>

#include "quant/gemm.h"
#include "quant/reduce_avx.h"
#include "quant/xq_avx2.h"

#define S_R 1 /* rows a tile */
#define S_P 8 /* positions a tile */

/* ---------------------------------------------------------------- blocks of 32 */

/* A group's record: qs4 (128), then Q5_0's bias8 (128), d_x (16), Q5_1's s_y (16). */
#define S_QS 0
#define S_B8 128
static inline int s_mn(quant_type t)
{
    return t == QUANT_Q4_1 || t == QUANT_Q5_1;
}

static inline uint64_t s_off_d(quant_type t)
{
    return t == QUANT_Q5_0 ? 256 : 128;
}

static inline uint64_t s_rec32(quant_type t)
{
    return s_off_d(t) + (s_mn(t) ? 32 : 16);
}

static inline uint64_t s_panel32(quant_type t, uint64_t n, uint64_t B)
{
    return (n / QUANT_QK + QUANT_QB_GROUP - 1) / QUANT_QB_GROUP * B * s_rec32(t);
}

/* Group g of position b at record g * B + b. */
static inline void s_pack32(quant_type t, uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab,
                            uint8_t *panel, uint64_t b0, uint64_t b1)
{
    const uint64_t nb = n / QUANT_QK, ng = (nb + QUANT_QB_GROUP - 1) / QUANT_QB_GROUP;
    const uint64_t rec = s_rec32(t), od = s_off_d(t);
    for (uint64_t b = b0; b < b1; b++) {
        const quant_act_q8 y = quant_act_view(act + b * ab, n);
        const float *sums = s_mn(t) ? quant_act_q8_sums(act + b * ab, n) : NULL;
        for (uint64_t g = 0; g < ng; g++) {
            uint8_t *r = panel + (g * B + b) * rec;
            const uint64_t k0 = g * QUANT_QB_GROUP;
            const uint64_t k = nb - k0 < QUANT_QB_GROUP ? nb - k0 : QUANT_QB_GROUP;
            memset(r, 0, rec);
            /* a partial group's qs4 has its k blocks' low halves, then their high halves */
            memcpy(r + S_QS, y.qs4 + k0 * QUANT_QK, k * 16);
            memcpy(r + S_QS + 64, y.qs4 + k0 * QUANT_QK + k * 16, k * 16);
            if (t == QUANT_Q5_0)
                memcpy(r + S_B8, y.bias8 + k0 * QUANT_QB_LANES, 128);
            memcpy(r + od, y.d + k0, k * sizeof(float));
            if (sums)
                memcpy(r + od + 16, sums + k0, k * sizeof(float));
        }
    }
}

static inline __attribute__((always_inline)) void s_pos32(quant_type t, const xq_avx2_g32 *u,
                                                          const uint8_t *r, int k, float *acc)
{
    const uint64_t od = s_off_d(t);
    __m256 v[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        v[i] = _mm256_load_ps(acc + 8 * i);
    xq_avx2_acc32(t, u, (const int8_t *)(r + S_QS), (const int32_t *)(r + S_B8),
                  (const float *)(r + od), s_mn(t) ? (const float *)(r + od + 16) : NULL,
                  k, v);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        _mm256_store_ps(acc + 8 * i, v[i]);
}

/* Row r against positions b .. b + P - 1. */
static inline __attribute__((always_inline)) void s_tile32(quant_type t, const quant_gemm_args *a,
                                                           uint64_t r, uint64_t b, const int R,
                                                           const int P)
{
    (void)R;
    const size_t bb = quant_x_bb32(t);
    const uint64_t rec = s_rec32(t), nb = a->n / QUANT_QK, nf = nb / QUANT_QB_GROUP;
    float acc[S_P][QUANT_LANES] __attribute__((aligned(32)));
    memset(acc, 0, sizeof acc);
    const uint8_t *x = a->W + r * a->row_bytes;
    for (uint64_t g = 0; g < nf; g++, x += QUANT_QB_GROUP * bb) {
        quant_prefetch(x, (unsigned)(QUANT_QB_GROUP * bb));
        xq_avx2_g32 u;
        xq_avx2_unpack32(t, x, &u);
        const uint8_t *pr = a->panel + (g * a->B + b) * rec;
#pragma GCC unroll 8
        for (int p = 0; p < P; p++)
            s_pos32(t, &u, pr + (uint64_t)p * rec, QUANT_QB_GROUP, acc[p]);
    }
    if (nf * QUANT_QB_GROUP < nb) { /* the last 1..3 blocks as a zero-padded group */
        const int k = (int)(nb - nf * QUANT_QB_GROUP);
        uint8_t blk[QUANT_QB_GROUP * sizeof(quant_block_q5_1)];
        memset(blk, 0, sizeof blk);
        memcpy(blk, x, (size_t)k * bb);
        xq_avx2_g32 u;
        xq_avx2_unpack32(t, blk, &u);
        const uint8_t *pr = a->panel + (nf * a->B + b) * rec;
        for (int p = 0; p < P; p++)
            s_pos32(t, &u, pr + (uint64_t)p * rec, k, acc[p]);
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; p++)
        a->Y[(b + (uint64_t)p) * a->ldy + r] = quant_reduce32_avx(acc[p]);
}

/* ---------------------------------------------------------------- IQ4_XS */

/* A super-block's record: the 256 quants, chunk pair c's as [0..15 | 32..47], [16..31 |
 * 48..63] of its 64 (the row kernel's ylo, yhi), then d_x; 288 keeps records 32-aligned. */
#define S_XREC 288

static uint64_t s_panel_xs(uint64_t n, uint64_t B)
{
    return n / QUANT_QK_K * B * S_XREC;
}

static void s_pack_xs(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab, uint8_t *panel,
                      uint64_t b0, uint64_t b1)
{
    const uint64_t nb = n / QUANT_QK_K;
    for (uint64_t b = b0; b < b1; b++) {
        const quant_block_q8_K *y = (const quant_block_q8_K *)(act + b * ab);
        for (uint64_t s = 0; s < nb; s++) {
            uint8_t *r = panel + (s * B + b) * S_XREC;
            for (int c = 0; c < 8; c += 2) {
                const int8_t *yc = y[s].qs + 32 * c;
                memcpy(r + 32 * c, yc, 16);
                memcpy(r + 32 * c + 16, yc + 32, 16);
                memcpy(r + 32 * c + 32, yc + 16, 16);
                memcpy(r + 32 * c + 48, yc + 48, 16);
            }
            memcpy(r + 256, &y[s].d, sizeof(float));
            memset(r + 260, 0, S_XREC - 260);
        }
    }
}

static inline __attribute__((always_inline)) void s_tile_xs(const quant_gemm_args *a, uint64_t r,
                                                            uint64_t b, const int R, const int P)
{
    (void)R;
    const uint64_t nb = a->n / QUANT_QK_K;
    float acc[S_P][QUANT_LANES] __attribute__((aligned(32)));
    memset(acc, 0, sizeof acc);
    const quant_block_iq4_xs *x = (const quant_block_iq4_xs *)(a->W + r * a->row_bytes);
    for (uint64_t s = 0; s < nb; s++, x++) {
        quant_prefetch(x, sizeof *x);
        const uint8_t *pr = a->panel + (s * a->B + b) * S_XREC;
        /* the super-block's 8 scale words in both lanes (dot_x_avx2.c's s_half2 of h 0) */
        const __m256i w2 = xq_avx2_xs_words2((const uint8_t *)x, (const uint8_t *)x);
        const __m256i w = _mm256_permute2x128_si256(w2, w2, 0x00);
        __m256i is[S_P];
#pragma GCC unroll 8
        for (int p = 0; p < P; p++)
            is[p] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 8; c += 2) {
            __m256i klo, khi;
            xq_avx2_iq4xs_levels(x, c, &klo, &khi);
            const __m256i alo = _mm256_sign_epi8(klo, klo), ahi = _mm256_sign_epi8(khi, khi);
            const __m256i scv = xq_avx2_iq4xs_scw(w, c);
#pragma GCC unroll 8
            for (int p = 0; p < P; p++) {
                const uint8_t *yp = pr + (uint64_t)p * S_XREC + 32 * c;
                is[p] = xq_avx2_iq4xs_step(is[p], alo, klo,
                                           _mm256_load_si256((const __m256i *)yp), scv);
                is[p] = xq_avx2_iq4xs_step(is[p], ahi, khi,
                                           _mm256_load_si256((const __m256i *)(yp + 32)), scv);
                /* the sum stays in its register: left free, gcc reassociated the 64 integer
                 * adds of a tile and spilled the 64 products to the stack first */
                __asm__("" : "+x"(is[p]));
            }
        }
        const float dw = _cvtsh_ss(x->d);
        float *const l0 = &acc[0][0] + 8 * (s % QUANT_QB_GROUP);
#pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
            float dx;
            memcpy(&dx, pr + (uint64_t)p * S_XREC + 256, sizeof dx);
            float *l = l0 + p * QUANT_LANES;
            _mm256_store_ps(l, _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[p]), _mm256_set1_ps(dw * dx),
                                               _mm256_load_ps(l)));
        }
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; p++)
        a->Y[(b + (uint64_t)p) * a->ldy + r] = quant_reduce32_avx(acc[p]);
}

/* ---------------------------------------------------------------- the kernels */

/* One kernel of blocks of 32 for type T: its panel size, pack, tile and run. */
#define S_KERNEL32(NAME, T)                                                                    \
    static uint64_t s_panel_##NAME(uint64_t n, uint64_t B)                                     \
    {                                                                                          \
        return s_panel32(T, n, B);                                                             \
    }                                                                                          \
    static void s_pack_##NAME(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab,         \
                              uint8_t *panel, uint64_t b0, uint64_t b1)                        \
    {                                                                                          \
        s_pack32(T, n, B, act, ab, panel, b0, b1);                                             \
    }                                                                                          \
    static inline __attribute__((always_inline)) void s_tile_##NAME(                           \
        const quant_gemm_args *a, uint64_t r, uint64_t b, const int R, const int P)            \
    {                                                                                          \
        s_tile32(T, a, r, b, R, P);                                                            \
    }                                                                                          \
    QUANT_GEMM_RUN(s_run_##NAME, s_tile_##NAME)                                                \
    const quant_gemm quant_gemm_##NAME##_avx2 = { "avx2", s_panel_##NAME, s_pack_##NAME,       \
                                                  s_run_##NAME, NULL };

S_KERNEL32(q4_1, QUANT_Q4_1)
S_KERNEL32(q5_0, QUANT_Q5_0)
S_KERNEL32(q5_1, QUANT_Q5_1)
S_KERNEL32(iq4_nl, QUANT_IQ4_NL)
QUANT_GEMM_RUN(s_run_xs, s_tile_xs)

const quant_gemm quant_gemm_iq4_xs_avx2 = { "avx2", s_panel_xs, s_pack_xs, s_run_xs, NULL };

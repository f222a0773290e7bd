/* gemm_avx512.c — batched Q4_0 and Q8_0 kernels on AVX-512 VNNI: register tiles of weight rows
 * x positions over a repacked activation panel, lane for lane quant.h's order. quant/
 *
 * The one-row kernels (dot_avx512.c) spend, per group of 4 blocks, the same integer and float
 * work these do per (row, position) pair; what a batch adds is reuse. Here each group's
 * weights are decoded once (nibbles masked and shifted, or biased by 128; the four f16 scales
 * widened and broadcast to their lanes) and kept in registers for S_P positions, and each
 * position's activation vectors are loaded once for S_R rows. The panel (gemm.h) puts a
 * group's operands for one position in one 320- or 384-byte record, records of consecutive
 * positions side by side, so a tile walks one pointer; the scales x_d come pre-broadcast, so
 * the pair's scale product is one multiply (the row kernel multiplies four and permutes: the
 * same four IEEE products, the same bits).
 *
 * Per pair the float operations are exactly the row kernel's: lane l gets fmaf(isum_l,
 * w_d * x_d, acc_l) once per group, in group order, then quant_reduce32's tree.
 */
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#include <immintrin.h>
#include <string.h>

#include "quant/gemm.h"
#include "quant/reduce_avx.h"

/* A register tile is S_R rows x up to S_P positions: S_R * S_P * 2 accumulators beside each
 * row's decoded group (3 or 4 vectors). Measured with tests/tools/gemm_time (5632 x 2048, batch
 * 64, 1 thread, CPU us per position, two alternating runs, 2026-12-02, load average 9: the
 * machine shared), rows x positions: 2x4 Q4_0 178-185 (Q8_0 208-212), 2x6 165-166, 3x3
 * 127-129, 3x4 129-130, 4x2 132-134, 5x2 126-128, 6x2 127-140, 8x1 184-187, 1x8 282-295, and
 * 4x3 114-115 (Q8_0 135-138; the tiles of matvec.c: 188-196 and 204-206). More rows share each
 * activation load (the panel's five per pair are the limit with one row); 4x3's 24
 * accumulators and 12-16 weight vectors spill a little, still the fastest. -D to try others. */
#ifndef S_R
#define S_R 4
#endif
#ifndef S_P
#define S_P 3
_Static_assert(S_P >= 1 && S_P <= 8, "QUANT_GEMM_RUN covers widths 1..8");
#endif

/* ---------------------------------------------------------------- Q4_0 */

/* A group's record: qs4 low half (64), high half (64), bias8 low lanes (16 x i32), high
 * lanes (16 x i32), and x_d for lanes 0..15 (lane l: block l / 4 of the group; the high
 * lanes use the same). */
#define Q4_REC 320

static uint64_t s_q4_panel_bytes(uint64_t n, uint64_t B)
{
    const uint64_t nb = n / QUANT_QK;
    if (nb == 0 || nb % QUANT_QB_GROUP)
        return 0;
    return nb / QUANT_QB_GROUP * B * Q4_REC;
}

static void s_q4_pack(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab, uint8_t *panel,
                      uint64_t b0, uint64_t b1)
{
    const uint64_t G = n / (QUANT_QK * QUANT_QB_GROUP);
    for (uint64_t b = b0; b < b1; b++) {
        const quant_act_q8 y = quant_act_view(act + b * ab, n);
        for (uint64_t g = 0; g < G; g++) {
            uint8_t *o = panel + (g * B + b) * Q4_REC;
            memcpy(o, y.qs4 + g * 128, 128);
            memcpy(o + 128, y.bias8 + g * 32, 128);
            float *dx = (float *)(o + 256);
            for (int l = 0; l < 16; l++)
                dx[l] = y.d[4 * g + (uint64_t)l / 4];
        }
    }
}

/* Four blocks' f16 scales, widened and spread: lane l gets block l / 4's. */
static inline __m512 s_q4_dw(const quant_block_q4_0 *x)
{
    const __m128i h = _mm_setr_epi16((short)x[0].d, (short)x[1].d, (short)x[2].d, (short)x[3].d,
                                     0, 0, 0, 0);
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_cvtph_ps(h)));
}

static inline __attribute__((always_inline)) void
s_q4_tile(const quant_gemm_args *a, uint64_t r, uint64_t b, const int R, const int P)
{
    const uint64_t G = a->n / (QUANT_QK * QUANT_QB_GROUP);
    const quant_block_q4_0 *x[S_R];
    __m512 c[S_R][S_P][2];
    const __m512i m = _mm512_set1_epi8(0x0F);
    #pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        x[i] = (const quant_block_q4_0 *)(a->W + (r + (uint64_t)i) * a->row_bytes);
        #pragma GCC unroll 8
        for (int p = 0; p < P; p++)
            c[i][p][0] = c[i][p][1] = _mm512_setzero_ps();
    }
    const uint8_t *pp = a->panel + b * Q4_REC;
    const uint64_t gs = a->B * Q4_REC;
    for (uint64_t g = 0; g < G; g++, pp += gs) {
        __m512i lo[S_R], hi[S_R];
        __m512 dw[S_R];
        #pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            const quant_block_q4_0 *xb = x[i] + 4 * g;
            __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)xb[0].qs));
            v = _mm512_mask_broadcast_i32x4(v, 0x00F0, _mm_loadu_si128((const __m128i *)xb[1].qs));
            v = _mm512_mask_broadcast_i32x4(v, 0x0F00, _mm_loadu_si128((const __m128i *)xb[2].qs));
            v = _mm512_mask_broadcast_i32x4(v, 0xF000, _mm_loadu_si128((const __m128i *)xb[3].qs));
            lo[i] = _mm512_and_si512(v, m);
            hi[i] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
            dw[i] = s_q4_dw(xb);
        }
        #pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
            const uint8_t *o = pp + (uint64_t)p * Q4_REC;
            const __m512i ql = _mm512_load_si512(o), qh = _mm512_load_si512(o + 64);
            const __m512i bl = _mm512_load_si512(o + 128), bh = _mm512_load_si512(o + 192);
            const __m512 dx = _mm512_load_ps(o + 256);
            #pragma GCC unroll 8
            for (int i = 0; i < R; i++) {
                const __m512 d = _mm512_mul_ps(dw[i], dx);
                const __m512 sl = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bl, lo[i], ql));
                const __m512 sh = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bh, hi[i], qh));
                c[i][p][0] = _mm512_fmadd_ps(sl, d, c[i][p][0]);
                c[i][p][1] = _mm512_fmadd_ps(sh, d, c[i][p][1]);
            }
        }
    }
    #pragma GCC unroll 8
    for (int i = 0; i < R; i++)
        #pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
            float l[QUANT_LANES];
            _mm512_storeu_ps(l, c[i][p][0]);
            _mm512_storeu_ps(l + 16, c[i][p][1]);
            a->Y[(b + (uint64_t)p) * a->ldy + r + (uint64_t)i] = quant_reduce32_avx(l);
        }
}

/* ---------------------------------------------------------------- Q8_0 */

/* A group's record: the 128 quants in element order, bias128 (32 x i32, block-major: lanes
 * 0..7 block 0 ...), and x_d for the 32 lanes (lane l: block l / 8). */
#define Q8_REC 384

static uint64_t s_q8_panel_bytes(uint64_t n, uint64_t B)
{
    const uint64_t nb = n / QUANT_QK;
    if (nb == 0 || nb % QUANT_QB_GROUP)
        return 0;
    return nb / QUANT_QB_GROUP * B * Q8_REC;
}

static void s_q8_pack(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab, uint8_t *panel,
                      uint64_t b0, uint64_t b1)
{
    const uint64_t G = n / (QUANT_QK * QUANT_QB_GROUP);
    for (uint64_t b = b0; b < b1; b++) {
        const quant_act_q8 y = quant_act_view(act + b * ab, n);
        for (uint64_t g = 0; g < G; g++) {
            uint8_t *o = panel + (g * B + b) * Q8_REC;
            memcpy(o, y.qs + g * 128, 128);
            memcpy(o + 128, y.bias128 + g * 32, 128);
            float *dx = (float *)(o + 256);
            for (int l = 0; l < 32; l++)
                dx[l] = y.d[4 * g + (uint64_t)l / 8];
        }
    }
}

static inline __attribute__((always_inline)) void
s_q8_tile(const quant_gemm_args *a, uint64_t r, uint64_t b, const int R, const int P)
{
    const uint64_t G = a->n / (QUANT_QK * QUANT_QB_GROUP);
    const quant_block_q8_0 *x[S_R];
    __m512 c[S_R][S_P][2];
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const __m512i i01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i i23 = _mm512_add_epi32(i01, _mm512_set1_epi32(2));
    #pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        x[i] = (const quant_block_q8_0 *)(a->W + (r + (uint64_t)i) * a->row_bytes);
        #pragma GCC unroll 8
        for (int p = 0; p < P; p++)
            c[i][p][0] = c[i][p][1] = _mm512_setzero_ps();
    }
    const uint8_t *pp = a->panel + b * Q8_REC;
    const uint64_t gs = a->B * Q8_REC;
    for (uint64_t g = 0; g < G; g++, pp += gs) {
        __m512i u01[S_R], u23[S_R];
        __m512 d01[S_R], d23[S_R];
        #pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            const quant_block_q8_0 *xb = x[i] + 4 * g;
            const __m256i q0 = _mm256_loadu_si256((const __m256i *)xb[0].qs);
            const __m256i q2 = _mm256_loadu_si256((const __m256i *)xb[2].qs);
            u01[i] = _mm512_xor_si512(
                _mm512_inserti64x4(_mm512_castsi256_si512(q0),
                                   _mm256_loadu_si256((const __m256i *)xb[1].qs), 1), bias);
            u23[i] = _mm512_xor_si512(
                _mm512_inserti64x4(_mm512_castsi256_si512(q2),
                                   _mm256_loadu_si256((const __m256i *)xb[3].qs), 1), bias);
            const __m128i h = _mm_setr_epi16((short)xb[0].d, (short)xb[1].d, (short)xb[2].d,
                                             (short)xb[3].d, 0, 0, 0, 0);
            const __m512 w4 = _mm512_castps128_ps512(_mm_cvtph_ps(h));
            d01[i] = _mm512_permutexvar_ps(i01, w4);
            d23[i] = _mm512_permutexvar_ps(i23, w4);
        }
        #pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
            const uint8_t *o = pp + (uint64_t)p * Q8_REC;
            const __m512i q01 = _mm512_load_si512(o), q23 = _mm512_load_si512(o + 64);
            const __m512i b01 = _mm512_load_si512(o + 128), b23 = _mm512_load_si512(o + 192);
            const __m512 x01 = _mm512_load_ps(o + 256), x23 = _mm512_load_ps(o + 320);
            #pragma GCC unroll 8
            for (int i = 0; i < R; i++) {
                const __m512 s01 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(b01, u01[i], q01));
                const __m512 s23 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(b23, u23[i], q23));
                c[i][p][0] = _mm512_fmadd_ps(s01, _mm512_mul_ps(d01[i], x01), c[i][p][0]);
                c[i][p][1] = _mm512_fmadd_ps(s23, _mm512_mul_ps(d23[i], x23), c[i][p][1]);
            }
        }
    }
    #pragma GCC unroll 8
    for (int i = 0; i < R; i++)
        #pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
            float l[QUANT_LANES];
            _mm512_storeu_ps(l, c[i][p][0]);
            _mm512_storeu_ps(l + 16, c[i][p][1]);
            a->Y[(b + (uint64_t)p) * a->ldy + r + (uint64_t)i] = quant_reduce32_avx(l);
        }
}

/* ---------------------------------------------------------------- the loops */

/* Positions in tiles of S_P (the last one narrower), rows in tiles of S_R (the last row
 * alone): positions outermost, so one tile's panel records stay in L1 while the rows of the
 * block (matvec.c keeps a block within L2) stream past them. */
QUANT_GEMM_RUN(s_q4_run, s_q4_tile)
QUANT_GEMM_RUN(s_q8_run, s_q8_tile)

const quant_gemm quant_gemm_q4_0_avx512 = { "avx512-vnni", s_q4_panel_bytes, s_q4_pack,
                                            s_q4_run };
const quant_gemm quant_gemm_q8_0_avx512 = { "avx512-vnni", s_q8_panel_bytes, s_q8_pack,
                                            s_q8_run };

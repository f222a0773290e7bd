/* gemm_avx2.h — the 256-bit batched Q4_0 kernel, written once for two targets:
 * gemm_avxvnni.c (S_VNNI 1: vpdpbusd, VEX-encoded) and gemm_avx2.c (S_VNNI 0: vpmaddubsw then
 * vpmaddwd). Included only by them, after their `#pragma GCC target`. quant/
 *
 * Lane for lane dot_avx2.c's order (quant.h): 32 lanes as four 8-lane vectors, one group of 4
 * blocks per step. A tile is one weight row x S_P positions: with 16 vector registers, a
 * row's decoded group (Q4_0: 4 nibble vectors and 2 scale vectors) and S_P x 4 accumulators
 * leave no room for a second row. The panels are gemm_avx512.c's (the same records; packed
 * here again so that no AVX-512 instruction runs on a CPU without it).
 *
 * Measured (tests/tools/gemm_time, 5632 x 2048, batch 64, 1 thread, CPU us per position, three
 * runs, 2026-12-02, load average 14-17 on the 2 cores, so within +-25%): Q4_0 AVX-VNNI 308-344
 * against the AVX2 row kernels' 320-419 (x0.97-1.22), plain AVX2 331-373 against 319-347
 * (x0.86-1.03). A Q8_0 kernel of the same shape was slower than the row kernels (x0.77-0.85 on
 * both targets) and was dropped: with 16 registers a tile holds one row and two positions, too
 * little reuse to pay for reading the panel's records. So on AVX2 machines a batch is about as
 * fast as one dot per pair; the gain is on AVX-512 (gemm_avx512.c).
 */
#ifndef SWARM_QUANT_GEMM_AVX2_H
#define SWARM_QUANT_GEMM_AVX2_H

#include <immintrin.h>
#include <string.h>

#include "quant/gemm.h"
#include "quant/reduce_avx.h"

#ifndef S_VNNI
#error "define S_VNNI (0 or 1) before including gemm_avx2.h"
#endif

#define S_P 2
#define Q4_REC 320 /* gemm_avx512.c's records: see there */

static uint64_t s_panel_q4(uint64_t n, uint64_t B)
{
    const uint64_t nb = n / QUANT_QK;
    return nb && nb % QUANT_QB_GROUP == 0 ? nb / QUANT_QB_GROUP * B * Q4_REC : 0;
}

static void s_pack_q4(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab, uint8_t *panel,
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

/* Q4_0: nibbles (0..15, unsigned) times the activation's grouped quants, per quad, plus the
 * quad's -8 * sum (the record's bias): exactly sum (nibble - 8) * y. */
static inline __m256 s_q4_half(__m256i nib, const uint8_t *yq, const uint8_t *b8)
{
    const __m256i y = _mm256_load_si256((const __m256i *)yq);
    const __m256i bias = _mm256_load_si256((const __m256i *)b8);
#if S_VNNI
    return _mm256_cvtepi32_ps(_mm256_dpbusd_avx_epi32(bias, nib, y));
#else
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(nib, y), _mm256_set1_epi16(1));
    return _mm256_cvtepi32_ps(_mm256_add_epi32(p, bias));
#endif
}

static inline __attribute__((always_inline)) void s_q4_tile(const quant_gemm_args *a, uint64_t r,
                                                            uint64_t b, const int P)
{
    const uint64_t G = a->n / (QUANT_QK * QUANT_QB_GROUP);
    const quant_block_q4_0 *x = (const quant_block_q4_0 *)(a->W + r * a->row_bytes);
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i i01 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i i23 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    __m256 c[S_P][4];
#pragma GCC unroll 4
    for (int p = 0; p < P; p++)
        c[p][0] = c[p][1] = c[p][2] = c[p][3] = _mm256_setzero_ps();
    const uint8_t *pp = a->panel + b * Q4_REC;
    const uint64_t gs = a->B * Q4_REC;
    for (uint64_t g = 0; g < G; g++, pp += gs, x += 4) {
        const __m256i v01 = _mm256_loadu2_m128i((const __m128i *)x[1].qs,
                                                (const __m128i *)x[0].qs);
        const __m256i v23 = _mm256_loadu2_m128i((const __m128i *)x[3].qs,
                                                (const __m128i *)x[2].qs);
        const __m256i lo01 = _mm256_and_si256(v01, m), lo23 = _mm256_and_si256(v23, m);
        const __m256i hi01 = _mm256_and_si256(_mm256_srli_epi16(v01, 4), m);
        const __m256i hi23 = _mm256_and_si256(_mm256_srli_epi16(v23, 4), m);
        const __m128i h = _mm_setr_epi16((short)x[0].d, (short)x[1].d, (short)x[2].d,
                                         (short)x[3].d, 0, 0, 0, 0);
        const __m256 w4 = _mm256_castps128_ps256(_mm_cvtph_ps(h));
        const __m256 dw01 = _mm256_permutevar8x32_ps(w4, i01);
        const __m256 dw23 = _mm256_permutevar8x32_ps(w4, i23);
#pragma GCC unroll 4
        for (int p = 0; p < P; p++) {
            const uint8_t *o = pp + (uint64_t)p * Q4_REC;
            const __m256 d01 = _mm256_mul_ps(dw01, _mm256_load_ps((const float *)(o + 256)));
            const __m256 d23 = _mm256_mul_ps(dw23, _mm256_load_ps((const float *)(o + 288)));
            c[p][0] = _mm256_fmadd_ps(s_q4_half(lo01, o, o + 128), d01, c[p][0]);
            c[p][1] = _mm256_fmadd_ps(s_q4_half(lo23, o + 32, o + 160), d23, c[p][1]);
            c[p][2] = _mm256_fmadd_ps(s_q4_half(hi01, o + 64, o + 192), d01, c[p][2]);
            c[p][3] = _mm256_fmadd_ps(s_q4_half(hi23, o + 96, o + 224), d23, c[p][3]);
        }
    }
#pragma GCC unroll 4
    for (int p = 0; p < P; p++) {
        float l[QUANT_LANES];
        for (int k = 0; k < 4; k++)
            _mm256_storeu_ps(l + 8 * k, c[p][k]);
        a->Y[(b + (uint64_t)p) * a->ldy + r] = quant_reduce32_avx(l);
    }
}

#define S_RUN(NAME, TILE)                                                                       \
    static void NAME(const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0,          \
                     uint64_t b1)                                                              \
    {                                                                                          \
        uint64_t b = b0;                                                                       \
        for (; b + S_P <= b1; b += S_P)                                                        \
            for (uint64_t r = r0; r < r1; r++)                                                 \
                TILE(a, r, b, S_P);                                                            \
        for (; b < b1; b++)                                                                    \
            for (uint64_t r = r0; r < r1; r++)                                                 \
                TILE(a, r, b, 1);                                                              \
    }

S_RUN(s_run_q4, s_q4_tile)

#endif

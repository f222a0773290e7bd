/* gemm_avx2.h — the 256-bit batched Q4_0 / Q8_0 kernel, written once for two targets:
 * gemm_avxvnni.c (S_VNNI 1: vpdpbusd, VEX-encoded) and gemm_avx2.c (S_VNNI 0: vpmaddubsw then
 * vpmaddwd). Included only by them, after their `#pragma GCC target`. quant/
 *
 * gemm_avx512.c's scheme on 8 lanes: weight rows in vector lanes (8 a vector, two vectors a
 * tile), repacked per product so that one vector is quad q of a block for 8 rows, multiplied by
 * the position's quad broadcast; one integer sum per block and pair, then one conversion,
 * multiply and fma for 8 pairs — quant.h's order (lane b % 16, the 16-lane tree), so the bits
 * are the row kernels'. Without VNNI, vpmaddubsw cannot take Q8_0's weights biased to unsigned
 * (255 * 127 * 2 overflows int16): Q8_0 keeps them signed and multiplies |w| by y carrying w's
 * sign (2 * 128 * 127 < 2^15), with no bias; Q4_0's nibbles (0..15) go in as they are.
 * With 16 vector registers a tile is 2 x 8 rows x 2 positions.
 */
#ifndef SWARM_QUANT_GEMM_AVX2_H
#define SWARM_QUANT_GEMM_AVX2_H

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "quant/gemm.h"

#ifndef S_VNNI
#error "define S_VNNI (0 or 1) before including gemm_avx2.h"
#endif

#define S_L QUANT_QB_BLANES /* 16 lanes */
#define S_G 2               /* groups of 8 rows a tile */
#define S_P 2               /* positions a tile */
#define S_REC 40            /* panel record: 32 quants, bias, x_d (gemm_avx512.c's) */
#define S_GB (8 * 32 + 32)  /* a group slot: 8 quad vectors, 8 scales */

static inline int32_t s_i32(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline float s_f32(const uint8_t *p)
{
    float v;
    memcpy(&v, p, 4);
    return v;
}

static inline short s_h(const uint8_t *p)
{
    short v;
    memcpy(&v, p, 2);
    return v;
}

static uint64_t s_nbl(uint64_t nb)
{
    return (nb + S_L - 1) / S_L;
}

static uint64_t s_panel_bytes(uint64_t n, uint64_t B)
{
    const uint64_t nb = n / QUANT_QK;
    return nb ? s_nbl(nb) * S_L * B * S_REC : 0;
}

/* Records lane-major (block k at slot (k % 16) * nbl + k / 16); bias -o * the block's sum. */
static inline void s_pack(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab, uint8_t *panel,
                          uint64_t b0, uint64_t b1, int32_t o)
{
    const uint64_t nb = n / QUANT_QK, nbl = s_nbl(nb);
    for (uint64_t b = b0; b < b1; b++) {
        const quant_act_q8 y = quant_act_view(act + b * ab, n);
        for (uint64_t k = 0; k < nb; k++) {
            uint8_t *r = panel + (((k % S_L) * nbl + k / S_L) * B + b) * S_REC;
            int32_t sum = 0;
            for (int e = 0; e < QUANT_QK; e++)
                sum += y.qs[k * QUANT_QK + (uint64_t)e];
            const int32_t bias = -o * sum;
            memcpy(r, y.qs + k * QUANT_QK, QUANT_QK);
            memcpy(r + 32, &bias, 4);
            memcpy(r + 36, y.d + k, 4);
        }
    }
}

static void s_pack_q8(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab, uint8_t *panel,
                      uint64_t b0, uint64_t b1)
{
    s_pack(n, B, act, ab, panel, b0, b1, S_VNNI ? 128 : 0);
}

static void s_pack_q4(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab, uint8_t *panel,
                      uint64_t b0, uint64_t b1)
{
    s_pack(n, B, act, ab, panel, b0, b1, 8);
}

static inline __m256 s_dw8(const uint8_t *d, uint64_t st)
{
    return _mm256_cvtph_ps(_mm_setr_epi16(s_h(d), s_h(d + st), s_h(d + 2 * st), s_h(d + 3 * st),
                                          s_h(d + 4 * st), s_h(d + 5 * st), s_h(d + 6 * st),
                                          s_h(d + 7 * st)));
}

/* Q8_0 block k of 8 rows: an 8 x 8 dword transpose. */
static void s_q8_repack(const uint8_t *w, uint64_t rb, uint64_t k, uint8_t *out)
{
    const uint64_t off = k * sizeof(quant_block_q8_0);
    __m256i v[8], t[8], u[8];
    #pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        v[i] = _mm256_loadu_si256((const __m256i *)(w + (uint64_t)i * rb + off + 2));
    #pragma GCC unroll 8
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
    }
    #pragma GCC unroll 8
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);         /* quads 0, 4 of rows i..i+3 */
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);     /* 1, 5 */
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]); /* 2, 6 */
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]); /* 3, 7 */
    }
    const __m256i bias = _mm256_set1_epi8(S_VNNI ? (char)0x80 : 0);
    #pragma GCC unroll 8
    for (int q = 0; q < 4; q++) {
        _mm256_store_si256((__m256i *)(out + 32 * q),
                           _mm256_xor_si256(_mm256_permute2x128_si256(u[q], u[q + 4], 0x20), bias));
        _mm256_store_si256((__m256i *)(out + 32 * (q + 4)),
                           _mm256_xor_si256(_mm256_permute2x128_si256(u[q], u[q + 4], 0x31), bias));
    }
    _mm256_store_ps((float *)(out + 256), s_dw8(w + off, rb));
}

/* Q4_0: rows i and i + 4 in one vector's halves, a 4 x 4 transpose per half, nibbles split. */
static void s_q4_repack(const uint8_t *w, uint64_t rb, uint64_t k, uint8_t *out)
{
    const uint64_t off = k * sizeof(quant_block_q4_0);
    __m256i v[4];
    #pragma GCC unroll 8
    for (int i = 0; i < 4; i++) {
        const uint8_t *p = w + (uint64_t)i * rb + off + 2;
        v[i] = _mm256_loadu2_m128i((const __m128i *)(p + 4 * rb), (const __m128i *)p);
    }
    const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
    const __m256i q[4] = { _mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                           _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3) };
    const __m256i m = _mm256_set1_epi8(0x0F);
    #pragma GCC unroll 8
    for (int i = 0; i < 4; i++) {
        _mm256_store_si256((__m256i *)(out + 32 * i), _mm256_and_si256(q[i], m));
        _mm256_store_si256((__m256i *)(out + 32 * (i + 4)),
                           _mm256_and_si256(_mm256_srli_epi16(q[i], 4), m));
    }
    _mm256_store_ps((float *)(out + 256), s_dw8(w + off, rb));
}

/* acc += the 8 rows' quad products with the broadcast quad y (exact int32 sums of 4). */
static inline __m256i s_dot4(__m256i acc, __m256i w, __m256i y, int q8)
{
#if S_VNNI
    (void)q8;
    return _mm256_dpbusd_avx_epi32(acc, w, y);
#else
    const __m256i one = _mm256_set1_epi16(1);
    if (q8)
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(
                                                           _mm256_sign_epi8(w, w),
                                                           _mm256_sign_epi8(y, w)), one));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, y), one));
#endif
}

static inline __attribute__((always_inline)) void
s_tile(int q8, const quant_gemm_args *a, const uint8_t *rp, uint64_t r, uint64_t b, const int G,
       const int P)
{
    const uint64_t nb = a->n / QUANT_QK, nbl = s_nbl(nb);
    __m256 acc[S_G][S_P][S_L];
    for (int l = 0; l < S_L; l++) {
        __m256 f[S_G][S_P];
        #pragma GCC unroll 8
        for (int g = 0; g < G; g++)
            #pragma GCC unroll 8
            for (int p = 0; p < P; p++)
                f[g][p] = _mm256_setzero_ps();
        for (uint64_t k = (uint64_t)l, j = 0; k < nb; k += S_L, j++) {
            const uint64_t slot = (uint64_t)l * nbl + j;
            const uint8_t *wk = rp + slot * (uint64_t)G * S_GB;
            const uint8_t *pk = a->panel + (slot * a->B + b) * S_REC;
            __m256i s[S_G][S_P];
            #pragma GCC unroll 8
            for (int g = 0; g < G; g++)
                #pragma GCC unroll 8
                for (int p = 0; p < P; p++)
                    s[g][p] = _mm256_set1_epi32(s_i32(pk + p * S_REC + 32));
            #pragma GCC unroll 8
            for (int q = 0; q < 8; q++) {
                __m256i w[S_G];
                #pragma GCC unroll 8
                for (int g = 0; g < G; g++)
                    w[g] = _mm256_load_si256((const __m256i *)(wk + g * S_GB + 32 * q));
                #pragma GCC unroll 8
                for (int p = 0; p < P; p++) {
                    const __m256i y4 = _mm256_set1_epi32(s_i32(pk + p * S_REC + 4 * q));
                    #pragma GCC unroll 8
                    for (int g = 0; g < G; g++)
                        s[g][p] = s_dot4(s[g][p], w[g], y4, q8);
                }
            }
            #pragma GCC unroll 8
            for (int g = 0; g < G; g++) {
                const __m256 dw = _mm256_load_ps((const float *)(wk + g * S_GB + 256));
                #pragma GCC unroll 8
                for (int p = 0; p < P; p++) {
                    const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(s_f32(pk + p * S_REC + 36)));
                    f[g][p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[g][p]), d, f[g][p]);
                }
            }
        }
        #pragma GCC unroll 8
        for (int g = 0; g < G; g++)
            #pragma GCC unroll 8
            for (int p = 0; p < P; p++)
                acc[g][p][l] = f[g][p];
    }
    #pragma GCC unroll 8
    for (int g = 0; g < G; g++)
        #pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
            __m256 t[8];
            #pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                t[j] = _mm256_add_ps(acc[g][p][j], acc[g][p][j + 8]);
            #pragma GCC unroll 8
            for (int j = 0; j < 4; j++)
                t[j] = _mm256_add_ps(t[j], t[j + 4]);
            #pragma GCC unroll 8
            for (int j = 0; j < 2; j++)
                t[j] = _mm256_add_ps(t[j], t[j + 2]);
            _mm256_storeu_ps(a->Y + (b + (uint64_t)p) * a->ldy + r + 8 * (uint64_t)g,
                             _mm256_add_ps(t[0], t[1]));
        }
}

/* Rows [r0, r1) x positions [b0, b1): 16 rows repacked at a time, then 8, then the row kernel
 * (also for everything if the scratch cannot be had: the same bits). */
static inline void s_run(int q8, const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0,
                         uint64_t b1)
{
    const uint64_t nb = a->n / QUANT_QK, nbl = s_nbl(nb);
    uint8_t *rp = NULL;
    uint64_t r = r0;
    if (r1 - r0 >= 8 && posix_memalign((void **)&rp, 64, (size_t)(nbl * S_L * S_G * S_GB)))
        rp = NULL;
    while (rp && r + 8 <= r1) {
        const int G = r + 8 * S_G <= r1 ? S_G : 1;
        const uint8_t *w = a->W + r * a->row_bytes;
        for (uint64_t k = 0; k < nb; k++)
            #pragma GCC unroll 8
            for (int g = 0; g < G; g++) {
                uint8_t *o = rp + (((k % S_L) * nbl + k / S_L) * (uint64_t)G + (uint64_t)g) * S_GB;
                if (q8)
                    s_q8_repack(w + 8 * (uint64_t)g * a->row_bytes, a->row_bytes, k, o);
                else
                    s_q4_repack(w + 8 * (uint64_t)g * a->row_bytes, a->row_bytes, k, o);
            }
        for (uint64_t b = b0; b < b1; b += S_P) {
            if (G == S_G && b + S_P <= b1)
                s_tile(q8, a, rp, r, b, S_G, S_P);
            else
                for (uint64_t p = b; p < b + S_P && p < b1; p++)
                    s_tile(q8, a, rp, r, p, G, 1);
        }
        r += 8 * (uint64_t)G;
    }
    free(rp);
    for (; r < r1; r++)
        for (uint64_t p = b0; p < b1; p++)
            a->Y[p * a->ldy + r] = a->dot(a->n, a->W + r * a->row_bytes,
                                          a->act + p * a->act_bytes);
}

static void s_run_q8(const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1)
{
    s_run(1, a, r0, r1, b0, b1);
}

static void s_run_q4(const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1)
{
    s_run(0, a, r0, r1, b0, b1);
}

#endif

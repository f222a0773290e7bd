/* mxfp4_avx2.c — the AVX2 dot product of MXFP4 against the Q8_0 activation, lane for lane
 * quant/mxfp4.h's order. quant/
 *
 * Four blocks a pass as dot_x_avx2.c's IQ4_NL: two blocks' 16 nibble bytes side by side are
 * one vector, masked elements 0..15, shifted 16..31, meeting the activation's grouped copy
 * qs4 in one load each; the nibbles look their values up with vpshufb, which go in as |v|
 * with the activation taking v's sign (vpsignb), vpmaddubsw then vpmaddwd (|v| <= 12: no
 * saturation). The four scales are exact powers of two, made in scalar code.
 */
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "quant/mxfp4.h"
#include "quant/part_avx2.h"
#include "quant/reduce_avx.h"

static inline __attribute__((always_inline)) __m256i s_half(__m256i nib, __m256i y)
{
    const __m256i tab = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)quant_mxfp4_values));
    const __m256i v = _mm256_shuffle_epi8(tab, nib);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(y, v)),
                             _mm256_set1_epi16(1));
}

/* The four blocks' scales 2^(e - 128) (quant_e8m0_half) as f32 lanes without a branch:
 * e < 2 the subnormals 0x200000 << e, else (e - 1) << 23. Blocks k.. of a partial group are
 * not read (e = 0). */
static inline __attribute__((always_inline)) __m128 s_scales4(const uint8_t *x, size_t bb, int k)
{
    const __m128i e = _mm_setr_epi32(x[0], k > 1 ? x[bb] : 0, k > 2 ? x[2 * bb] : 0,
                                     k > 3 ? x[3 * bb] : 0);
    const __m128i nrm = _mm_slli_epi32(_mm_sub_epi32(e, _mm_set1_epi32(1)), 23);
    const __m128i sub = _mm_sllv_epi32(_mm_set1_epi32(0x200000), e);
    return _mm_castsi128_ps(_mm_blendv_epi8(nrm, sub, _mm_cmpgt_epi32(_mm_set1_epi32(2), e)));
}

/* One group of four blocks at x (k of them: 4 but in a row's last group, whose activation
 * has its k blocks' elements 0..15, then their 16..31: quant.h) into acc[0..3]; in a partial
 * group only the k blocks' lanes change, each by the fma quant_mxfp4_block gives it. */
static inline __attribute__((always_inline)) void s_group(const uint8_t *x, const quant_act_q8 *y,
                                                         uint64_t b, int k, __m256 acc[4])
{
    const size_t bb = sizeof(quant_block_mxfp4);
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i i01 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i i23 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    const __m128 dw = s_scales4(x, bb, k);
    const __m128i l4 = _mm_cmpgt_epi32(_mm_set1_epi32(k), _mm_setr_epi32(0, 1, 2, 3));
    const __m128 dx = k >= 4 ? _mm_loadu_ps(y->d + b) : _mm_maskload_ps(y->d + b, l4);
    const __m256 dd = _mm256_castps128_ps256(_mm_mul_ps(dw, dx));
    const __m256 d01 = _mm256_permutevar8x32_ps(dd, i01);
    const __m256 d23 = _mm256_permutevar8x32_ps(dd, i23);
    const int8_t *q = y->qs4 + b * 32;
    const __m256i v01 = quant_ld2x16(x + 1, x + bb + 1, 0, k);
    const __m256i v23 = quant_ld2x16(x + 2 * bb + 1, x + 3 * bb + 1, 2, k);
    const __m256i l01 = _mm256_and_si256(v01, m), l23 = _mm256_and_si256(v23, m);
    const __m256i u01 = _mm256_and_si256(_mm256_srli_epi16(v01, 4), m);
    const __m256i u23 = _mm256_and_si256(_mm256_srli_epi16(v23, 4), m);
    const __m256 s[4] = { _mm256_cvtepi32_ps(s_half(l01, quant_ld32(q, 0, k))),
                          _mm256_cvtepi32_ps(s_half(l23, quant_ld32(q + 32, 2, k))),
                          _mm256_cvtepi32_ps(s_half(u01, quant_ld32(q + 16 * k, 0, k))),
                          _mm256_cvtepi32_ps(s_half(u23, quant_ld32(q + 16 * k + 32, 2, k))) };
    const __m256 d[4] = { d01, d23, d01, d23 };
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        acc[i] = k >= 4 ? _mm256_fmadd_ps(s[i], d[i], acc[i])
                        : quant_fma_keep(s[i], d[i], acc[i],
                                         quant_lanes_below(k, i % 2 ? i23 : i01));
}

float quant_dot_mxfp4_avx2(uint64_t n, const void *w, const void *act)
{
    const uint8_t *x = w;
    const size_t bb = sizeof(quant_block_mxfp4);
    const quant_act_q8 y = quant_act_view(act, n);
    const uint64_t nb = n / QUANT_QK;
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                      _mm256_setzero_ps() };
    float a[QUANT_LANES];
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP, x += QUANT_QB_GROUP * bb) {
        quant_prefetch(x, (unsigned)(QUANT_QB_GROUP * bb));
        s_group(x, &y, b, QUANT_QB_GROUP, acc);
    }
    if (b < nb) /* the last 1..3 blocks (part_avx2.h) */
        s_group(x, &y, b, (int)(nb - b), acc);
    for (int i = 0; i < 4; i++)
        _mm256_storeu_ps(a + 8 * i, acc[i]);
    return quant_reduce32_avx(a);
}

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
#include "quant/reduce_avx.h"

static inline __m256i s_half(__m256i nib, const int8_t *yq)
{
    const __m256i tab = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)quant_mxfp4_values));
    const __m256i y = _mm256_loadu_si256((const __m256i *)yq);
    const __m256i v = _mm256_shuffle_epi8(tab, nib);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(y, v)),
                             _mm256_set1_epi16(1));
}

/* The four blocks' scales 2^(e - 128) (quant_e8m0_half) as f32 lanes without a branch:
 * e < 2 the subnormals 0x200000 << e, else (e - 1) << 23. */
static inline __m128 s_scales4(const uint8_t *x, size_t bb)
{
    const __m128i e = _mm_setr_epi32(x[0], x[bb], x[2 * bb], x[3 * bb]);
    const __m128i nrm = _mm_slli_epi32(_mm_sub_epi32(e, _mm_set1_epi32(1)), 23);
    const __m128i sub = _mm_sllv_epi32(_mm_set1_epi32(0x200000), e);
    return _mm_castsi128_ps(_mm_blendv_epi8(nrm, sub, _mm_cmpgt_epi32(_mm_set1_epi32(2), e)));
}

float quant_dot_mxfp4_avx2(uint64_t n, const void *w, const void *act)
{
    const uint8_t *x = w;
    const size_t bb = sizeof(quant_block_mxfp4);
    const quant_act_q8 y = quant_act_view(act, n);
    const uint64_t nb = n / QUANT_QK;
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i i01 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i i23 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    float a[QUANT_LANES];
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP, x += QUANT_QB_GROUP * bb) {
        quant_prefetch(x, (unsigned)(QUANT_QB_GROUP * bb));
        const __m128 dw = s_scales4(x, bb);
        const __m256 dd = _mm256_castps128_ps256(_mm_mul_ps(dw, _mm_loadu_ps(y.d + b)));
        const __m256 d01 = _mm256_permutevar8x32_ps(dd, i01);
        const __m256 d23 = _mm256_permutevar8x32_ps(dd, i23);
        const int8_t *q = y.qs4 + b * 32;
        const __m256i v01 = _mm256_loadu2_m128i((const __m128i *)(x + bb + 1),
                                                (const __m128i *)(x + 1));
        const __m256i v23 = _mm256_loadu2_m128i((const __m128i *)(x + 3 * bb + 1),
                                                (const __m128i *)(x + 2 * bb + 1));
        const __m256i l01 = _mm256_and_si256(v01, m), l23 = _mm256_and_si256(v23, m);
        const __m256i u01 = _mm256_and_si256(_mm256_srli_epi16(v01, 4), m);
        const __m256i u23 = _mm256_and_si256(_mm256_srli_epi16(v23, 4), m);
        a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s_half(l01, q)), d01, a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s_half(l23, q + 32)), d23, a1);
        a2 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s_half(u01, q + 64)), d01, a2);
        a3 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s_half(u23, q + 96)), d23, a3);
    }
    _mm256_storeu_ps(a, a0);
    _mm256_storeu_ps(a + 8, a1);
    _mm256_storeu_ps(a + 16, a2);
    _mm256_storeu_ps(a + 24, a3);
    for (; b < nb; b++, x += bb)
        quant_mxfp4_block((const quant_block_mxfp4 *)x, b, &y, a);
    return quant_reduce32_avx(a);
}

/* mxfp4_avx512.c — the AVX-512 (BW + VL + VNNI) dot product of MXFP4 against the Q8_0
 * activation, lane for lane quant/mxfp4.h's order. quant/
 *
 * Four blocks a pass as dot_x_avx512.c's IQ4_NL: the four blocks' 16 nibble bytes in one
 * vector's quarters; the values, looked up with vpshufb as value + 128 (116..140, unsigned),
 * meet the signed activation in vpdpbusd, which starts each quad from -128 * its sum (16 *
 * bias8) so the sums come out exact, with no int16 step.
 */
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#include <immintrin.h>

#include "quant/mxfp4.h"
#include "quant/reduce_avx.h"

static inline __m512i s_half(__m512i lv, const int8_t *yq, const int32_t *b8)
{
    const __m512i tab = _mm512_broadcast_i32x4(_mm_xor_si128(
        _mm_loadu_si128((const __m128i *)quant_mxfp4_values), _mm_set1_epi8((char)0x80)));
    return _mm512_dpbusd_epi32(_mm512_slli_epi32(_mm512_loadu_si512(b8), 4),
                               _mm512_shuffle_epi8(tab, lv), _mm512_loadu_si512(yq));
}

/* The four blocks' scales 2^(e - 128) (quant_e8m0_half) as f32 lanes: their exponent bytes
 * (offsets 0, 17, 34, 51 of the group) picked from its first 64 bytes by one word permute,
 * then ggml's two cases: e < 2 the subnormals 0x200000 << e, else (e - 1) << 23. Made in
 * scalar code this took a third of the kernel's time. */
static inline __m128 s_scales4(const uint8_t *x)
{
    const __m512i ix = _mm512_castsi128_si512(_mm_setr_epi16(0, 0, 8, 0, 17, 0, 25, 0));
    __m128i e = _mm512_castsi512_si128(_mm512_permutexvar_epi16(ix, _mm512_loadu_si512(x)));
    e = _mm_and_si128(_mm_srlv_epi32(e, _mm_setr_epi32(0, 8, 0, 8)), _mm_set1_epi32(0xFF));
    const __m128i nrm = _mm_slli_epi32(_mm_sub_epi32(e, _mm_set1_epi32(1)), 23);
    const __m128i sub = _mm_sllv_epi32(_mm_set1_epi32(0x200000), e);
    return _mm_castsi128_ps(_mm_mask_blend_epi32(_mm_cmplt_epi32_mask(e, _mm_set1_epi32(2)),
                                                 nrm, sub));
}

float quant_dot_mxfp4_avx512(uint64_t n, const void *w, const void *act)
{
    const uint8_t *x = w;
    const size_t bb = sizeof(quant_block_mxfp4);
    const quant_act_q8 y = quant_act_view(act, n);
    const uint64_t nb = n / QUANT_QK;
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i m = _mm512_set1_epi8(0x0F);
    __m512 z0 = _mm512_setzero_ps(), z1 = z0;
    float a[QUANT_LANES];
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP, x += QUANT_QB_GROUP * bb) {
        quant_prefetch(x, (unsigned)(QUANT_QB_GROUP * bb));
        const __m128 dw = s_scales4(x);
        const __m512 d = _mm512_permutexvar_ps(
            idx, _mm512_castps128_ps512(_mm_mul_ps(dw, _mm_loadu_ps(y.d + b))));
        __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(x + 1)));
        v = _mm512_mask_broadcast_i32x4(v, 0x00F0, _mm_loadu_si128((const __m128i *)(x + bb + 1)));
        v = _mm512_mask_broadcast_i32x4(v, 0x0F00,
                                        _mm_loadu_si128((const __m128i *)(x + 2 * bb + 1)));
        v = _mm512_mask_broadcast_i32x4(v, 0xF000,
                                        _mm_loadu_si128((const __m128i *)(x + 3 * bb + 1)));
        const __m512i lo = _mm512_and_si512(v, m);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
        const int8_t *q = y.qs4 + b * 32;
        const int32_t *b8 = y.bias8 + b * 8;
        z0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s_half(lo, q, b8)), d, z0);
        z1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s_half(hi, q + 64, b8 + 16)), d, z1);
    }
    _mm512_storeu_ps(a, z0);
    _mm512_storeu_ps(a + 16, z1);
    for (; b < nb; b++, x += bb)
        quant_mxfp4_block((const quant_block_mxfp4 *)x, b, &y, a);
    return quant_reduce32_avx(a);
}

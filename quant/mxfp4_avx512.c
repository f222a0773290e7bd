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
#include "quant/part_avx512.h"
#include "quant/reduce_avx.h"

static inline __attribute__((always_inline)) __m512i s_half(__m512i lv, __m512i y,
                                                           const int32_t *b8)
{
    const __m512i tab = _mm512_broadcast_i32x4(_mm_xor_si128(
        _mm_loadu_si128((const __m128i *)quant_mxfp4_values), _mm_set1_epi8((char)0x80)));
    return _mm512_dpbusd_epi32(_mm512_slli_epi32(_mm512_loadu_si512(b8), 4),
                               _mm512_shuffle_epi8(tab, lv), y);
}

/* The four blocks' scales 2^(e - 128) (quant_e8m0_half) as f32 lanes: their exponent bytes
 * (offsets 0, 17, 34, 51 of the group) picked from its first 64 bytes by one word permute,
 * then ggml's two cases: e < 2 the subnormals 0x200000 << e, else (e - 1) << 23. Made in
 * scalar code this took a third of the kernel's time. kg: the blocks present (4 but in a
 * row's last group), the load stopping at their end. */
static inline __attribute__((always_inline)) __m128 s_scales4(const uint8_t *x, int kg)
{
    const __m512i ix = _mm512_castsi128_si512(_mm_setr_epi16(0, 0, 8, 0, 17, 0, 25, 0));
    const __m512i g = quant_ld64_k(x, kg * (int)sizeof(quant_block_mxfp4));
    __m128i e = _mm512_castsi512_si128(_mm512_permutexvar_epi16(ix, g));
    e = _mm_and_si128(_mm_srlv_epi32(e, _mm_setr_epi32(0, 8, 0, 8)), _mm_set1_epi32(0xFF));
    const __m128i nrm = _mm_slli_epi32(_mm_sub_epi32(e, _mm_set1_epi32(1)), 23);
    const __m128i sub = _mm_sllv_epi32(_mm_set1_epi32(0x200000), e);
    return _mm_castsi128_ps(_mm_mask_blend_epi32(_mm_cmplt_epi32_mask(e, _mm_set1_epi32(2)),
                                                 nrm, sub));
}

/* One group of four blocks at x (kg of them: 4 but in a row's last group, whose activation
 * has its kg blocks' elements 0..15, then their 16..31: quant.h) into z0 / z1. In a partial
 * group the loads stop at the row's end (masked: absent blocks are zero, nothing past read)
 * and only the kg blocks' lanes change, each by the fma quant_mxfp4_block gives it: that
 * scalar block cost as much as ~60 vector ones. */
static inline __attribute__((always_inline)) void s_group(const uint8_t *x, const quant_act_q8 *y,
                                                         uint64_t b, int kg, __m512 *z0,
                                                         __m512 *z1)
{
    const int bb = (int)sizeof(quant_block_mxfp4);
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i m = _mm512_set1_epi8(0x0F);
    const __mmask16 lm = (__mmask16)((1u << (4 * kg)) - 1), l4 = (__mmask16)((1u << kg) - 1);
    const __m128 dw = s_scales4(x, kg);
    const __m128 dx = kg >= 4 ? _mm_loadu_ps(y->d + b) : _mm_maskz_loadu_ps(l4, y->d + b);
    const __m512 d = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_mul_ps(dw, dx)));
    __m512i v = _mm512_broadcast_i32x4(quant_ld16_k(x + 1, 0, kg));
    v = _mm512_mask_broadcast_i32x4(v, 0x00F0, quant_ld16_k(x + bb + 1, 1, kg));
    v = _mm512_mask_broadcast_i32x4(v, 0x0F00, quant_ld16_k(x + 2 * bb + 1, 2, kg));
    v = _mm512_mask_broadcast_i32x4(v, 0xF000, quant_ld16_k(x + 3 * bb + 1, 3, kg));
    const __m512i lo = _mm512_and_si512(v, m);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
    const int8_t *q = y->qs4 + b * 32;
    const int32_t *b8 = y->bias8 + b * 8;
    const __m512 s0 = _mm512_cvtepi32_ps(s_half(lo, quant_ld64_k(q, 16 * kg), b8));
    const __m512 s1 = _mm512_cvtepi32_ps(s_half(hi, quant_ld64_k(q + 16 * kg, 16 * kg), b8 + 16));
    if (kg >= 4) {
        *z0 = _mm512_fmadd_ps(s0, d, *z0);
        *z1 = _mm512_fmadd_ps(s1, d, *z1);
    } else {
        *z0 = _mm512_mask3_fmadd_ps(s0, d, *z0, lm);
        *z1 = _mm512_mask3_fmadd_ps(s1, d, *z1, lm);
    }
}

float quant_dot_mxfp4_avx512(uint64_t n, const void *w, const void *act)
{
    const uint8_t *x = w;
    const size_t bb = sizeof(quant_block_mxfp4);
    const quant_act_q8 y = quant_act_view(act, n);
    const uint64_t nb = n / QUANT_QK;
    __m512 z0 = _mm512_setzero_ps(), z1 = z0;
    float a[QUANT_LANES];
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP, x += QUANT_QB_GROUP * bb) {
        quant_prefetch(x, (unsigned)(QUANT_QB_GROUP * bb));
        s_group(x, &y, b, QUANT_QB_GROUP, &z0, &z1);
    }
    if (b < nb) /* the last 1..3 blocks */
        s_group(x, &y, b, (int)(nb - b), &z0, &z1);
    _mm512_storeu_ps(a, z0);
    _mm512_storeu_ps(a + 16, z1);
    return quant_reduce32_avx(a);
}

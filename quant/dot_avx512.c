/* dot_avx512.c — AVX-512 (F+BW+VL+VNNI) dot products, lane for lane the order of quant.h. quant/
 *
 * Two 16-lane accumulators are the 32 lanes (z0 = lanes 0..15, z1 = 16..31). For the
 * quantized types a group of 4 blocks fills them: blocks b, b+1 in z0 and b+2, b+3 in z1,
 * each block's 8 quads in 8 lanes, which is exactly what vpdpbusd produces (one int32 per 4
 * adjacent bytes, exact: no int16 step, so nothing to saturate). A row's leftover blocks go
 * one at a time into their 8 lanes with the 256-bit forms (AVX512VL).
 */
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#include <immintrin.h>

#include "quant/quant_int.h"

static inline void s_store2(float *a, __m512 z0, __m512 z1)
{
    _mm512_storeu_ps(a, z0);
    _mm512_storeu_ps(a + 16, z1);
}

float quant_dot_f32_avx512(uint64_t n, const void *wv, const void *act)
{
    const float *w = wv, *x = act;
    __m512 z0 = _mm512_setzero_ps(), z1 = z0;
    float a[QUANT_LANES];
    uint64_t i = 0;
    for (; i + QUANT_LANES <= n; i += QUANT_LANES) {
        z0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), z0);
        z1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), z1);
    }
    s_store2(a, z0, z1);
    quant_tail_f32(w, x, i, n, a);
    return quant_reduce32(a);
}

static inline __m512 s_f16x16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

float quant_dot_f16_avx512(uint64_t n, const void *wv, const void *act)
{
    const uint16_t *w = wv;
    const float *x = act;
    __m512 z0 = _mm512_setzero_ps(), z1 = z0;
    float a[QUANT_LANES];
    uint64_t i = 0;
    for (; i + QUANT_LANES <= n; i += QUANT_LANES) {
        z0 = _mm512_fmadd_ps(s_f16x16(w + i), _mm512_loadu_ps(x + i), z0);
        z1 = _mm512_fmadd_ps(s_f16x16(w + i + 16), _mm512_loadu_ps(x + i + 16), z1);
    }
    s_store2(a, z0, z1);
    quant_tail_f16(w, x, i, n, a);
    return quant_reduce32(a);
}

static inline __m512 s_bf16x16(const uint16_t *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

float quant_dot_bf16_avx512(uint64_t n, const void *wv, const void *act)
{
    const uint16_t *w = wv;
    const float *x = act;
    __m512 z0 = _mm512_setzero_ps(), z1 = z0;
    float a[QUANT_LANES];
    uint64_t i = 0;
    for (; i + QUANT_LANES <= n; i += QUANT_LANES) {
        z0 = _mm512_fmadd_ps(s_bf16x16(w + i), _mm512_loadu_ps(x + i), z0);
        z1 = _mm512_fmadd_ps(s_bf16x16(w + i + 16), _mm512_loadu_ps(x + i + 16), z1);
    }
    s_store2(a, z0, z1);
    quant_tail_bf16(w, x, i, n, a);
    return quant_reduce32(a);
}

/* Quad sums of x . y as f32 (exact): vpdpbusd wants unsigned x bytes, so take |x| and move
 * x's sign onto y (AVX-512 has no vpsignb: negate y under the mask of negative x). */
static inline __m512 s_quads512(__m512i x, __m512i y)
{
    const __mmask64 neg = _mm512_movepi8_mask(x);
    const __m512i sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
    const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(x), sy);
    return _mm512_cvtepi32_ps(s);
}

static inline __m256 s_quads256(__m256i x, __m256i y)
{
    const __mmask32 neg = _mm256_movepi8_mask(x);
    const __m256i sy = _mm256_mask_sub_epi8(y, neg, _mm256_setzero_si256(), y);
    const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(x), sy);
    return _mm256_cvtepi32_ps(s);
}

static inline __m512i s_join(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* The four blocks' scale products d_w * d_x (f32 multiplies, as the scalar code does), laid
 * out for z0 (blocks 0, 1: 8 lanes each) and z1 (blocks 2, 3). */
static inline void s_scales4(uint16_t w0, uint16_t w1, uint16_t w2, uint16_t w3, uint16_t x0,
                             uint16_t x1, uint16_t x2, uint16_t x3, __m512 *d01, __m512 *d23)
{
    const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16((short)w0, (short)w1, (short)w2, (short)w3,
                                                  0, 0, 0, 0));
    const __m128 dx = _mm_cvtph_ps(_mm_setr_epi16((short)x0, (short)x1, (short)x2, (short)x3,
                                                  0, 0, 0, 0));
    const __m512 d = _mm512_castps128_ps512(_mm_mul_ps(dw, dx));
    *d01 = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), d);
    *d23 = _mm512_permutexvar_ps(_mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), d);
}

static inline __m256i s_q4_values(const uint8_t *qs)
{
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_sub_epi8(_mm256_and_si256(b, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

static inline __m256i s_q8_values(const int8_t *qs)
{
    return _mm256_loadu_si256((const __m256i *)qs);
}

/* One leftover block b into its 8 lanes of a[]. */
static inline void s_tail_block(float *a, uint64_t b, __m256i xv, __m256i yv, uint16_t dw,
                                uint16_t dx)
{
    float *lane = a + (b % QUANT_QB_GROUP) * QUANT_QB_LANES;
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(dw) * _cvtsh_ss(dx));
    _mm256_storeu_ps(lane, _mm256_fmadd_ps(s_quads256(xv, yv), d, _mm256_loadu_ps(lane)));
}

float quant_dot_q8_0_avx512(uint64_t n, const void *wv, const void *act)
{
    const quant_block_q8_0 *x = wv, *y = act;
    const uint64_t nb = n / QUANT_QK;
    __m512 z0 = _mm512_setzero_ps(), z1 = z0, d01, d23;
    float a[QUANT_LANES];
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP) {
        const quant_block_q8_0 *p = x + b, *q = y + b;
        s_scales4(p[0].d, p[1].d, p[2].d, p[3].d, q[0].d, q[1].d, q[2].d, q[3].d, &d01, &d23);
        __m512 s01 = s_quads512(s_join(s_q8_values(p[0].qs), s_q8_values(p[1].qs)),
                                s_join(s_q8_values(q[0].qs), s_q8_values(q[1].qs)));
        __m512 s23 = s_quads512(s_join(s_q8_values(p[2].qs), s_q8_values(p[3].qs)),
                                s_join(s_q8_values(q[2].qs), s_q8_values(q[3].qs)));
        z0 = _mm512_fmadd_ps(s01, d01, z0);
        z1 = _mm512_fmadd_ps(s23, d23, z1);
    }
    s_store2(a, z0, z1);
    for (; b < nb; b++)
        s_tail_block(a, b, s_q8_values(x[b].qs), s_q8_values(y[b].qs), x[b].d, y[b].d);
    return quant_reduce32(a);
}

float quant_dot_q4_0_avx512(uint64_t n, const void *wv, const void *act)
{
    const quant_block_q4_0 *x = wv;
    const quant_block_q8_0 *y = act;
    const uint64_t nb = n / QUANT_QK;
    __m512 z0 = _mm512_setzero_ps(), z1 = z0, d01, d23;
    float a[QUANT_LANES];
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP) {
        const quant_block_q4_0 *p = x + b;
        const quant_block_q8_0 *q = y + b;
        s_scales4(p[0].d, p[1].d, p[2].d, p[3].d, q[0].d, q[1].d, q[2].d, q[3].d, &d01, &d23);
        __m512 s01 = s_quads512(s_join(s_q4_values(p[0].qs), s_q4_values(p[1].qs)),
                                s_join(s_q8_values(q[0].qs), s_q8_values(q[1].qs)));
        __m512 s23 = s_quads512(s_join(s_q4_values(p[2].qs), s_q4_values(p[3].qs)),
                                s_join(s_q8_values(q[2].qs), s_q8_values(q[3].qs)));
        z0 = _mm512_fmadd_ps(s01, d01, z0);
        z1 = _mm512_fmadd_ps(s23, d23, z1);
    }
    s_store2(a, z0, z1);
    for (; b < nb; b++)
        s_tail_block(a, b, s_q4_values(x[b].qs), s_q8_values(y[b].qs), x[b].d, y[b].d);
    return quant_reduce32(a);
}

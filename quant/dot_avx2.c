/* dot_avx2.c — AVX2 + FMA + F16C dot products, lane for lane the scalar order of quant.h. quant/
 *
 * Compiled for those extensions with a target pragma (the rest of swarm is built for the
 * baseline x86-64), and only called after dot.c has asked cpuid that the CPU has them.
 * Four 8-lane accumulators are the 32 lanes; a row's leftover elements or blocks finish in
 * the same lanes (the scalar tail, or one block at a time), then one reduction tree.
 */
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "quant/quant_int.h"

/* Exact widening of one IEEE half (F16C). */
static inline float s_h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

static inline void s_store4(float *a, __m256 a0, __m256 a1, __m256 a2, __m256 a3)
{
    _mm256_storeu_ps(a, a0);
    _mm256_storeu_ps(a + 8, a1);
    _mm256_storeu_ps(a + 16, a2);
    _mm256_storeu_ps(a + 24, a3);
}

float quant_dot_f32_avx2(uint64_t n, const void *wv, const void *act)
{
    const float *w = wv, *x = act;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    float a[QUANT_LANES];
    uint64_t i = 0;
    for (; i + QUANT_LANES <= n; i += QUANT_LANES) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    s_store4(a, a0, a1, a2, a3);
    quant_tail_f32(w, x, i, n, a);
    return quant_reduce32(a);
}

static inline __m256 s_f16x8(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

float quant_dot_f16_avx2(uint64_t n, const void *wv, const void *act)
{
    const uint16_t *w = wv;
    const float *x = act;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    float a[QUANT_LANES];
    uint64_t i = 0;
    for (; i + QUANT_LANES <= n; i += QUANT_LANES) {
        a0 = _mm256_fmadd_ps(s_f16x8(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(s_f16x8(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(s_f16x8(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(s_f16x8(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    s_store4(a, a0, a1, a2, a3);
    quant_tail_f16(w, x, i, n, a);
    return quant_reduce32(a);
}

/* bf16 is the top half of an f32: widen to 32 bits and shift left 16 (exact). */
static inline __m256 s_bf16x8(const uint16_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

float quant_dot_bf16_avx2(uint64_t n, const void *wv, const void *act)
{
    const uint16_t *w = wv;
    const float *x = act;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    float a[QUANT_LANES];
    uint64_t i = 0;
    for (; i + QUANT_LANES <= n; i += QUANT_LANES) {
        a0 = _mm256_fmadd_ps(s_bf16x8(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(s_bf16x8(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(s_bf16x8(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(s_bf16x8(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    s_store4(a, a0, a1, a2, a3);
    quant_tail_bf16(w, x, i, n, a);
    return quant_reduce32(a);
}

/* Eight exact int32 sums of 4 products each (quad q = bytes 4q..4q+3) of two vectors of 32
 * signed bytes, as ggml's mul_sum_i8_pairs: |x| (unsigned) times y carrying x's sign, pairs
 * summed to int16 by maddubs, pairs of those to int32. The int16 step cannot saturate:
 * |x| <= 128 and |y| <= 127 (activations come from quantize_row_q8_0_ref), 2*128*127 < 2^15. */
static inline __m256i s_quads_signed(__m256i x, __m256i y)
{
    const __m256i ax = _mm256_sign_epi8(x, x);
    const __m256i sy = _mm256_sign_epi8(y, x);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

/* The scale products d_w * d_x of blocks b..b+3 (4 f32 multiplies, as the scalar code does
 * one at a time) and a broadcast of lane k: one f16 conversion per 4 blocks, not per block. */
static inline __m128 s_scales4(const uint16_t w[4], const float *dx)
{
    const __m128i h = _mm_setr_epi16((short)w[0], (short)w[1], (short)w[2], (short)w[3], 0, 0,
                                     0, 0);
    return _mm_mul_ps(_mm_cvtph_ps(h), _mm_loadu_ps(dx));
}

static inline __m256 s_lane(__m128 d4, int k)
{
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(d4), _mm256_set1_epi32(k));
}

static inline __m256 s_q8_quads(const quant_block_q8_0 *x, const int8_t *yq)
{
    return _mm256_cvtepi32_ps(s_quads_signed(_mm256_loadu_si256((const __m256i *)x->qs),
                                             _mm256_loadu_si256((const __m256i *)yq)));
}

float quant_dot_q8_0_avx2(uint64_t n, const void *wv, const void *act)
{
    const quant_block_q8_0 *x = wv;
    const quant_act_q8 y = quant_act_view(act, n);
    const uint64_t nb = n / QUANT_QK;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    float a[QUANT_LANES];
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP) {
        const uint16_t dw[4] = { x[b].d, x[b + 1].d, x[b + 2].d, x[b + 3].d };
        const __m128 d4 = s_scales4(dw, y.d + b);
        const int8_t *yq = y.qs + b * QUANT_QK;
        a0 = _mm256_fmadd_ps(s_q8_quads(x + b, yq), s_lane(d4, 0), a0);
        a1 = _mm256_fmadd_ps(s_q8_quads(x + b + 1, yq + 32), s_lane(d4, 1), a1);
        a2 = _mm256_fmadd_ps(s_q8_quads(x + b + 2, yq + 64), s_lane(d4, 2), a2);
        a3 = _mm256_fmadd_ps(s_q8_quads(x + b + 3, yq + 96), s_lane(d4, 3), a3);
    }
    s_store4(a, a0, a1, a2, a3);
    for (; b < nb; b++) {
        float *lane = a + (b % QUANT_QB_GROUP) * QUANT_QB_LANES;
        const __m256 d = _mm256_set1_ps(s_h2f(x[b].d) * y.d[b]);
        _mm256_storeu_ps(lane, _mm256_fmadd_ps(s_q8_quads(x + b, y.qs + b * QUANT_QK), d,
                                               _mm256_loadu_ps(lane)));
    }
    return quant_reduce32(a);
}

/* A Q4_0 block's quads: its 32 nibbles in element order (low nibbles of the 16 bytes are
 * elements 0..15, high nibbles 16..31) as unsigned bytes 0..15 times the activation's signed
 * bytes (maddubs: 2 * 15 * 127 < 2^15, no saturation), pairs to int32, plus -8 * the quad's
 * activation sum: exactly sum (nibble - 8) * y. */
static inline __m256 s_q4_quads(const quant_block_q4_0 *x, const int8_t *yq, const int32_t *b8)
{
    const __m128i t = _mm_loadu_si128((const __m128i *)x->qs);
    const __m256i v = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1),
        _mm256_set1_epi8(0x0F));
    const __m256i p = _mm256_madd_epi16(
        _mm256_maddubs_epi16(v, _mm256_loadu_si256((const __m256i *)yq)), _mm256_set1_epi16(1));
    return _mm256_cvtepi32_ps(_mm256_add_epi32(p, _mm256_loadu_si256((const __m256i *)b8)));
}

float quant_dot_q4_0_avx2(uint64_t n, const void *wv, const void *act)
{
    const quant_block_q4_0 *x = wv;
    const quant_act_q8 y = quant_act_view(act, n);
    const uint64_t nb = n / QUANT_QK;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    float a[QUANT_LANES];
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP) {
        const uint16_t dw[4] = { x[b].d, x[b + 1].d, x[b + 2].d, x[b + 3].d };
        const __m128 d4 = s_scales4(dw, y.d + b);
        const int8_t *yq = y.qs + b * QUANT_QK;
        const int32_t *b8 = y.bias8 + b * 8;
        a0 = _mm256_fmadd_ps(s_q4_quads(x + b, yq, b8), s_lane(d4, 0), a0);
        a1 = _mm256_fmadd_ps(s_q4_quads(x + b + 1, yq + 32, b8 + 8), s_lane(d4, 1), a1);
        a2 = _mm256_fmadd_ps(s_q4_quads(x + b + 2, yq + 64, b8 + 16), s_lane(d4, 2), a2);
        a3 = _mm256_fmadd_ps(s_q4_quads(x + b + 3, yq + 96, b8 + 24), s_lane(d4, 3), a3);
    }
    s_store4(a, a0, a1, a2, a3);
    for (; b < nb; b++) {
        float *lane = a + (b % QUANT_QB_GROUP) * QUANT_QB_LANES;
        const __m256 d = _mm256_set1_ps(s_h2f(x[b].d) * y.d[b]);
        _mm256_storeu_ps(lane, _mm256_fmadd_ps(s_q4_quads(x + b, y.qs + b * QUANT_QK,
                                                          y.bias8 + b * 8),
                                               d, _mm256_loadu_ps(lane)));
    }
    return quant_reduce32(a);
}

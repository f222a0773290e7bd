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
static inline __m256 s_quads(__m256i x, __m256i y)
{
    const __m256i ax = _mm256_sign_epi8(x, x);
    const __m256i sy = _mm256_sign_epi8(y, x);
    const __m256i p16 = _mm256_maddubs_epi16(ax, sy);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

static inline __m256 s_q8_block(const quant_block_q8_0 *x, const quant_block_q8_0 *y, __m256 acc)
{
    const __m256 d = _mm256_set1_ps(s_h2f(x->d) * s_h2f(y->d));
    const __m256 s = s_quads(_mm256_loadu_si256((const __m256i *)x->qs),
                             _mm256_loadu_si256((const __m256i *)y->qs));
    return _mm256_fmadd_ps(s, d, acc);
}

float quant_dot_q8_0_avx2(uint64_t n, const void *wv, const void *act)
{
    const quant_block_q8_0 *x = wv, *y = act;
    const uint64_t nb = n / QUANT_QK;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    float a[QUANT_LANES];
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP) {
        a0 = s_q8_block(x + b, y + b, a0);
        a1 = s_q8_block(x + b + 1, y + b + 1, a1);
        a2 = s_q8_block(x + b + 2, y + b + 2, a2);
        a3 = s_q8_block(x + b + 3, y + b + 3, a3);
    }
    s_store4(a, a0, a1, a2, a3);
    for (; b < nb; b++) {
        float *lane = a + (b % QUANT_QB_GROUP) * QUANT_QB_LANES;
        _mm256_storeu_ps(lane, s_q8_block(x + b, y + b, _mm256_loadu_ps(lane)));
    }
    return quant_reduce32(a);
}

/* A Q4_0 block's 32 values as signed bytes in element order: low nibbles of the 16 bytes are
 * elements 0..15 (first 128 bits), high nibbles 16..31 (second), each minus 8. */
static inline __m256i s_q4_values(const uint8_t *qs)
{
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_sub_epi8(_mm256_and_si256(b, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

static inline __m256 s_q4_block(const quant_block_q4_0 *x, const quant_block_q8_0 *y, __m256 acc)
{
    const __m256 d = _mm256_set1_ps(s_h2f(x->d) * s_h2f(y->d));
    const __m256 s = s_quads(s_q4_values(x->qs), _mm256_loadu_si256((const __m256i *)y->qs));
    return _mm256_fmadd_ps(s, d, acc);
}

float quant_dot_q4_0_avx2(uint64_t n, const void *wv, const void *act)
{
    const quant_block_q4_0 *x = wv;
    const quant_block_q8_0 *y = act;
    const uint64_t nb = n / QUANT_QK;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    float a[QUANT_LANES];
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP) {
        a0 = s_q4_block(x + b, y + b, a0);
        a1 = s_q4_block(x + b + 1, y + b + 1, a1);
        a2 = s_q4_block(x + b + 2, y + b + 2, a2);
        a3 = s_q4_block(x + b + 3, y + b + 3, a3);
    }
    s_store4(a, a0, a1, a2, a3);
    for (; b < nb; b++) {
        float *lane = a + (b % QUANT_QB_GROUP) * QUANT_QB_LANES;
        _mm256_storeu_ps(lane, s_q4_block(x + b, y + b, _mm256_loadu_ps(lane)));
    }
    return quant_reduce32(a);
}

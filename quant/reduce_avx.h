/* reduce_avx.h — quant_reduce32's tree in AVX vectors, for the SIMD kernels only. quant/
 *
 * Included after a file's `#pragma GCC target` (AVX at least). The same IEEE additions in the
 * same order as quant_reduce32 (dot.c), so the same bits: t[j] = (a[j] + a[j+8]) + (a[j+16] +
 * a[j+24]) is one 8-wide step, then t[j] + t[j+4], u[j] + u[j+2] and v[0] + v[1]. The scalar
 * call read the 32 lanes back one at a time and added them one by one, a fixed cost per row
 * that a 2048-element row of Q4_0 or Q4_K (16 or 8 loop passes) felt.
 */
#ifndef SWARM_QUANT_REDUCE_AVX_H
#define SWARM_QUANT_REDUCE_AVX_H

#include <immintrin.h>

#include "quant/quant_int.h"

static inline float quant_reduce32_avx(const float a[QUANT_LANES])
{
    const __m256 t = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(a), _mm256_loadu_ps(a + 8)),
                                   _mm256_add_ps(_mm256_loadu_ps(a + 16),
                                                 _mm256_loadu_ps(a + 24)));
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

/* quant_reduce16's tree (Q8_0, Q4_0): t[j] = a[j] + a[j+8], then as above. */
static inline float quant_reduce16_avx(const float a[QUANT_QB_BLANES])
{
    const __m256 t = _mm256_add_ps(_mm256_loadu_ps(a), _mm256_loadu_ps(a + 8));
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

#endif

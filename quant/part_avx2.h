/* part_avx2.h — loads for a row's last, partial group of blocks in the AVX2 kernels. quant/
 *
 * Included after a file's `#pragma GCC target` (AVX2 at least). A row whose block count is
 * not a multiple of its kernel's group finished its last blocks in scalar code, which cost
 * as much per block as ~60 vector ones (a 2880-wide row, gpt-oss's: 90 blocks of 32, Q4_0 /
 * Q8_0 leave 10 of them, 2026-12-02). With these the group code runs them instead: a present
 * block is loaded as in a whole group, an absent one is zero and never read (nothing past
 * the row or the activation), and only the present blocks' lanes of the accumulators change,
 * each by the same one fma the scalar tail gives it, so the bits are the scalar ones.
 */
#ifndef SWARM_QUANT_PART_AVX2_H
#define SWARM_QUANT_PART_AVX2_H

#include <immintrin.h>

/* 16 bytes at p where present, else zero (p not read). */
static inline __attribute__((always_inline)) __m128i quant_ld16_if(const void *p, int present)
{
    return present ? _mm_loadu_si128((const __m128i *)p) : _mm_setzero_si128();
}

/* Blocks i and i + 1 of a group of which the first k are present: 16 bytes at lo (block i)
 * in the low half, 16 at hi (block i + 1) in the high half; absent ones zero. */
static inline __attribute__((always_inline)) __m256i quant_ld2x16(const void *lo, const void *hi,
                                                                 int i, int k)
{
    if (k >= i + 2)
        return _mm256_loadu2_m128i((const __m128i *)hi, (const __m128i *)lo);
    return _mm256_set_m128i(quant_ld16_if(hi, i + 1 < k), quant_ld16_if(lo, i < k));
}

/* 32 contiguous bytes at p for blocks i, i + 1 (16 each), as quant_ld2x16. */
static inline __attribute__((always_inline)) __m256i quant_ld32(const void *p, int i, int k)
{
    if (k >= i + 2)
        return _mm256_loadu_si256((const __m256i *)p);
    return quant_ld2x16(p, (const char *)p + 16, i, k);
}

/* All-ones in the lanes j with idx[j] < k (k may be <= 0: none). */
static inline __attribute__((always_inline)) __m256i quant_lanes_below(int k, __m256i idx)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), idx);
}

/* The first k (0..8) floats at p, the rest zero (a masked load: nothing past them read). */
static inline __attribute__((always_inline)) __m256 quant_ldps_k(const float *p, int k)
{
    if (k >= 8)
        return _mm256_loadu_ps(p);
    return _mm256_maskload_ps(p, quant_lanes_below(k, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

/* fma(s, d, acc) in the lanes of keep, acc elsewhere. */
static inline __attribute__((always_inline)) __m256 quant_fma_keep(__m256 s, __m256 d, __m256 acc,
                                                                  __m256i keep)
{
    return _mm256_blendv_ps(acc, _mm256_fmadd_ps(s, d, acc), _mm256_castsi256_ps(keep));
}

#endif

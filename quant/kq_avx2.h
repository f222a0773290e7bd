/* kq_avx2.h — the K-quants' unpacking on AVX2, shared by the row kernels (dot_k_avx2.c) and the
 * batched ones (gemm_k_avx2.c), which must produce the same levels and scales for the same
 * block: one copy, so the two cannot drift apart. Include after a target pragma that has
 * avx2 (both files' "avx2,fma,f16c"). quant/ */
#ifndef SWARM_QUANT_KQ_AVX2_H
#define SWARM_QUANT_KQ_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* ggml's unpacking of block_q4_K.scales (its ggml_vec_dot_q4_K_q8_K: kmask1..3): bytes 0..7
 * the 8 scales, 8..15 the 8 mins — the values get_scale_min_k4 gives (tests check). */
static inline void kq_avx2_scales(const uint8_t *scales, uint32_t utmp[4])
{
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    memcpy(utmp, scales, 12);
    utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = utmp[1] & kmask1;
    utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
    utmp[2] = uaux;
    utmp[0] &= kmask1;
}

/* Chunks 2j and 2j + 1 of a Q4_K (q5 = 0) or Q5_K super-block: the low and high nibbles of
 * qs[32j .. 32j + 32), Q5_K's fifth bits 2j and 2j + 1 of qh (its 32 bytes in qh) as 16. */
static inline __attribute__((always_inline)) void
kq_avx2_levels45(const uint8_t *qs, __m256i qh, int q5, int j, __m256i *lo, __m256i *hi)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
    *lo = _mm256_and_si256(v, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (q5) {
        const __m256i b0 = _mm256_set1_epi8((char)(1 << (2 * j)));
        const __m256i b1 = _mm256_set1_epi8((char)(1 << (2 * j + 1)));
        const __m256i h16 = _mm256_set1_epi8(16);
        *lo = _mm256_or_si256(*lo, _mm256_and_si256(
                                       _mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), h16));
        *hi = _mm256_or_si256(*hi, _mm256_and_si256(
                                       _mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), h16));
    }
}

/* Chunk 4n + w of a Q6_K super-block (0..63, the stored level): l0, l1 = ql[64n ..], ql[64n +
 * 32 ..], h = qh[32n ..]. */
static inline __attribute__((always_inline)) __m256i kq_avx2_level6(__m256i l0, __m256i l1,
                                                                     __m256i h, int w)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    const __m256i l = w & 1 ? l1 : l0;
    const __m256i lo = w < 2 ? _mm256_and_si256(l, m4)
                             : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
    const __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * w), m2), 4);
    return _mm256_or_si256(lo, hb);
}

#endif

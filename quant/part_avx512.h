/* part_avx512.h — masked loads for a row's last, partial group of blocks in the AVX-512
 * kernels. quant/
 *
 * Included after a file's `#pragma GCC target` (AVX-512 BW + VL). A row whose block count is
 * not a multiple of its kernel's group runs its last blocks through the group code with these
 * (part_avx2.h says why): the loads stop at the row's (or the activation's) end, masked, so no
 * byte past it is read and absent blocks are zero; whole groups get plain loads.
 */
#ifndef SWARM_QUANT_PART_AVX512_H
#define SWARM_QUANT_PART_AVX512_H

#include <immintrin.h>

/* The first k bytes of p (k clamped to 0..64), the rest zero; a plain load where k >= 64. */
static inline __attribute__((always_inline)) __m512i quant_ld64_k(const void *p, int k)
{
    return k >= 64 ? _mm512_loadu_si512(p)
                   : _mm512_maskz_loadu_epi8(k <= 0 ? 0 : (__mmask64)(~0ull >> (64 - k)), p);
}

/* Block i's 16 bytes at p where i < kg (the group's blocks present, 4 but in a row's last
 * group), else zero. */
static inline __attribute__((always_inline)) __m128i quant_ld16_k(const void *p, int i, int kg)
{
    return kg >= 4 ? _mm_loadu_si128((const __m128i *)p)
                   : _mm_maskz_loadu_epi8(i < kg ? 0xFFFF : 0, p);
}

#endif

/* q8k_avx512.c — the K-quants' activation quantizer (ggml's quantize_row_q8_K_ref) on AVX-512:
 * the same bytes as kquant.c's quant_q8_K_quantize. quant/
 *
 * The scalar loop was 3.7% of a Q4_K_M TinyLlama prompt on one thread once the products were
 * batched (perf, 2026-12-02). Exactness, step by step: the max |x| is order-free; the value
 * kept is the first x_j reaching it (the scalar loop replaces only on a strictly larger |x|);
 * iscale * x_j is the same single multiply; ggml's nearest_int (adding 1.5 * 2^23) rounds to
 * nearest, ties to even, as vcvtps2dq does under the default rounding, for |v| <= 127 here;
 * the bsums are exact integer sums.
 */
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
#include <immintrin.h>
#include <string.h>

#include "quant/quant_int.h"

void quant_q8_K_quantize_avx512(const float *x, quant_block_q8_K *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        __m512 m = _mm512_setzero_ps();
        for (int k = 0; k < QUANT_QK_K / 16; k++)
            m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * k)));
        const float amax = _mm512_reduce_max_ps(m);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float max = 0;
        for (int k = 0; k < QUANT_QK_K / 16; k++) {
            const __mmask16 e = _mm512_cmp_ps_mask(
                _mm512_abs_ps(_mm512_loadu_ps(x + 16 * k)), _mm512_set1_ps(amax),
                _CMP_EQ_OQ);
            if (e) {
                max = x[16 * k + __builtin_ctz(e)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m512 s = _mm512_set1_ps(iscale);
        for (int k = 0; k < QUANT_QK_K / 16; k++) {
            __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * k), s));
            v = _mm512_min_epi32(v, _mm512_set1_epi32(127));
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * k), _mm512_cvtepi32_epi8(v));
            y[i].bsums[k] = (int16_t)_mm512_reduce_add_epi32(v);
        }
        y[i].d = 1 / iscale;
    }
}

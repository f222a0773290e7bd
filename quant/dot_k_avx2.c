/* dot_k_avx2.c — AVX2 dot products of the K-quants against Q8_K, lane for lane kquant.c's
 * order. quant/
 *
 * A 32-element chunk is one 256-bit vector: vpmaddubsw multiplies the unsigned levels by the
 * signed activation and adds neighbours (int16, at most 2 * 63 * 127, no saturation), then
 * vpmaddwd by the chunk's scale adds neighbours again: int32 lane k is quad k times the
 * scale, exactly the integer lane of the scalar reference. Four super-blocks fill the 32 f32
 * lanes (one 256-bit accumulator each), as the Q8_0 kernels do.
 */
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant/kq_avx2.h"
#include "quant/quant_int.h"
#include "quant/reduce_avx.h"

/* sum_c m_c * (bsums[2c] + bsums[2c+1]): one vpmaddwd against each min repeated twice. */
/* mins[c] = m_c * (bsums[2c] + bsums[2c+1]): one vpmaddwd against each min repeated twice. */
static inline __m256i s_mins(const uint8_t *m8, const int16_t *bsums)
{
    const __m128i m = _mm_loadl_epi64((const __m128i *)m8);
    const __m256i mm = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
    return _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bsums), mm);
}

static inline __m256i s_chunk(__m256i s, __m256i q, const int8_t *y, int scale)
{
    const __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)y));
    return _mm256_add_epi32(s, _mm256_madd_epi16(p, _mm256_set1_epi16((short)scale)));
}

/* One Q4_K (q5 = 0) or Q5_K super-block's 8 integer lanes and its min term. */
static inline __m256i s_q45(const void *blk, int q5, const quant_block_q8_K *y, __m256i *mins)
{
    const quant_block_q4_K *x4 = blk;
    const quant_block_q5_K *x5 = blk;
    const uint8_t *qs = q5 ? x5->qs : x4->qs;
    uint32_t utmp[4];
    kq_avx2_scales(x4->scales, utmp);
    const uint8_t *sc = (const uint8_t *)utmp;
    *mins = s_mins(sc + 8, y->bsums);
    __m256i s = _mm256_setzero_si256(), qh = _mm256_setzero_si256();
    if (q5)
        qh = _mm256_loadu_si256((const __m256i *)x5->qh);
    for (int j = 0; j < 4; j++) {
        __m256i lo, hi;
        kq_avx2_levels45(qs, qh, q5, j, &lo, &hi);
        s = s_chunk(s, lo, y->qs + 64 * j, sc[2 * j]);
        s = s_chunk(s, hi, y->qs + 64 * j + 32, sc[2 * j + 1]);
    }
    return s;
}

/* Q6_K's offset per lane (kquant.c): 32 (sc[2k] bsums[2k] + sc[2k+1] bsums[2k+1]). */
static inline __m256i s_q6_offset(const quant_block_q6_K *x, const quant_block_q8_K *y)
{
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
    const __m256i o = _mm256_madd_epi16(sc, _mm256_loadu_si256((const __m256i *)y->bsums));
    return _mm256_slli_epi32(o, 5);
}

/* One Q6_K super-block's 8 integer lanes: the stored level (0..63) times y (vpmaddubsw),
 * times the 16-element sub-blocks' scales (one per 128-bit half), less the offset. */
static inline __m256i s_q6(const quant_block_q6_K *x, const quant_block_q8_K *y)
{
    __m256i s = _mm256_setzero_si256();
    for (int n = 0; n < 2; n++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * n));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * n + 32));
        const __m256i h = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * n));
        for (int w = 0; w < 4; w++) {
            const __m256i q = kq_avx2_level6(l0, l1, h, w);
            const int c = 4 * n + w;
            const __m256i yv = _mm256_loadu_si256((const __m256i *)(y->qs + 32 * c));
            const __m256i p = _mm256_maddubs_epi16(q, yv);
            const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(x->scales[2 * c + 1]),
                                                 _mm_set1_epi16(x->scales[2 * c]));
            s = _mm256_add_epi32(s, _mm256_madd_epi16(p, scv));
        }
    }
    return _mm256_sub_epi32(s, s_q6_offset(x, y));
}

/* The row: super-block b's lanes into accumulator b % 4 with one fma by d_w * d_x, then the
 * min terms with one by -(dmin_w * d_x) (kquant.c's quant_dot_k_scalar, the same operations). */
static inline __attribute__((always_inline)) float s_dot(quant_type t, uint64_t n,
                                                         const void *w, const void *act)
{
    const quant_block_q8_K *y = act;
    const size_t bb = t == QUANT_Q4_K ? sizeof(quant_block_q4_K)
                      : t == QUANT_Q5_K ? sizeof(quant_block_q5_K) : sizeof(quant_block_q6_K);
    const uint8_t *p = w;
    const uint64_t nb = n / QUANT_QK_K;
    __m256 acc[QUANT_QB_GROUP] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                   _mm256_setzero_ps() };
    /* four super-blocks per pass (the last pass may have fewer), so acc[g] is a register */
    for (uint64_t b = 0; b < nb; b += QUANT_QB_GROUP) {
        quant_prefetch(p, (unsigned)(QUANT_QB_GROUP * bb));
        for (uint64_t g = 0; g < QUANT_QB_GROUP && b + g < nb; g++, p += bb) {
            __m256i s;
            __m256 m = _mm256_setzero_ps();
            float d, dm = 0;
            if (t == QUANT_Q6_K) {
                const quant_block_q6_K *x = (const quant_block_q6_K *)p;
                s = s_q6(x, &y[b + g]);
                d = _cvtsh_ss(x->d) * y[b + g].d;
            } else {
                const quant_block_q4_K *x = (const quant_block_q4_K *)p;
                __m256i mi;
                s = s_q45(p, t == QUANT_Q5_K, &y[b + g], &mi);
                d = _cvtsh_ss(x->d) * y[b + g].d;
                dm = -(_cvtsh_ss(x->dmin) * y[b + g].d);
                m = _mm256_cvtepi32_ps(mi);
            }
            acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d), acc[g]);
            if (t != QUANT_Q6_K)
                acc[g] = _mm256_fmadd_ps(m, _mm256_set1_ps(dm), acc[g]);
        }
    }
    float a[QUANT_LANES];
    for (int g = 0; g < QUANT_QB_GROUP; g++)
        _mm256_storeu_ps(a + 8 * g, acc[g]);
    return quant_reduce32_avx(a);
}

float quant_dot_q4_K_avx2(uint64_t n, const void *w, const void *act)
{
    return s_dot(QUANT_Q4_K, n, w, act);
}

float quant_dot_q5_K_avx2(uint64_t n, const void *w, const void *act)
{
    return s_dot(QUANT_Q5_K, n, w, act);
}

float quant_dot_q6_K_avx2(uint64_t n, const void *w, const void *act)
{
    return s_dot(QUANT_Q6_K, n, w, act);
}

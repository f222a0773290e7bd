/* dot_k_avx512.c — AVX-512 (BW + VNNI) dot products of the K-quants against Q8_K, lane for
 * lane kquant.c's order. quant/
 *
 * Two 32-element chunks are one 512-bit vector: vpmaddubsw gives neighbour-pair products
 * (int16, at most 2 * 63 * 127: no saturation) and vpdpwssd multiplies each pair by its
 * chunk's scale and adds both into the int32 lane of their quad — 2 instructions per 64
 * elements where the AVX2 kernels spend 4. Lane k (0..7) then holds the first chunk's quad k
 * and lane 8 + k the second's; folding the halves at the end of a super-block gives exactly
 * the 8 integer lanes of the scalar reference (integer sums: grouping does not matter).
 */
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant/quant_int.h"
#include "quant/reduce_avx.h"

/* Word index vectors for vpermw: which scale each int16 pair product is multiplied by. */
/* words 0..15 take entry c, 16..31 entry c + 2 (chunks c and c + 2 of a pair-ordered load) */
static inline __m512i s_idx_pair2(int c)
{
    const __m512i lo = _mm512_set1_epi16((short)c);
    return _mm512_mask_blend_epi16(0xFFFF0000u, lo, _mm512_set1_epi16((short)(c + 2)));
}

static inline __m512i s_idx_q6(int c)
{
    /* word i -> scale 2c + i / 8 */
    return _mm512_add_epi16(_mm512_set1_epi16((short)(2 * c)),
                            _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1,
                                             1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0));
}

/* The 6-bit scales and mins of Q4_K/Q5_K (quant.h; kquant.c's quant_k_scales) unpacked in one
 * 128-bit vector, bytes 0..7 the scales and 8..15 the mins: the scalar form (ggml's kmask
 * words), its 21 integer operations and 7 moves between the integer and vector registers per
 * super-block, made q4_K and q5_K rows 9-11% slower in cache (512 x 2048, 1 thread,
 * alternating runs, 2026-12-01). With S the 12 bytes (a 16-byte load: the block goes on past
 * them):
 *   j < 4:  sc_j = S[j] & 63,
 *           m_j  = S[j + 4] & 63;
 *   j >= 4: sc_j = (S[j + 4] & 15) | (S[j - 4] >> 6) << 4,
 *           m_j  = (S[j + 4] >> 4) | (S[j] >> 6) << 4.
 * One byte shuffle gathers the low parts' sources, a masked word shift moves the m_j (j >= 4)
 * nibbles down, one mask keeps 6 or 4 bits; a second shuffle gathers the top-bit sources. */
static inline __m128i s_unpack_v(const uint8_t *scales)
{
    const __m128i S = _mm_loadu_si128((const __m128i *)scales);
    const __m128i a = _mm_shuffle_epi8(S, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8,
                                                        9, 10, 11));
    const __m128i lo = _mm_and_si128(_mm_mask_srli_epi16(a, 0xC0, a, 4),
                                     _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63,
                                                   15, 15, 15, 15));
    const __m128i b = _mm_shuffle_epi8(S, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1,
                                                        -1, 4, 5, 6, 7));
    return _mm_or_si128(lo, _mm_and_si128(_mm_srli_epi16(b, 2), _mm_set1_epi8(0x30)));
}

/* mins[c] = m_c * (bsums[2c] + bsums[2c+1]): one vpmaddwd against each min repeated twice
 * (m: the mins in bytes 8..15). */
static inline __m256i s_mins(__m128i m, const int16_t *bsums)
{
    const __m256i mm = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(m, m));
    return _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bsums), mm);
}

static inline __m256i s_fold(__m512i s)
{
    return _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
}

/* Q4_K (q5 = 0) or Q5_K: 8 integer lanes and the min terms. qs[64 jj .. 64 jj + 63] holds
 * chunks 4jj, 4jj+2 in its low nibbles and 4jj+1, 4jj+3 in its high ones; yp (the
 * activation's pair-ordered copy, quant.h) has their activations in that order. */
static inline __attribute__((always_inline)) __m256i
s_q45(const void *blk, int q5, const quant_block_q8_K *y, const int8_t *yp, __m256i *mins)
{
    const quant_block_q4_K *x4 = blk;
    const quant_block_q5_K *x5 = blk;
    const uint8_t *qs = q5 ? x5->qs : x4->qs;
    const __m128i scm = s_unpack_v(x4->scales);
    *mins = s_mins(scm, y->bsums);
    const __m512i sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(scm));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i s = _mm512_setzero_si512(), qh = _mm512_setzero_si512();
    if (q5)
        qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x5->qh));
#pragma GCC unroll 2
    for (int jj = 0; jj < 2; jj++) {
        const __m512i v = _mm512_loadu_si512(qs + 64 * jj);
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (q5) {
            const __m512i h16 = _mm512_set1_epi8(16);
            const __m512i blo = _mm512_mask_blend_epi8(0xFFFFFFFF00000000ull,
                                                       _mm512_set1_epi8((char)(1 << (4 * jj))),
                                                       _mm512_set1_epi8((char)(4 << (4 * jj))));
            const __m512i bhi = _mm512_add_epi8(blo, blo);
            lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(qh, blo), lo, h16);
            hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(qh, bhi), hi, h16);
        }
        const __m512i plo = _mm512_maddubs_epi16(lo, _mm512_loadu_si512(yp + 128 * jj));
        const __m512i phi = _mm512_maddubs_epi16(hi, _mm512_loadu_si512(yp + 128 * jj + 64));
        s = _mm512_dpwssd_epi32(s, plo, _mm512_permutexvar_epi16(s_idx_pair2(4 * jj), sc));
        s = _mm512_dpwssd_epi32(s, phi, _mm512_permutexvar_epi16(s_idx_pair2(4 * jj + 1), sc));
    }
    return s_fold(s);
}

static inline __attribute__((always_inline)) __m256i s_q6(const quant_block_q6_K *x,
                                                         const quant_block_q8_K *y)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
    const __m512i sc = _mm512_castsi256_si512(sc16);
    /* the offset per lane (kquant.c): 32 (sc[2k] bsums[2k] + sc[2k+1] bsums[2k+1]) */
    const __m256i off = _mm256_slli_epi32(
        _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y->bsums)), 5);
    __m512i s = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int n = 0; n < 2; n++) {
        const __m512i l = _mm512_loadu_si512(x->ql + 64 * n);
        const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qh +
                                                                                     32 * n)));
#pragma GCC unroll 2
        for (int pr = 0; pr < 2; pr++) {
            /* chunks 4n + 2pr, 4n + 2pr + 1: low nibbles (pr 0) or high (pr 1) of ql, high
             * bits at 4pr and 4pr + 2 of qh, brought to bits 4..5 by one variable word shift
             * (left 4 and 2 for pr 0, right 0 and 2 for pr 1; bits crossing into the next
             * byte are masked off) and merged with one vpternlog ((lo & 15) | hb): two
             * operations fewer per 64 values than shift, mask, shift, mask, or — the q6_K
             * row 9-13% faster in cache (512 x 2048, 1 thread, 2026-12-01) */
            const __m512i src = pr ? _mm512_srli_epi16(l, 4) : l;
            const __m512i sh = _mm512_mask_blend_epi16(0xFFFF0000u,
                                                       _mm512_set1_epi16((short)(pr ? 0 : 4)),
                                                       _mm512_set1_epi16(2));
            const __m512i hb = _mm512_and_si512(
                pr ? _mm512_srlv_epi16(h, sh) : _mm512_sllv_epi16(h, sh), m30);
            const __m512i q = _mm512_ternarylogic_epi32(src, m4, hb, 0xEA);
            const int c = 4 * n + 2 * pr;
            const __m512i yv = _mm512_loadu_si512(y->qs + 32 * c);
            const __m512i p = _mm512_maddubs_epi16(q, yv);
            s = _mm512_dpwssd_epi32(s, p, _mm512_permutexvar_epi16(s_idx_q6(c), sc));
        }
    }
    return _mm256_sub_epi32(s_fold(s), off);
}

/* One super-block into its accumulator: its 8 integer lanes with one fma by d_w * d_x, then
 * (Q4_K, Q5_K) the min terms with one by -(dmin_w * d_x), written as fnmadd by dmin_w * d_x
 * (negating a product is exact, so the bits are fmaf(m, -dm, lane)'s). Q4_K/Q5_K's d and
 * dmin are one 32-bit load, converted and scaled together. */
static inline __attribute__((always_inline)) __m256
s_acc(quant_type t, const uint8_t *p, const quant_block_q8_K *y, const int8_t *yp, __m256 acc)
{
    if (t == QUANT_Q6_K) {
        const quant_block_q6_K *x = (const quant_block_q6_K *)p;
        const __m256i s = s_q6(x, y);
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(_cvtsh_ss(x->d) * y->d),
                               acc);
    }
    __m256i mi;
    const __m256i s = s_q45(p, t == QUANT_Q5_K, y, yp, &mi);
    uint32_t dd;
    memcpy(&dd, p, 4); /* d, dmin */
    const __m256 d2 = _mm256_castps128_ps256(
        _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dd)), _mm_set1_ps(y->d)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_permutexvar_ps(_mm256_setzero_si256(), d2),
                          acc);
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mi),
                            _mm256_permutexvar_ps(_mm256_set1_epi32(1), d2), acc);
}

/* Each group of four super-blocks asks for the bytes QUANT_PREFETCH ahead (quant_int.h). */
static inline __attribute__((always_inline)) float s_dot(quant_type t, uint64_t n,
                                                         const void *w, const void *act)
{
    const quant_block_q8_K *y = act;
    const size_t bb = t == QUANT_Q4_K ? sizeof(quant_block_q4_K)
                      : t == QUANT_Q5_K ? sizeof(quant_block_q5_K) : sizeof(quant_block_q6_K);
    const uint8_t *p = w;
    const uint64_t nb = n / QUANT_QK_K;
    const int8_t *yp = (const int8_t *)(y + nb);
    __m256 acc[QUANT_QB_GROUP] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                   _mm256_setzero_ps() };
    uint64_t b = 0;
    /* four super-blocks per pass, so each accumulator is a register */
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP) {
        quant_prefetch(p, (unsigned)(QUANT_QB_GROUP * bb));
#pragma GCC unroll 4
        for (int g = 0; g < QUANT_QB_GROUP; g++, p += bb)
            acc[g] = s_acc(t, p, &y[b + g], yp + (b + g) * QUANT_QK_K, acc[g]);
    }
    for (int g = 0; b < nb; b++, g++, p += bb)
        acc[g] = s_acc(t, p, &y[b], yp + b * QUANT_QK_K, acc[g]);
    float a[QUANT_LANES];
    for (int g = 0; g < QUANT_QB_GROUP; g++)
        _mm256_storeu_ps(a + 8 * g, acc[g]);
    return quant_reduce32_avx(a);
}

float quant_dot_q4_K_avx512(uint64_t n, const void *w, const void *act)
{
    return s_dot(QUANT_Q4_K, n, w, act);
}

float quant_dot_q5_K_avx512(uint64_t n, const void *w, const void *act)
{
    return s_dot(QUANT_Q5_K, n, w, act);
}

float quant_dot_q6_K_avx512(uint64_t n, const void *w, const void *act)
{
    return s_dot(QUANT_Q6_K, n, w, act);
}

/* ---------------------------------------------------------------- tiles: 2 rows x 4 positions */

/* For batched products (quant_matmat): each weight super-block is unpacked once (levels,
 * scale permutations, mins) and serves four positions; every (row, position) pair gets
 * exactly the integer lanes and float operations of s_dot above, in the same order, so the
 * bits are the one-row kernel's. The 32 f32 lanes of each pair live in memory (8 pairs x 32
 * lanes would not fit the registers), touched once per super-block. */
static inline __attribute__((always_inline)) void
s_tile(quant_type t, uint64_t n, const void *const *w, const void *const *act, float *out)
{
    const size_t bb = t == QUANT_Q4_K ? sizeof(quant_block_q4_K)
                      : t == QUANT_Q5_K ? sizeof(quant_block_q5_K) : sizeof(quant_block_q6_K);
    const uint64_t nb = n / QUANT_QK_K;
    const quant_block_q8_K *y[QUANT_TILE_POS];
    const int8_t *yp[QUANT_TILE_POS];
    float a[QUANT_TILE_ROWS][QUANT_TILE_POS][QUANT_LANES];
    memset(a, 0, sizeof a);
    for (int p = 0; p < QUANT_TILE_POS; p++) {
        y[p] = act[p];
        yp[p] = (const int8_t *)(y[p] + nb);
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    for (uint64_t b = 0; b < nb; b++) {
        const uint64_t g = b % QUANT_QB_GROUP;
        for (int r = 0; r < QUANT_TILE_ROWS; r++) {
            const uint8_t *x = (const uint8_t *)w[r] + b * bb;
            __m512i q[4], sc[4];
            __m256i sc16 = _mm256_setzero_si256(), m16 = _mm256_setzero_si256();
            float dw, dmw = 0;
            if (t == QUANT_Q6_K) {
                const quant_block_q6_K *x6 = (const quant_block_q6_K *)x;
                sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x6->scales));
                const __m512i s512 = _mm512_castsi256_si512(sc16);
                for (int h = 0; h < 2; h++) {
                    const __m512i l = _mm512_loadu_si512(x6->ql + 64 * h);
                    const __m512i hv = _mm512_broadcast_i64x4(
                        _mm256_loadu_si256((const __m256i *)(x6->qh + 32 * h)));
                    for (int pr = 0; pr < 2; pr++) {
                        const __m512i lo = pr ? _mm512_and_si512(_mm512_srli_epi16(l, 4), m4)
                                              : _mm512_and_si512(l, m4);
                        const __m512i sh = _mm512_mask_blend_epi16(
                            0xFFFF0000u, _mm512_set1_epi16((short)(4 * pr)),
                            _mm512_set1_epi16((short)(4 * pr + 2)));
                        q[2 * h + pr] = _mm512_or_si512(
                            lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hv, sh), m2),
                                                  4));
                        sc[2 * h + pr] = _mm512_permutexvar_epi16(s_idx_q6(4 * h + 2 * pr), s512);
                    }
                }
                dw = _cvtsh_ss(x6->d);
            } else {
                const quant_block_q4_K *x4 = (const quant_block_q4_K *)x;
                const quant_block_q5_K *x5 = (const quant_block_q5_K *)x;
                const uint8_t *qs = t == QUANT_Q5_K ? x5->qs : x4->qs;
                const __m128i scm = s_unpack_v(x4->scales);
                m16 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scm, scm));
                const __m512i s512 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(scm));
                __m512i qh = _mm512_setzero_si512();
                if (t == QUANT_Q5_K)
                    qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x5->qh));
                for (int jj = 0; jj < 2; jj++) {
                    const __m512i v = _mm512_loadu_si512(qs + 64 * jj);
                    __m512i lo = _mm512_and_si512(v, m4);
                    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                    if (t == QUANT_Q5_K) {
                        const __m512i h16 = _mm512_set1_epi8(16);
                        const __m512i blo = _mm512_mask_blend_epi8(
                            0xFFFFFFFF00000000ull, _mm512_set1_epi8((char)(1 << (4 * jj))),
                            _mm512_set1_epi8((char)(4 << (4 * jj))));
                        const __m512i bhi = _mm512_add_epi8(blo, blo);
                        lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(qh, blo), lo, h16);
                        hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(qh, bhi), hi, h16);
                    }
                    q[2 * jj] = lo;
                    q[2 * jj + 1] = hi;
                    sc[2 * jj] = _mm512_permutexvar_epi16(s_idx_pair2(4 * jj), s512);
                    sc[2 * jj + 1] = _mm512_permutexvar_epi16(s_idx_pair2(4 * jj + 1), s512);
                }
                dw = _cvtsh_ss(x4->d);
                dmw = _cvtsh_ss(x4->dmin);
            }
            for (int p = 0; p < QUANT_TILE_POS; p++) {
                const quant_block_q8_K *yb = &y[p][b];
                __m512i s = _mm512_setzero_si512();
                for (int i = 0; i < 4; i++) {
                    /* Q6_K: chunk pairs in element order; Q4_K/Q5_K: the pair-ordered copy */
                    const int8_t *yq = t == QUANT_Q6_K ? yb->qs + 64 * i
                                                       : yp[p] + b * QUANT_QK_K + 64 * i;
                    s = _mm512_dpwssd_epi32(
                        s, _mm512_maddubs_epi16(q[i], _mm512_loadu_si512(yq)), sc[i]);
                }
                __m256i s8 = s_fold(s);
                if (t == QUANT_Q6_K)
                    s8 = _mm256_sub_epi32(s8, _mm256_slli_epi32(_mm256_madd_epi16(
                        sc16, _mm256_loadu_si256((const __m256i *)yb->bsums)), 5));
                float *lane = a[r][p] + g * QUANT_QB_LANES;
                __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s8), _mm256_set1_ps(dw * yb->d),
                                           _mm256_loadu_ps(lane));
                if (t != QUANT_Q6_K) {
                    const __m256i mi = _mm256_madd_epi16(
                        _mm256_loadu_si256((const __m256i *)yb->bsums), m16);
                    v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mi), _mm256_set1_ps(-(dmw * yb->d)),
                                        v);
                }
                _mm256_storeu_ps(lane, v);
            }
        }
    }
    for (int r = 0; r < QUANT_TILE_ROWS; r++)
        for (int p = 0; p < QUANT_TILE_POS; p++)
            out[r * QUANT_TILE_POS + p] = quant_reduce32_avx(a[r][p]);
}

void quant_tile_q4_K_avx512(uint64_t n, const void *const *w, const void *const *act, float *out)
{
    s_tile(QUANT_Q4_K, n, w, act, out);
}

void quant_tile_q5_K_avx512(uint64_t n, const void *const *w, const void *const *act, float *out)
{
    s_tile(QUANT_Q5_K, n, w, act, out);
}

void quant_tile_q6_K_avx512(uint64_t n, const void *const *w, const void *const *act, float *out)
{
    s_tile(QUANT_Q6_K, n, w, act, out);
}

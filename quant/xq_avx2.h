/* xq_avx2.h — the AVX2 unpacking of quant_x.h's types Q4_1, Q5_0, Q5_1, IQ4_NL (groups of four
 * blocks of 32) and IQ4_XS (super-blocks), shared by the row kernels (dot_x_avx2.c) and the
 * batched ones (gemm_x_avx2.c), which must give the same levels, scales and lanes for the same
 * block: one copy, so the two cannot drift apart. A group of blocks of 32 is split where the
 * weights end: xq_avx2_unpack32 (the weights alone, once a group) and xq_avx2_acc32 (one
 * position's activation into that group's 32 lanes); an IQ4_XS super-block into its levels and
 * scale words (xq_avx2_iq4xs_*) and one step per chunk pair and position. Include after a target
 * pragma that has avx2, fma and f16c (both files' "avx2,fma,f16c"). quant/ */
#ifndef SWARM_QUANT_XQ_AVX2_H
#define SWARM_QUANT_XQ_AVX2_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "quant/quant_x.h"

static inline __m256i xq_avx2_ones_madd(__m256i p16)
{
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* One half (two blocks' elements 0..15 or 16..31): nib the levels (or nibbles), yq the
 * activation bytes, b8 the -8 * quad sums. The int32 quad sums of value * y. */
static inline __attribute__((always_inline)) __m256i xq_avx2_half(quant_type t, __m256i nib,
                                                                 const int8_t *yq,
                                                                 const int32_t *b8)
{
    const __m256i y = _mm256_loadu_si256((const __m256i *)yq);
    if (t == QUANT_IQ4_NL) {
        const __m256i tab = _mm256_broadcastsi128_si256(
            _mm_loadu_si128((const __m128i *)quant_iq4nl_values));
        const __m256i v = _mm256_shuffle_epi8(tab, nib);
        return xq_avx2_ones_madd(
            _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(y, v)));
    }
    const __m256i p = xq_avx2_ones_madd(_mm256_maddubs_epi16(nib, y));
    if (t == QUANT_Q5_0)
        return _mm256_add_epi32(p, _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)b8), 1));
    return p;
}

/* 0x10 in byte i of each 128-bit lane where bit i of the 16-bit qh half wanted is set: hb
 * holds per qword a block's qh and qh << 4 (xq_avx2_q5_qh); b16 is the byte of the half's bits
 * 0..7 in the lane, sh that of the same byte of the << 4 copy. Bits 0..3 of each byte are taken
 * from the << 4 copy, so every bit sits at 4..7 and vpminub with 0x10 makes it 0x10: and +
 * min where or, compare, and took 3. */
static inline __m256i xq_avx2_bit16(__m256i hb, int sh, int b16)
{
    const __m256i idx = _mm256_broadcastsi128_si256(
        _mm_setr_epi8((char)sh, (char)sh, (char)sh, (char)sh, (char)b16, (char)b16, (char)b16,
                      (char)b16, (char)(sh + 1), (char)(sh + 1), (char)(sh + 1), (char)(sh + 1),
                      (char)(b16 + 1), (char)(b16 + 1), (char)(b16 + 1), (char)(b16 + 1)));
    return _mm256_min_epu8(_mm256_and_si256(_mm256_shuffle_epi8(hb, idx),
                                            _mm256_set1_epi32((int)0x80402010)),
                           _mm256_set1_epi8(0x10));
}

/* [d0, d1, d2, d3, m0, m1, m2, m3] (f16 bits; m 0 where the type has none) of the four blocks
 * at x: their first 32 bits (d, then m or qh's first half, all inside the block) in dwords,
 * then one vpshufb. Eight 16-bit inserts took ~16 uops a group, 8 of them on port 5. */
static inline __m128i xq_avx2_dm4(const uint8_t *x, size_t bb, int mn)
{
    uint32_t w[4];
    for (int i = 0; i < 4; i++)
        memcpy(&w[i], x + i * bb, 4);
    const __m128i v = _mm_setr_epi32((int)w[0], (int)w[1], (int)w[2], (int)w[3]);
    return _mm_shuffle_epi8(v, mn ? _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14,
                                                  15)
                                  : _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1,
                                                  -1, -1, -1));
}

/* Q5_0 / Q5_1: the four blocks' first 8 bytes (d, then m or not, then qh: inside the block),
 * one broadcast load each (a load uop alone), as qwords [b0, b2 | b1, b3]. Both the scales and
 * the fifth bits come out of it: the qh words' scalar assembly and xq_avx2_dm4 took 8 loads,
 * ~4 scalar ops and ~9 vector uops (3 of them moves into vector registers on port 5) where this
 * takes 4 loads and 3 blends (any port), then xq_avx2_q5_qh's 3 and xq_avx2_q5_dm's 3
 * (2026-12-03). */
static inline __m256i xq_avx2_q5_head(const uint8_t *x, size_t bb)
{
    int64_t w[4];
    for (int i = 0; i < 4; i++)
        memcpy(&w[i], x + i * bb, 8);
    const __m256i e = _mm256_blend_epi32(_mm256_set1_epi64x(w[0]), _mm256_set1_epi64x(w[2]), 0x0C);
    const __m256i o = _mm256_blend_epi32(_mm256_set1_epi64x(w[1]), _mm256_set1_epi64x(w[3]), 0xC0);
    return _mm256_blend_epi32(e, o, 0xF0);
}

/* The fifth bits for xq_avx2_bit16 from xq_avx2_q5_head's z: per qword (block), qh in bytes
 * 0..3 and qh << 4 (its top 4 bits dropped: those come from the plain copy) in 4..7. */
static inline __m256i xq_avx2_q5_qh(quant_type t, __m256i z)
{
    const __m256i q = _mm256_srli_epi64(z, t == QUANT_Q5_0 ? 16 : 32);
    return _mm256_blend_epi32(q, _mm256_slli_epi64(q, 36), 0xAA);
}

/* xq_avx2_dm4's [d0..d3, m0..m3] (f16; m 0 for Q5_0) from xq_avx2_q5_head's z: per lane the
 * two blocks' (d, m) dwords, those of the four into one xmm, then words in order. */
static inline __m128i xq_avx2_q5_dm(quant_type t, __m256i z)
{
    const __m256i dm = _mm256_shuffle_epi8(
        z, t == QUANT_Q5_0 ? _mm256_setr_epi8(0, 1, -1, -1, 8, 9, -1, -1, -1, -1, -1, -1, -1, -1,
                                              -1, -1, 0, 1, -1, -1, 8, 9, -1, -1, -1, -1, -1, -1,
                                              -1, -1, -1, -1)
                           : _mm256_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, -1, -1, -1, -1, -1, -1,
                                              -1, -1, 0, 1, 2, 3, 8, 9, 10, 11, -1, -1, -1, -1,
                                              -1, -1, -1, -1));
    /* dwords (d0, m0), (d1, m1), (d2, m2), (d3, m3) */
    const __m128i v = _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(dm, _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0)));
    return _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
}

/* acc, or fma(p, d, acc) in the lanes where keep's sign bit is set (all, where keep is NULL) */
static inline __attribute__((always_inline)) __m256 xq_avx2_fma(__m256 p, __m256 d, __m256 acc,
                                                               const __m256 *keep)
{
    const __m256 r = _mm256_fmadd_ps(p, d, acc);
    return keep ? _mm256_blendv_ps(acc, r, *keep) : r;
}

/* A group of four blocks of 32, unpacked: the levels (or IQ4_NL's nibbles) of blocks 0, 1
 * (v01) and 2, 3 (v23), elements 0..15 (l) and 16..31 (u); [d0..d3, m0..m3] as f32 (m 0 for
 * Q5_0 / IQ4_NL). */
typedef struct {
    __m256i l01, l23, u01, u23;
    __m256 dm;
} xq_avx2_g32;

/* The four blocks at x (xq_avx2_bb bytes each; all four readable: a row's padded last group
 * is a zeroed copy, quant_x_pad). */
static inline __attribute__((always_inline)) void xq_avx2_unpack32(quant_type t, const uint8_t *x,
                                                                  xq_avx2_g32 *g)
{
    const size_t bb = quant_x_bb32(t), qo = quant_x_qs_off32(t);
    const int q5 = t == QUANT_Q5_0 || t == QUANT_Q5_1, mn = t == QUANT_Q4_1 || t == QUANT_Q5_1;
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i z = q5 ? xq_avx2_q5_head(x, bb) : _mm256_setzero_si256();
    g->dm = _mm256_cvtph_ps(q5 ? xq_avx2_q5_dm(t, z) : xq_avx2_dm4(x, bb, mn));
    const __m256i v01 = _mm256_loadu2_m128i((const __m128i *)(x + bb + qo),
                                            (const __m128i *)(x + qo));
    const __m256i v23 = _mm256_loadu2_m128i((const __m128i *)(x + 3 * bb + qo),
                                            (const __m128i *)(x + 2 * bb + qo));
    g->l01 = _mm256_and_si256(v01, m);
    g->l23 = _mm256_and_si256(v23, m);
    g->u01 = _mm256_and_si256(_mm256_srli_epi16(v01, 4), m);
    g->u23 = _mm256_and_si256(_mm256_srli_epi16(v23, 4), m);
    if (q5) {
        /* lane 0 holds blocks 0 (qword 0) and 2 (qword 1), lane 1 blocks 1 and 3 */
        const __m256i hb = xq_avx2_q5_qh(t, z);
        g->l01 = _mm256_or_si256(g->l01, xq_avx2_bit16(hb, 4, 0));
        g->u01 = _mm256_or_si256(g->u01, xq_avx2_bit16(hb, 6, 2));
        g->l23 = _mm256_or_si256(g->l23, xq_avx2_bit16(hb, 12, 8));
        g->u23 = _mm256_or_si256(g->u23, xq_avx2_bit16(hb, 14, 10));
    }
}

/* One position's activation against an unpacked group, into its 32 lanes a[0..3] (quant_x.h):
 * q its qs4 (elements 0..15 of the four blocks, then 16..31 at q + 64), b8 its bias8, dxp its
 * four d_x, syp its four s (Q4_1, Q5_1). Per lane fma(quad sum, d_w * d_x), then Q4_1 / Q5_1
 * fma(s_y, m_w) into the lane of quad 0 of each block. k: the blocks present (4 but for a
 * row's padded last group, whose other lanes are kept). */
static inline __attribute__((always_inline)) void xq_avx2_acc32(quant_type t, const xq_avx2_g32 *g,
                                                               const int8_t *q, const int32_t *b8,
                                                               const float *dxp, const float *syp,
                                                               int k, __m256 a[4])
{
    const int mn = t == QUANT_Q4_1 || t == QUANT_Q5_1;
    const __m256i i01 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i i23 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    /* lanes of blocks 0, 1 (a[0], a[2]) and 2, 3 (a[1], a[3]) present: lane i of a[0] holds
     * block i / 4, of a[1] block 2 + i / 4 */
    const __m256i lb = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256 k01 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(k), lb));
    const __m256 k23 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(k - 2), lb));
    const __m256 *p01 = k < 4 ? &k01 : NULL, *p23 = k < 4 ? &k23 : NULL;
    /* d_w * d_x in lanes 0..3 (m_w * 1 in 4..7: the row kernels' one multiply) */
    const __m128 dx = _mm_loadu_ps(dxp);
    const __m256 dd = _mm256_mul_ps(g->dm, _mm256_set_m128(_mm_set1_ps(1.0f), dx));
    const __m256 d01 = _mm256_permutevar8x32_ps(dd, i01);
    const __m256 d23 = _mm256_permutevar8x32_ps(dd, i23);
    a[0] = xq_avx2_fma(_mm256_cvtepi32_ps(xq_avx2_half(t, g->l01, q, b8)), d01, a[0], p01);
    a[1] = xq_avx2_fma(_mm256_cvtepi32_ps(xq_avx2_half(t, g->l23, q + 32, b8 + 8)), d23, a[1],
                       p23);
    a[2] = xq_avx2_fma(_mm256_cvtepi32_ps(xq_avx2_half(t, g->u01, q + 64, b8 + 16)), d01, a[2],
                       p01);
    a[3] = xq_avx2_fma(_mm256_cvtepi32_ps(xq_avx2_half(t, g->u23, q + 96, b8 + 24)), d23, a[3],
                       p23);
    if (mn) { /* m_w * s_y into the lane of quad 0 of each block: lanes 0 and 4 */
        const __m256 sy = _mm256_castps128_ps256(_mm_loadu_ps(syp));
        const __m256 s01 = _mm256_permutevar8x32_ps(sy, i01);
        const __m256 s23 = _mm256_permutevar8x32_ps(sy, i23);
        /* m_w * 1 (exact) out of the product above, as the row kernel always took it (per
         * position in a batched kernel too: taken once a group from dm, gemm_time q5_1 and
         * q4_1 measured the same, 2026-12-03) */
        const __m256i four = _mm256_set1_epi32(4);
        const __m256 m01 = _mm256_permutevar8x32_ps(dd, _mm256_add_epi32(i01, four));
        const __m256 m23 = _mm256_permutevar8x32_ps(dd, _mm256_add_epi32(i23, four));
        a[0] = _mm256_blend_ps(a[0], xq_avx2_fma(s01, m01, a[0], p01), 0x11);
        a[1] = _mm256_blend_ps(a[1], xq_avx2_fma(s23, m23, a[1], p23), 0x11);
    }
}

/* ---------------------------------------------------------------- IQ4_XS */

/* IQ4_XS's 8 scales ls - 32 of two super-blocks as words, lane h of the result super-block h
 * (at pa, pb): a block's first 8 bytes are d, scales_h, scales_l; one vpshufb spreads scales_l's
 * 16-bit halves and one scales_h over the words, a vpmullw by a power of two puts field c of
 * word c at its top (nibble c % 4, 2-bit field c) and shifts bring it down. 11 uops for two
 * super-blocks where the dword form took ~12 for one (2026-12-03). */
static inline __m256i xq_avx2_xs_words2(const uint8_t *pa, const uint8_t *pb)
{
    const __m256i q = _mm256_loadu2_m128i((const __m128i *)pb, (const __m128i *)pa);
    const __m256i l = _mm256_shuffle_epi8(
        q, _mm256_broadcastsi128_si256(_mm_setr_epi8(4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7)));
    const __m256i h = _mm256_shuffle_epi8(
        q, _mm256_broadcastsi128_si256(_mm_setr_epi8(2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3)));
    const __m256i lo = _mm256_srli_epi16(
        _mm256_mullo_epi16(l, _mm256_broadcastsi128_si256(_mm_setr_epi16(
                                  1 << 12, 1 << 8, 1 << 4, 1, 1 << 12, 1 << 8, 1 << 4, 1))), 12);
    const __m256i hi = _mm256_srli_epi16(
        _mm256_mullo_epi16(h, _mm256_broadcastsi128_si256(_mm_setr_epi16(
                                  (short)(1 << 14), 1 << 12, 1 << 10, 1 << 8, 1 << 6, 1 << 4,
                                  1 << 2, 1))), 14);
    return _mm256_sub_epi16(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi16(32));
}

/* Sub-blocks c, c + 1 (c even) as one vector's halves (quant_x.h's lanes 4 (c % 2) + r): their
 * values kvalues_iq4nl[nibble], elements 0..15 (klo) and 16..31 (khi). */
static inline __attribute__((always_inline)) void
xq_avx2_iq4xs_levels(const quant_block_iq4_xs *x, int c, __m256i *klo, __m256i *khi)
{
    const __m256i tab = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)quant_iq4nl_values));
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(x->qs + 16 * c));
    *klo = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m));
    *khi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m));
}

/* Scale words of sub-blocks c (low lane) and c + 1 (high lane) from w, the super-block's 8
 * scale words in both 128-bit lanes. */
static inline __m256i xq_avx2_iq4xs_scw(__m256i w, int c)
{
    return _mm256_shuffle_epi8(
        w, _mm256_setr_epi8((char)(2 * c), (char)(2 * c + 1), (char)(2 * c), (char)(2 * c + 1),
                            (char)(2 * c), (char)(2 * c + 1), (char)(2 * c), (char)(2 * c + 1),
                            (char)(2 * c), (char)(2 * c + 1), (char)(2 * c), (char)(2 * c + 1),
                            (char)(2 * c), (char)(2 * c + 1), (char)(2 * c), (char)(2 * c + 1),
                            (char)(2 * c + 2), (char)(2 * c + 3), (char)(2 * c + 2),
                            (char)(2 * c + 3), (char)(2 * c + 2), (char)(2 * c + 3),
                            (char)(2 * c + 2), (char)(2 * c + 3), (char)(2 * c + 2),
                            (char)(2 * c + 3), (char)(2 * c + 2), (char)(2 * c + 3),
                            (char)(2 * c + 2), (char)(2 * c + 3), (char)(2 * c + 2),
                            (char)(2 * c + 3)));
}

/* s + one half's int32 lanes: ka = |k| (vpsignb of k by itself), k the signed levels, y the
 * activation bytes in the same places (taking k's sign: 2 * 127 * 127 < 2^15), sc the scale
 * words. */
static inline __m256i xq_avx2_iq4xs_step(__m256i s, __m256i ka, __m256i k, __m256i y, __m256i sc)
{
    return _mm256_add_epi32(
        s, _mm256_madd_epi16(_mm256_maddubs_epi16(ka, _mm256_sign_epi8(y, k)), sc));
}

#endif

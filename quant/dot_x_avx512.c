/* dot_x_avx512.c — AVX-512 (BW + VL + VNNI) dot products of Q4_1, Q5_0, Q5_1, IQ4_NL (against
 * Q8_0) and Q2_K, Q3_K, IQ4_XS (against Q8_K), lane for lane quant_x.h's order. quant/
 *
 * Blocks of 32 go four at a time as dot_avx512.c's Q4_0: the four blocks' 16 nibble bytes in
 * one vector's quarters; vpdpbusd multiplies unsigned levels by the signed activation and
 * adds each quad into an int32 lane, starting from the offset the type needs (Q5_0: -16 *
 * the quad sums = 2 * bias8; IQ4_NL, whose levels go in as value + 128 (1..241): -128 * the
 * quad sums = 16 * bias8): exact, no int16 step. Q5's fifth bits are a mask register (the
 * blocks' qh words side by side) and one masked add. Super-blocks: Q2_K / Q3_K two chunks
 * per vector as dot_k_avx512.c's Q6_K (vpmaddubsw, then vpdpwssd by each 16-value
 * sub-block's scale); IQ4_XS four sub-blocks per vector, |value| against the activation
 * negated where the value is (levels 0..7 are the negative ones), then vpdpwssd by each
 * sub-block's scale.
 */
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#include <immintrin.h>
#include <string.h>

#include "quant/part_avx512.h"
#include "quant/quant_x.h"
#include "quant/reduce_avx.h"

static inline uint16_t s_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* Word index (for vpermt2w over a group's first 64 bytes, then its last 64) of the 16-bit
 * word at byte offset o of a group of 4 blocks of bb bytes (every offset used is even). */
static inline short s_wi(size_t o, size_t bb)
{
    return (short)(o < 64 ? o / 2 : 32 + (o - (4 * bb - 64)) / 2);
}

/* The words s_dot32 gathers: d of blocks 0..3, then m (Q4_1, Q5_1; else d again), then the
 * low halves of qh (Q5_0, Q5_1), then the high halves. */
static inline __m512i s_hidx(quant_type t)
{
    const size_t bb = quant_x_bb32(t);
    const int mn = t == QUANT_Q4_1 || t == QUANT_Q5_1;
    const size_t ho = t == QUANT_Q5_0 ? 2 : 4; /* qh's offset (Q5 only) */
    short w[16];
    for (int i = 0; i < 4; i++) {
        w[i] = s_wi(i * bb, bb);
        w[4 + i] = s_wi(i * bb + (mn ? 2 : 0), bb);
        w[8 + i] = s_wi(i * bb + ho, bb);
        w[12 + i] = s_wi(i * bb + ho + 2, bb);
    }
    return _mm512_castsi256_si512(_mm256_setr_epi16(w[0], w[1], w[2], w[3], w[4], w[5], w[6],
                                                    w[7], w[8], w[9], w[10], w[11], w[12], w[13],
                                                    w[14], w[15]));
}

/* One half (four blocks' elements 0..15 or 16..31) of levels lv: int32 quad sums of value*y. */
static inline __attribute__((always_inline)) __m512i s_half(quant_type t, __m512i lv,
                                                           __m512i y, const int32_t *b8)
{
    if (t == QUANT_IQ4_NL) {
        const __m512i tab = _mm512_broadcast_i32x4(_mm_xor_si128(
            _mm_loadu_si128((const __m128i *)quant_iq4nl_values), _mm_set1_epi8((char)0x80)));
        return _mm512_dpbusd_epi32(_mm512_slli_epi32(_mm512_loadu_si512(b8), 4),
                                   _mm512_shuffle_epi8(tab, lv), y);
    }
    if (t == QUANT_Q5_0)
        return _mm512_dpbusd_epi32(_mm512_slli_epi32(_mm512_loadu_si512(b8), 1), lv, y);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), lv, y);
}

/* One group of blocks at x (bb bytes each) into z0 / z1: q its qs4 (the blocks' elements
 * 0..15, then their 16..31), b8 its bias8, dxp its d_x, syp its s (Q4_1, Q5_1). kg: the
 * blocks present, 4 but in a row's last group; there the loads stop at the row's end
 * (masked: no byte past it is read, absent blocks are zero) and only the lanes of the kg
 * blocks change. The scalar block (quant_x_block32) for a row's last 1..3 blocks cost as
 * much as ~60 vector ones: a 2880-wide row (gpt-oss's, 90 blocks) spent 2/3 of its time
 * there (IQ4_NL 5.8 GB/s in cache, 2026-12-02). */
static inline __attribute__((always_inline)) void s_group(quant_type t, const uint8_t *x,
                                                         const int8_t *q, const int32_t *b8,
                                                         const float *dxp, const float *syp,
                                                         int kg, __m512 *z0, __m512 *z1)
{
    const int bb = (int)quant_x_bb32(t);
    const size_t qo = quant_x_qs_off32(t);
    const int q5 = t == QUANT_Q5_0 || t == QUANT_Q5_1, mn = t == QUANT_Q4_1 || t == QUANT_Q5_1;
    const __mmask16 lm = (__mmask16)((1u << (4 * kg)) - 1), l4 = (__mmask16)((1u << kg) - 1);
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i m = _mm512_set1_epi8(0x0F), h16 = _mm512_set1_epi8(0x10);
    /* the group's d (words 0..3), m (4..7: Q4_1, Q5_1) and fifth-bit words (8..15: qh's
     * low halves, then high halves) by one word permute of its first and last 64 bytes:
     * eight scalar loads and inserts cost ~10 shuffle-port uops, this 3 */
    const __m512i g0 = quant_ld64_k(x, kg * bb);
    const __m512i g1 = quant_ld64_k(x + 4 * bb - 64, 64 - (4 - kg) * bb);
    const __m256i hw = _mm512_castsi512_si256(_mm512_permutex2var_epi16(g0, s_hidx(t), g1));
    /* d_w * d_x in lanes 0..3, m_w (times 1: exact) in 4..7 */
    const __m128 dx = kg == 4 ? _mm_loadu_ps(dxp) : _mm_maskz_loadu_ps(l4, dxp);
    const __m512 dd = _mm512_castps256_ps512(_mm256_mul_ps(
        _mm256_cvtph_ps(_mm256_castsi256_si128(hw)), _mm256_set_m128(_mm_set1_ps(1.0f), dx)));
    const __m512 d = _mm512_permutexvar_ps(idx, dd);
    __m512i v = _mm512_broadcast_i32x4(quant_ld16_k(x + qo, 0, kg));
    v = _mm512_mask_broadcast_i32x4(v, 0x00F0, quant_ld16_k(x + bb + qo, 1, kg));
    v = _mm512_mask_broadcast_i32x4(v, 0x0F00, quant_ld16_k(x + 2 * bb + qo, 2, kg));
    v = _mm512_mask_broadcast_i32x4(v, 0xF000, quant_ld16_k(x + 3 * bb + qo, 3, kg));
    __m512i lo = _mm512_and_si512(v, m), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
    if (q5) {
        const __m128i qh = _mm256_extracti128_si256(hw, 1);
        lo = _mm512_mask_add_epi8(lo, (__mmask64)_mm_cvtsi128_si64(qh), lo, h16);
        hi = _mm512_mask_add_epi8(hi, (__mmask64)_mm_extract_epi64(qh, 1), hi, h16);
    }
    const __m512i ylo = quant_ld64_k(q, 16 * kg), yhi = quant_ld64_k(q + 16 * kg, 16 * kg);
    *z0 = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(s_half(t, lo, ylo, b8)), d, *z0, lm);
    *z1 = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(s_half(t, hi, yhi, b8 + 16)), d, *z1, lm);
    if (mn) { /* m_w * s_y into lane 4p (quad 0 of block b + p) */
        const __m512 mw = _mm512_permutexvar_ps(_mm512_add_epi32(idx, _mm512_set1_epi32(4)), dd);
        const __m128 s4 = kg == 4 ? _mm_loadu_ps(syp) : _mm_maskz_loadu_ps(l4, syp);
        const __m512 sy = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(s4));
        *z0 = _mm512_mask3_fmadd_ps(sy, mw, *z0, (__mmask16)(lm & 0x1111));
    }
}

static inline __attribute__((always_inline)) float s_dot32(quant_type t, uint64_t n,
                                                           const void *w, const void *act)
{
    const uint8_t *x = w;
    const size_t bb = quant_x_bb32(t);
    const int mn = t == QUANT_Q4_1 || t == QUANT_Q5_1;
    const quant_act_q8 y = quant_act_view(act, n);
    const float *sums = mn ? quant_act_q8_sums(act, n) : NULL;
    const uint64_t nb = n / QUANT_QK;
    __m512 z0 = _mm512_setzero_ps(), z1 = z0;
    float a[QUANT_LANES];
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP, x += QUANT_QB_GROUP * bb) {
        quant_prefetch(x, (unsigned)(QUANT_QB_GROUP * bb));
        s_group(t, x, y.qs4 + b * 32, y.bias8 + b * 8, y.d + b, mn ? sums + b : NULL, 4, &z0,
                &z1);
    }
    if (b < nb)
        s_group(t, x, y.qs4 + b * 32, y.bias8 + b * 8, y.d + b, mn ? sums + b : NULL,
                (int)(nb - b), &z0, &z1);
    _mm512_storeu_ps(a, z0);
    _mm512_storeu_ps(a + 16, z1);
    return quant_reduce32_avx(a);
}

float quant_dot_q4_1_avx512(uint64_t n, const void *w, const void *act)
{
    return s_dot32(QUANT_Q4_1, n, w, act);
}

float quant_dot_q5_0_avx512(uint64_t n, const void *w, const void *act)
{
    return s_dot32(QUANT_Q5_0, n, w, act);
}

float quant_dot_q5_1_avx512(uint64_t n, const void *w, const void *act)
{
    return s_dot32(QUANT_Q5_1, n, w, act);
}

float quant_dot_iq4_nl_avx512(uint64_t n, const void *w, const void *act)
{
    return s_dot32(QUANT_IQ4_NL, n, w, act);
}

/* ---------------------------------------------------------------- super-blocks */

/* word i of a two-chunk vector (chunks c, c + 1) -> 16-value sub-block 2c + i / 8 */
static inline __m512i s_idx2(int c)
{
    return _mm512_add_epi16(_mm512_set1_epi16((short)(2 * c)),
                            _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1,
                                             1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0));
}

static inline __m256i s_fold(__m512i s)
{
    return _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
}

/* Q3_K's 16 scales - 32 as bytes, in vector registers (ggml's kmask unpacking in scalar form
 * went through memory: the 12-byte store and 16-byte reload missed store forwarding and
 * cost the q3_K row ~3x in cache, 2026-12-02). Low 4 bits: bytes 0..7 of S low nibbles,
 * then their high nibbles; high 2 bits of scale j: bits 2 (j / 4) of S[8 + j % 4]. S is read
 * as the 16 bytes ending with the scales (the block's qs comes before them). */
static inline __m128i s_q3_scales(const quant_block_q3_K *x)
{
    const __m128i S = _mm_srli_si128(_mm_loadu_si128((const __m128i *)(x->scales + 12 - 16)), 4);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(S, m4),
                                          _mm_and_si128(_mm_srli_epi16(S, 4), m4));
    const __m128i h = _mm_shuffle_epi32(_mm_srli_si128(S, 8), 0);
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(h, _mm_setr_epi32(0, 2, 4, 6)),
                                     _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
}

/* Q2_K (q3 = 0) or Q3_K: 8 integer lanes (and Q2_K's min lanes). */
static inline __attribute__((always_inline)) __m256i s_q23(int q3, const uint8_t *p,
                                                          const quant_block_q8_K *y,
                                                          __m256i *mins)
{
    const uint8_t *qs;
    __m256i sc16;
    __m512i hm = _mm512_setzero_si512();
    const __m256i bs = _mm256_loadu_si256((const __m256i *)y->bsums);
    if (!q3) {
        const quant_block_q2_K *x = (const quant_block_q2_K *)p;
        const __m128i s8 = _mm_loadu_si128((const __m128i *)x->scales);
        sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(s8, _mm_set1_epi8(0x0F)));
        *mins = _mm256_madd_epi16(
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(0x0F))), bs);
        qs = x->qs;
    } else {
        const quant_block_q3_K *x = (const quant_block_q3_K *)p;
        sc16 = _mm256_cvtepi8_epi16(s_q3_scales(x));
        hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->hmask));
        qs = x->qs;
    }
    const __m512i sc = _mm512_castsi256_si512(sc16), m3 = _mm512_set1_epi8(3);
    __m512i s = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int n = 0; n < 2; n++) {
        const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * n)));
#pragma GCC unroll 2
        for (int pr = 0; pr < 2; pr++) {
            const int c = 4 * n + 2 * pr; /* chunks c (low half), c + 1 (high half) */
            const __m512i sh = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)(4 * pr)),
                                                       _mm512_set1_epi16((short)(4 * pr + 2)));
            __m512i q = _mm512_and_si512(_mm512_srlv_epi16(v, sh), m3);
            if (q3) {
                const __m512i bit = _mm512_mask_blend_epi8(0xFFFFFFFF00000000ull,
                                                           _mm512_set1_epi8((char)(1 << c)),
                                                           _mm512_set1_epi8((char)(2 << c)));
                q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(hm, bit), q,
                                         _mm512_set1_epi8(4));
            }
            const __m512i pp = _mm512_maddubs_epi16(q, _mm512_loadu_si512(y->qs + 32 * c));
            s = _mm512_dpwssd_epi32(s, pp, _mm512_permutexvar_epi16(s_idx2(c), sc));
        }
    }
    __m256i r = s_fold(s);
    if (q3)
        r = _mm256_sub_epi32(r, _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 2));
    return r;
}

/* IQ4_XS's 8 scales ls - 32 of two super-blocks (a's in dwords 0..7, b's in 8..15), each
 * dword the 16-bit value twice (for vpdpwssd, which multiplies words), computed in registers
 * from scales_l (4 bits each) and scales_h (2 bits each) broadcast and shifted per lane.
 * Written to memory and read back as a vector they missed store forwarding, which cost the
 * row ~3x in cache (2026-12-02). */
static inline __m512i s_xs_scales2(const quant_block_iq4_xs *xa, const quant_block_iq4_xs *xb)
{
    uint32_t la, lb;
    memcpy(&la, xa->scales_l, 4);
    memcpy(&lb, xb->scales_l, 4);
    const __m512i l = _mm512_mask_set1_epi32(_mm512_set1_epi32((int)la), 0xFF00, (int)lb);
    const __m512i h = _mm512_mask_set1_epi32(_mm512_set1_epi32(xa->scales_h), 0xFF00,
                                             xb->scales_h);
    const __m512i lo = _mm512_and_si512(
        _mm512_srlv_epi32(l, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20,
                                               24, 28)),
        _mm512_set1_epi32(0xF));
    const __m512i hi = _mm512_and_si512(
        _mm512_srlv_epi32(h, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12,
                                               14)),
        _mm512_set1_epi32(3));
    const __m512i ls = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)),
                                        _mm512_set1_epi32(32));
    return _mm512_or_si512(_mm512_and_si512(ls, _mm512_set1_epi32(0xFFFF)),
                           _mm512_slli_epi32(ls, 16));
}

/* IQ4_XS: sub-blocks 4g..4g+3 in one vector's quarters (quant_x.h's lanes 4 (c % 2) + r
 * after the fold), unfolded; sc holds the scales at dwords 8 h + c (s_xs_scales2). */
static inline __attribute__((always_inline)) __m512i s_iq4xs(const quant_block_iq4_xs *x,
                                                            const quant_block_q8_K *y,
                                                            __m512i sc, int h)
{
    const __m128i kv = _mm_loadu_si128((const __m128i *)quant_iq4nl_values);
    const __m512i tab = _mm512_broadcast_i32x4(_mm_abs_epi8(kv));
    const __m512i m = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
    __m512i s = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int g = 0; g < 2; g++) {
        const __m512i v = _mm512_loadu_si512(x->qs + 64 * g);
        const __m512i y0 = _mm512_loadu_si512(y->qs + 128 * g);
        const __m512i y1 = _mm512_loadu_si512(y->qs + 128 * g + 64);
        const __m512i nlo = _mm512_and_si512(v, m);
        const __m512i nhi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
        __m512i ylo = _mm512_shuffle_i64x2(y0, y1, 0x88), yhi = _mm512_shuffle_i64x2(y0, y1, 0xDD);
        ylo = _mm512_mask_sub_epi8(ylo, _mm512_cmplt_epu8_mask(nlo, eight),
                                   _mm512_setzero_si512(), ylo);
        yhi = _mm512_mask_sub_epi8(yhi, _mm512_cmplt_epu8_mask(nhi, eight),
                                   _mm512_setzero_si512(), yhi);
        /* quarter i (sub-block 4g + i): dword 4g + i's pair of words */
        const __m512i scv = _mm512_permutexvar_epi32(
            _mm512_add_epi32(_mm512_set1_epi32(8 * h + 4 * g),
                             _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)),
            sc);
        s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(_mm512_shuffle_epi8(tab, nlo), ylo), scv);
        s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(_mm512_shuffle_epi8(tab, nhi), yhi), scv);
    }
    return s;
}

/* IQ4_XS super-blocks a and b into lanes 0..7 and 8..15 of acc (k = 0xFF: a alone, b = a):
 * the pair shares the scales' unpacking, the fold, the conversion and the fma, each one
 * 512-bit pass where two 256-bit ones were (the same integers and, lane for lane, the same
 * float operations as s_acc). */
static inline __attribute__((always_inline)) __m512 s_xs_pair(const quant_block_iq4_xs *xa,
                                                             const quant_block_iq4_xs *xb,
                                                             const quant_block_q8_K *ya,
                                                             const quant_block_q8_K *yb,
                                                             __m512 acc, __mmask16 k)
{
    const __m512i sc = s_xs_scales2(xa, xb);
    const __m512i sa = s_iq4xs(xa, ya, sc, 0), sb = s_iq4xs(xb, yb, sc, 1);
    /* [a's lo + hi | b's hi + lo]: s_fold's sums */
    const __m512i s = _mm512_add_epi32(_mm512_mask_blend_epi64(0xF0, sa, sb),
                                       _mm512_shuffle_i64x2(sa, sb, 0x4E));
    const __m128 d = _mm_mul_ps(
        _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)xb->d << 16 | xa->d))),
        _mm_setr_ps(ya->d, yb->d, 0.0f, 0.0f));
    const __m512 f = _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), _mm512_castps128_ps512(d));
    return _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(s), f, acc, k);
}

/* IQ4_XS rows: pairs b, b + 1 into lanes (b % 4) * 8 + k as dot_k23_gfni.c's s_dot: a group
 * of four fills a01 and a23; a row's odd last super-block goes in alone (masked). */
static float s_dot_xs(uint64_t n, const void *w, const void *act)
{
    const quant_block_q8_K *y = act;
    const quant_block_iq4_xs *x = w;
    const uint64_t nb = n / QUANT_QK_K;
    __m512 a01 = _mm512_setzero_ps(), a23 = a01;
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP) {
        quant_prefetch(x + b, (unsigned)(QUANT_QB_GROUP * sizeof *x));
        a01 = s_xs_pair(x + b, x + b + 1, y + b, y + b + 1, a01, 0xFFFF);
        a23 = s_xs_pair(x + b + 2, x + b + 3, y + b + 2, y + b + 3, a23, 0xFFFF);
    }
    const uint64_t r = nb - b;
    if (r >= 2)
        a01 = s_xs_pair(x + b, x + b + 1, y + b, y + b + 1, a01, 0xFFFF);
    if (r == 1)
        a01 = s_xs_pair(x + b, x + b, y + b, y + b, a01, 0x00FF);
    if (r == 3)
        a23 = s_xs_pair(x + b + 2, x + b + 2, y + b + 2, y + b + 2, a23, 0x00FF);
    float a[QUANT_LANES];
    _mm512_storeu_ps(a, a01);
    _mm512_storeu_ps(a + 16, a23);
    return quant_reduce32_avx(a);
}

static inline size_t s_bb256(quant_type t)
{
    return t == QUANT_Q2_K ? sizeof(quant_block_q2_K) : t == QUANT_Q3_K ? sizeof(quant_block_q3_K)
                                                                        : sizeof(quant_block_iq4_xs);
}

static inline uint16_t s_d256(quant_type t, const uint8_t *p)
{
    return s_u16(t == QUANT_Q2_K ? p + offsetof(quant_block_q2_K, d)
                 : t == QUANT_Q3_K ? p + offsetof(quant_block_q3_K, d) : p);
}

/* One super-block into its accumulator: the integer lanes by d_w * d_x, then Q2_K's mins by
 * dmin_w * d_x with fnmadd (negating a product is exact: the bits of fmaf(m, -(dmin d_x),
 * lane)). Q2_K's d and dmin are one 32-bit load, converted and scaled together (scalar
 * conversions, each an insert, a convert and a broadcast, were a fifth of the row in cache). */
static inline __attribute__((always_inline)) __m256 s_acc(quant_type t, const uint8_t *p,
                                                         const quant_block_q8_K *y, __m256 acc)
{
    __m256i mi = _mm256_setzero_si256();
    const __m256i s = s_q23(t == QUANT_Q3_K, p, y, &mi);
    uint32_t dd = 0;
    memcpy(&dd, t == QUANT_Q2_K ? p + offsetof(quant_block_q2_K, d)
                : t == QUANT_Q3_K ? p + offsetof(quant_block_q3_K, d) : p, t == QUANT_Q2_K ? 4 : 2);
    const __m256 d2 = _mm256_castps128_ps256(
        _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)(t == QUANT_Q2_K ? dd : dd & 0xFFFF))),
                   _mm_set1_ps(y->d)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_permutexvar_ps(_mm256_setzero_si256(), d2),
                          acc);
    if (t == QUANT_Q2_K)
        acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mi),
                               _mm256_permutexvar_ps(_mm256_set1_epi32(1), d2), acc);
    return acc;
}

static inline __attribute__((always_inline)) float s_dot256(quant_type t, uint64_t n,
                                                            const void *w, const void *act)
{
    const quant_block_q8_K *y = act;
    const size_t bb = s_bb256(t);
    const uint8_t *p = w;
    const uint64_t nb = n / QUANT_QK_K;
    /* four named accumulators, not an array: the last group's variable index kept an array in
     * memory, a load and store around every fma */
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP, p += QUANT_QB_GROUP * bb) {
        quant_prefetch(p, (unsigned)(QUANT_QB_GROUP * bb));
        a0 = s_acc(t, p, &y[b], a0);
        a1 = s_acc(t, p + bb, &y[b + 1], a1);
        a2 = s_acc(t, p + 2 * bb, &y[b + 2], a2);
        a3 = s_acc(t, p + 3 * bb, &y[b + 3], a3);
    }
    if (b < nb)
        a0 = s_acc(t, p, &y[b], a0);
    if (b + 1 < nb)
        a1 = s_acc(t, p + bb, &y[b + 1], a1);
    if (b + 2 < nb)
        a2 = s_acc(t, p + 2 * bb, &y[b + 2], a2);
    float a[QUANT_LANES];
    _mm256_storeu_ps(a, a0);
    _mm256_storeu_ps(a + 8, a1);
    _mm256_storeu_ps(a + 16, a2);
    _mm256_storeu_ps(a + 24, a3);
    return quant_reduce32_avx(a);
}

float quant_dot_q2_K_avx512(uint64_t n, const void *w, const void *act)
{
    return s_dot256(QUANT_Q2_K, n, w, act);
}

float quant_dot_q3_K_avx512(uint64_t n, const void *w, const void *act)
{
    return s_dot256(QUANT_Q3_K, n, w, act);
}

float quant_dot_iq4_xs_avx512(uint64_t n, const void *w, const void *act)
{
    return s_dot_xs(n, w, act);
}

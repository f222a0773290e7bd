/* dot_x_avx2.c — AVX2 dot products of Q4_1, Q5_0, Q5_1, IQ4_NL (against Q8_0) and Q2_K, Q3_K,
 * IQ4_XS (against Q8_K), lane for lane quant_x.h's order. quant/
 *
 * Blocks of 32 go four at a time as dot_avx2.c's Q4_0: two blocks' 16 nibble bytes side by
 * side are one vector, masked the blocks' elements 0..15, shifted 16..31, meeting the
 * activation's grouped copy qs4 in one load each. Unsigned levels (Q4_1 0..15, Q5_0 / Q5_1
 * 0..31) times signed activation bytes: vpmaddubsw (2 * 31 * 127 < 2^15: no saturation),
 * pairs to int32 with vpmaddwd; Q5_0's offset is -16 * the quad sums = 2 * bias8; IQ4_NL's
 * signed levels (|v| <= 127) go in as |v| and the activation takes v's sign (vpsignb), so
 * the int16 step stays below 2 * 127 * 127. Super-blocks go one 32-value chunk per vector,
 * as dot_k_avx2.c's Q6_K. The unpacking of Q4_1 / Q5_0 / Q5_1 / IQ4_NL groups and of IQ4_XS
 * super-blocks is xq_avx2.h's, which the batched kernels (gemm_x_avx2.c) share.
 */
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>
#include <string.h>

#include "quant/quant_x.h"
#include "quant/reduce_avx.h"
#include "quant/xq_avx2.h"

static inline uint16_t s_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* One group of four blocks at x (bb bytes each) into a[0..3] (xq_avx2.h: the weights
 * unpacked, then this position's activation). */
static inline __attribute__((always_inline)) void s_group(quant_type t, const uint8_t *x,
                                                         const int8_t *q, const int32_t *b8,
                                                         const float *dxp, const float *syp,
                                                         int k, __m256 a[4])
{
    xq_avx2_g32 g;
    xq_avx2_unpack32(t, x, &g);
    xq_avx2_acc32(t, &g, q, b8, dxp, syp, k, a);
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
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                      _mm256_setzero_ps() };
    float a[QUANT_LANES];
    uint64_t b = 0;
    /* y's fields in locals: y's address goes to quant_x_pad32, and read through it they were
     * reloaded from the stack every group */
    const int8_t *const qs4 = y.qs4;
    const int32_t *const bias8 = y.bias8;
    const float *const yd = y.d;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP, x += QUANT_QB_GROUP * bb) {
        quant_prefetch(x, (unsigned)(QUANT_QB_GROUP * bb));
        s_group(t, x, qs4 + b * 32, bias8 + b * 8, yd + b, mn ? sums + b : NULL, 4, acc);
    }
    if (b < nb) {
        quant_x_pad pad;
        quant_x_pad32(t, x, b, nb, &y, sums, &pad);
        s_group(t, pad.blk, pad.qs4, y.bias8 + b * 8, pad.d, pad.s, (int)(nb - b), acc);
    }
    for (int i = 0; i < 4; i++)
        _mm256_storeu_ps(a + 8 * i, acc[i]);
    return quant_reduce32_avx(a);
}

float quant_dot_q4_1_avx2(uint64_t n, const void *w, const void *act)
{
    return s_dot32(QUANT_Q4_1, n, w, act);
}

float quant_dot_q5_0_avx2(uint64_t n, const void *w, const void *act)
{
    return s_dot32(QUANT_Q5_0, n, w, act);
}

float quant_dot_q5_1_avx2(uint64_t n, const void *w, const void *act)
{
    return s_dot32(QUANT_Q5_1, n, w, act);
}

float quant_dot_iq4_nl_avx2(uint64_t n, const void *w, const void *act)
{
    return s_dot32(QUANT_IQ4_NL, n, w, act);
}

/* ---------------------------------------------------------------- super-blocks */

/* Q3_K's 16 scales - 32 as bytes, in vector registers (ggml's kmask unpacking in scalar form
 * went through memory: the 12-byte store and 16-byte reload missed store forwarding and
 * cost the q3_K row ~3x in cache, 2026-12-02), for two super-blocks at once (every step stays
 * within a 128-bit lane: xa's in the low lane, xb's in the high; ~11 uops a super-block were
 * spent on one, 2026-12-03). Low 4 bits: bytes 0..7 of S low nibbles,
 * then their high nibbles; high 2 bits of scale j: bits 2 (j / 4) of S[8 + j % 4]. S is read
 * as the 16 bytes ending with the scales (the block's qs comes before them). */
static inline __m256i s_q3_scales2(const quant_block_q3_K *xa, const quant_block_q3_K *xb)
{
    const __m256i S = _mm256_srli_si256(
        _mm256_loadu2_m128i((const __m128i *)(xb->scales + 12 - 16),
                            (const __m128i *)(xa->scales + 12 - 16)), 4);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_unpacklo_epi64(_mm256_and_si256(S, m4),
                                             _mm256_and_si256(_mm256_srli_epi16(S, 4), m4));
    const __m256i h = _mm256_shuffle_epi32(_mm256_srli_si256(S, 8), 0);
    const __m256i hi = _mm256_and_si256(
        _mm256_srlv_epi32(h, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)), _mm256_set1_epi8(3));
    return _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
}

/* Q2_K (q3 = 0) or Q3_K: the super-block's 8 integer lanes (and Q2_K's min lanes). */
static inline __attribute__((always_inline)) __m256i s_q23(int q3, const uint8_t *p,
                                                          const quant_block_q8_K *y,
                                                          __m256i *mins, __m128i sc8)
{
    const uint8_t *qs;
    __m256i sc16 = _mm256_setzero_si256(), sb = sc16, hm = sc16;
    const __m256i bs = _mm256_loadu_si256((const __m256i *)y->bsums);
    if (!q3) {
        const quant_block_q2_K *x = (const quant_block_q2_K *)p;
        const __m128i s8 = _mm_loadu_si128((const __m128i *)x->scales);
        /* the 16 scales as bytes in both lanes (a broadcast load and an and): each chunk's
         * scale words are one vpshufb of them with zero high bytes, where widening and two
         * lane copies took 3 port-5 uops a super-block */
        sb = _mm256_and_si256(_mm256_broadcastsi128_si256(s8), _mm256_set1_epi8(0x0F));
        *mins = _mm256_madd_epi16(
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(0x0F))), bs);
        qs = x->qs;
    } else {
        const quant_block_q3_K *x = (const quant_block_q3_K *)p;
        /* ggml's kmask unpacking (dequantize_row_q3_K), then - 32 */
        sc16 = _mm256_cvtepi8_epi16(sc8); /* s_q3_scales2's */
        hm = _mm256_loadu_si256((const __m256i *)x->hmask);
        qs = x->qs;
    }
    const __m256i m3 = _mm256_set1_epi8(3);
    /* scales 0..7 in both halves (chunks 0..3), 8..15 in both (chunks 4..7): each chunk's
     * scale words are then one vpshufb, not a cross-lane permute and a vpshufb */
    const __m256i sl = q3 ? _mm256_permute2x128_si256(sc16, sc16, 0x00) : sc16;
    const __m256i sh = q3 ? _mm256_permute2x128_si256(sc16, sc16, 0x11) : sc16;
    __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int n = 0; n < 2; n++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * n));
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const int c = 4 * n + j;
            __m256i q = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m3);
            if (q3) /* hmask's bit c moved to bit 2 (16-bit shifts: what crosses a byte
                     * boundary is masked off): 3 uops where and, compare, and, or took 4 */
                q = _mm256_or_si256(q, _mm256_and_si256(c <= 2 ? _mm256_slli_epi16(hm, 2 - c)
                                                               : _mm256_srli_epi16(hm, c - 2),
                                                        _mm256_set1_epi8(4)));
            const __m256i pr = _mm256_maddubs_epi16(
                q, _mm256_loadu_si256((const __m256i *)(y->qs + 32 * c)));
            /* words 0..7 (elements 0..15) scale 2j, 8..15 scale 2j + 1 of this half's 8 */
            const __m256i pick = _mm256_setr_epi8(
                (char)(4 * j), (char)(4 * j + 1), (char)(4 * j), (char)(4 * j + 1), (char)(4 * j),
                (char)(4 * j + 1), (char)(4 * j), (char)(4 * j + 1), (char)(4 * j),
                (char)(4 * j + 1), (char)(4 * j), (char)(4 * j + 1), (char)(4 * j),
                (char)(4 * j + 1), (char)(4 * j), (char)(4 * j + 1), (char)(4 * j + 2),
                (char)(4 * j + 3), (char)(4 * j + 2), (char)(4 * j + 3), (char)(4 * j + 2),
                (char)(4 * j + 3), (char)(4 * j + 2), (char)(4 * j + 3), (char)(4 * j + 2),
                (char)(4 * j + 3), (char)(4 * j + 2), (char)(4 * j + 3), (char)(4 * j + 2),
                (char)(4 * j + 3), (char)(4 * j + 2), (char)(4 * j + 3));
            /* Q2_K: byte 8n + 2j (low lane), 8n + 2j + 1 (high lane) of sb, zero-extended */
            const char e = (char)(8 * n + 2 * j), o = (char)(e + 1);
            const __m256i pick2 = _mm256_setr_epi8(e, -1, e, -1, e, -1, e, -1, e, -1, e, -1, e, -1,
                                                   e, -1, o, -1, o, -1, o, -1, o, -1, o, -1, o, -1,
                                                   o, -1, o, -1);
            const __m256i scw = q3 ? _mm256_shuffle_epi8(n ? sh : sl, pick)
                                   : _mm256_shuffle_epi8(sb, pick2);
            s = _mm256_add_epi32(s, _mm256_madd_epi16(pr, scw));
        }
    }
    if (q3) /* the levels were value + 4: lane k takes back 4 (sc bsums) of sub-blocks 2k, 2k+1 */
        s = _mm256_sub_epi32(s, _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 2));
    return s;
}

/* IQ4_XS: sub-blocks c, c + 1 as one vector's halves (xq_avx2.h); w the super-block's 8 scale
 * words in both 128-bit lanes. The activation's halves are loaded into place (vinserti128 from
 * memory, any of three ports) where two vperm2i128 (port 5) moved them. */
static inline __attribute__((always_inline)) __m256i s_iq4xs(const quant_block_iq4_xs *x,
                                                            const quant_block_q8_K *y, __m256i w)
{
    __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 8; c += 2) {
        __m256i klo, khi;
        xq_avx2_iq4xs_levels(x, c, &klo, &khi);
        const int8_t *yc = y->qs + 32 * c;
        const __m256i ylo = _mm256_loadu2_m128i((const __m128i *)(yc + 32), (const __m128i *)yc);
        const __m256i yhi = _mm256_loadu2_m128i((const __m128i *)(yc + 48),
                                                (const __m128i *)(yc + 16));
        const __m256i scv = xq_avx2_iq4xs_scw(w, c);
        s = xq_avx2_iq4xs_step(s, _mm256_sign_epi8(klo, klo), klo, ylo, scv);
        s = xq_avx2_iq4xs_step(s, _mm256_sign_epi8(khi, khi), khi, yhi, scv);
    }
    return s;
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

/* One super-block into its accumulator (quant_x.h): the integer lanes by d_w * d_x, then
 * Q2_K's mins by -(dmin_w * d_x). */
static inline __attribute__((always_inline)) __m256 s_acc(quant_type t, const uint8_t *p,
                                                         const quant_block_q8_K *y, __m256 acc,
                                                         __m256i w)
{
    __m256i s, mi = _mm256_setzero_si256();
    if (t == QUANT_IQ4_XS)
        s = s_iq4xs((const quant_block_iq4_xs *)p, y, w);
    else
        s = s_q23(t == QUANT_Q3_K, p, y, &mi, _mm256_castsi256_si128(w));
    if (t == QUANT_Q2_K) {
        /* d and dmin (adjacent halves) widened in one conversion, times [d_x, -d_x] in one
         * multiply: dmin * -d_x is -(dmin * d_x) to the bit (rounding is sign-symmetric) */
        uint32_t h;
        memcpy(&h, p + offsetof(quant_block_q2_K, d), 4);
        const __m128 yx = _mm_xor_ps(_mm_set1_ps(y->d), _mm_setr_ps(0.0f, -0.0f, 0.0f, 0.0f));
        const __m256 dd = _mm256_castps128_ps256(
            _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)h)), yx));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_permutevar8x32_ps(dd, _mm256_set1_epi32(0)),
                              acc);
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(mi),
                               _mm256_permutevar8x32_ps(dd, _mm256_set1_epi32(1)), acc);
    }
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(_cvtsh_ss(s_d256(t, p)) * y->d),
                           acc);
}

/* What two super-blocks at pa, pb share a pass for (lane h: super-block h): IQ4_XS's scale
 * words, Q3_K's scale bytes; nothing for Q2_K. */
static inline __attribute__((always_inline)) __m256i s_pair(quant_type t, const uint8_t *pa,
                                                           const uint8_t *pb)
{
    if (t == QUANT_IQ4_XS)
        return xq_avx2_xs_words2(pa, pb);
    if (t == QUANT_Q3_K)
        return s_q3_scales2((const quant_block_q3_K *)pa, (const quant_block_q3_K *)pb);
    return _mm256_setzero_si256();
}

/* Super-block h's part of s_pair's w: IQ4_XS's words in both lanes, Q3_K's bytes in the low. */
static inline __attribute__((always_inline)) __m256i s_half2(quant_type t, __m256i w, int h)
{
    if (t == QUANT_IQ4_XS)
        return h ? _mm256_permute2x128_si256(w, w, 0x11) : _mm256_permute2x128_si256(w, w, 0x00);
    if (t == QUANT_Q3_K)
        return h ? _mm256_permute2x128_si256(w, w, 0x11) : w;
    return w;
}

static inline __attribute__((always_inline)) float s_dot256(quant_type t, uint64_t n,
                                                            const void *w, const void *act)
{
    const quant_block_q8_K *y = act;
    const size_t bb = s_bb256(t);
    const uint8_t *p = w;
    const uint64_t nb = n / QUANT_QK_K;
    /* four named accumulators: an array indexed by a variable stays in memory */
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    uint64_t b = 0;
    __m256i w01, w23;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP, p += QUANT_QB_GROUP * bb) {
        quant_prefetch(p, (unsigned)(QUANT_QB_GROUP * bb));
        w01 = s_pair(t, p, p + bb);
        w23 = s_pair(t, p + 2 * bb, p + 3 * bb);
        a0 = s_acc(t, p, &y[b], a0, s_half2(t, w01, 0));
        a1 = s_acc(t, p + bb, &y[b + 1], a1, s_half2(t, w01, 1));
        a2 = s_acc(t, p + 2 * bb, &y[b + 2], a2, s_half2(t, w23, 0));
        a3 = s_acc(t, p + 3 * bb, &y[b + 3], a3, s_half2(t, w23, 1));
    }
    /* the last 1..3: each its own header twice (read inside its block) */
    if (b < nb)
        a0 = s_acc(t, p, &y[b], a0, s_half2(t, s_pair(t, p, p), 0));
    if (b + 1 < nb)
        a1 = s_acc(t, p + bb, &y[b + 1], a1, s_half2(t, s_pair(t, p + bb, p + bb), 0));
    if (b + 2 < nb)
        a2 = s_acc(t, p + 2 * bb, &y[b + 2], a2,
                   s_half2(t, s_pair(t, p + 2 * bb, p + 2 * bb), 0));
    float a[QUANT_LANES];
    _mm256_storeu_ps(a, a0);
    _mm256_storeu_ps(a + 8, a1);
    _mm256_storeu_ps(a + 16, a2);
    _mm256_storeu_ps(a + 24, a3);
    return quant_reduce32_avx(a);
}

float quant_dot_q2_K_avx2(uint64_t n, const void *w, const void *act)
{
    return s_dot256(QUANT_Q2_K, n, w, act);
}

float quant_dot_q3_K_avx2(uint64_t n, const void *w, const void *act)
{
    return s_dot256(QUANT_Q3_K, n, w, act);
}

float quant_dot_iq4_xs_avx2(uint64_t n, const void *w, const void *act)
{
    return s_dot256(QUANT_IQ4_XS, n, w, act);
}

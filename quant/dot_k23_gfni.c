/* dot_k23_gfni.c — Q2_K and Q3_K dot products against Q8_K on AVX-512 (BW + VL + VNNI) with
 * GFNI, lane for lane quant_x.h's order (the same integers and the same float operations as
 * kquant_lo.c's scalar kernel and dot_x_avx512.c's kernel for CPUs without GFNI). quant/
 *
 * dot_x_avx512.c's form spent ~40 (Q2_K) / ~50 (Q3_K) 512-bit uops per 256-value super-block
 * on this CPU's two vector ports, 10.4-11.4 GB/s in cache, where the DRAM read runs up to
 * 12 GB/s (docs/measurements/2026-12-02-row-kernels.md). What changed, per super-block:
 *   - a 2-bit field comes out of the quant bytes in one vgf2p8affineqb (a bit matrix per
 *     256-bit half; shift + and was two uops), which also ORs in constant index bits;
 *   - Q2_K: level x scale (<= 45) is looked up, not multiplied: one vpshufb table per super-
 *     block holds t * sc[4 m + j] at byte 4 m + t of 128-bit lane j, and vector m of the four
 *     (lane j = sub-block 4 m + j) indexes it with level | 4 m; one vpdpbusd then adds
 *     level * sc * y quad by quad (the scale's vpermw and vpdpwssd are gone);
 *   - Q3_K: level = 2-bit field | third bit (two vgf2p8affineqb and an or), vpmaddubsw and
 *     vpdpwssd by the sub-block's scale as before, the scale words by an in-lane vpshufb
 *     (vpermw is two uops here: a throughput test, 8 vpdpbusd + 8 vpermw in 12 cycles);
 *   - two super-blocks share the fold, the conversions, the fmas (16 lanes of one 512-bit
 *     accumulator: lanes (b % 4) * 8 + k of b and b + 1) and Q2_K's min / Q3_K's scale unpacking.
 */
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,gfni")
#include <immintrin.h>
#include <string.h>

#include "quant/quant_x.h"
#include "quant/reduce_avx.h"

/* vgf2p8affineqb matrix rows (one qword; row k, for output bit k, is byte 7 - k):
 * S_ROW(k, src): output bit k <- input bit src. */
#define S_ROW(k, src) ((1ull << (src)) << (8 * (7 - (k))))
/* bits src, src + 1 -> bits 0, 1 (a 2-bit field) */
#define S_FIELD(src) (S_ROW(0, src) | S_ROW(1, (src) + 1))
/* one matrix for the low 256-bit half, one for the high */
#define S_MAT(lo, hi) _mm512_set_epi64((long long)(hi), (long long)(hi), (long long)(hi), \
                                       (long long)(hi), (long long)(lo), (long long)(lo), \
                                       (long long)(lo), (long long)(lo))

/* Two 256-bit values side by side. */
static inline __m512i s_two(const void *a, const void *b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* Two 128-bit values side by side. */
static inline __m256i s_two128(const void *a, const void *b)
{
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                   _mm_loadu_si128((const __m128i *)b), 1);
}

/* Two super-blocks' 16 dwords each (dword i of 128-bit quarter q: quad 4 (q % 2) + i) into
 * [a's 8 lanes | b's 8 lanes]. */
static inline __m512i s_fold2(__m512i a, __m512i b)
{
    return _mm512_add_epi32(_mm512_mask_blend_epi64(0xF0, a, b), _mm512_shuffle_i64x2(a, b, 0x4E));
}

/* [d_a dx_a, m_a dx_a, d_b dx_b, m_b dx_b] from the f16 pairs (d, m) in ha and hb (Q3_K has
 * no m: 0). The same products as the scalar kernel's. */
static inline __m128 s_dd(uint32_t ha, uint32_t hb, float dxa, float dxb)
{
    const __m128 w = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)((uint64_t)hb << 32 | ha)));
    return _mm_mask_mul_ps(_mm_mul_ps(w, _mm_set1_ps(dxa)), 0xC, w, _mm_set1_ps(dxb));
}

/* acc + s * f on the lanes in k (acc elsewhere), f = [dd[i] x 8 | dd[i + 2] x 8]; neg: acc -
 * s * f (fnmadd: the bits of fmaf(s, -f, acc), as the scalar kernel's mins). */
static inline __m512 s_fma(__m512i s, __m128 dd, int i, int neg, __m512 acc, __mmask16 k)
{
    const __m512 f = _mm512_permutexvar_ps(
        _mm512_set_epi32(i + 2, i + 2, i + 2, i + 2, i + 2, i + 2, i + 2, i + 2, i, i, i, i, i, i,
                         i, i),
        _mm512_castps128_ps512(dd));
    return neg ? _mm512_mask3_fnmadd_ps(_mm512_cvtepi32_ps(s), f, acc, k)
               : _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(s), f, acc, k);
}

/* ---------------------------------------------------------------- Q2_K */

/* Q2_K's integer dwords (16, unfolded) of one super-block. */
static inline __attribute__((always_inline)) __m512i s_q2(const quant_block_q2_K *x,
                                                         const quant_block_q8_K *y)
{
    /* b: byte 16 j + 4 m + t = scales[4 m + j]; tab: t * its low nibble (t sc <= 45) */
    const __m512i b = _mm512_shuffle_epi8(
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)x->scales)),
        _mm512_set_epi32(0x0F0F0F0F, 0x0B0B0B0B, 0x07070707, 0x03030303, 0x0E0E0E0E, 0x0A0A0A0A,
                         0x06060606, 0x02020202, 0x0D0D0D0D, 0x09090909, 0x05050505, 0x01010101,
                         0x0C0C0C0C, 0x08080808, 0x04040404, 0));
    const __m512i t1 = _mm512_and_si512(b, _mm512_set1_epi32(0x0F000F00)); /* t = 1, 3: sc */
    const __m512i t2 = _mm512_maskz_gf2p8affine_epi64_epi8( /* t = 2, 3: bits 0..3 -> 1..4 */
        0xCCCCCCCCCCCCCCCCull, b,
        _mm512_set1_epi64((long long)(S_ROW(1, 0) | S_ROW(2, 1) | S_ROW(3, 2) | S_ROW(4, 3))), 0);
    const __m512i tab = _mm512_add_epi8(t1, t2);
    const __m512i v0 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->qs));
    const __m512i v1 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qs + 32)));
    __m512i s = _mm512_setzero_si512();
    /* vector m: chunks 2 m (low half: bits sh, sh + 1 of qs[32 (m / 2) + l]), 2 m + 1 (high
     * half, bits sh + 2, sh + 3); lane j = sub-block 4 m + j; index level | 4 m */
#define S_Q2(v, m, sh)                                                                           \
    s = _mm512_dpbusd_epi32(                                                                     \
        s,                                                                                       \
        _mm512_shuffle_epi8(tab, _mm512_gf2p8affine_epi64_epi8(                                  \
                                     v, S_MAT(S_FIELD(sh), S_FIELD((sh) + 2)), 4 * (m))),        \
        _mm512_loadu_si512(y->qs + 64 * (m)))
    S_Q2(v0, 0, 0);
    S_Q2(v0, 1, 4);
    S_Q2(v1, 2, 0);
    S_Q2(v1, 3, 4);
#undef S_Q2
    return s;
}

/* Super-blocks a and b into lanes 0..7 and 8..15 of acc (k = 0xFF: a alone, b = a). */
static inline __attribute__((always_inline)) __m512 s_q2_pair(const quant_block_q2_K *xa,
                                                             const quant_block_q2_K *xb,
                                                             const quant_block_q8_K *ya,
                                                             const quant_block_q8_K *yb,
                                                             __m512 acc, __mmask16 k)
{
    const __m512i s = s_fold2(s_q2(xa, ya), s_q2(xb, yb));
    /* mins (high nibbles) against bsums, lane k: pair 2 k, 2 k + 1 */
    const __m512i mi = _mm512_madd_epi16(
        _mm512_srli_epi16(_mm512_cvtepu8_epi16(s_two128(xa->scales, xb->scales)), 4),
        s_two(ya->bsums, yb->bsums));
    uint32_t ha, hb;
    memcpy(&ha, &xa->d, 4); /* d, dmin */
    memcpy(&hb, &xb->d, 4);
    const __m128 dd = s_dd(ha, hb, ya->d, yb->d);
    acc = s_fma(s, dd, 0, 0, acc, k);
    return s_fma(mi, dd, 1, 1, acc, k);
}

/* ---------------------------------------------------------------- Q3_K */

/* Two super-blocks' 16 scales - 32 each, as bytes [a's | b's]. Q is read as the 16 bytes
 * ending with the scales (the block's qs comes before them; nothing past the block is read):
 * scales[i] is Q[4 + i]. Scale j's low 4 bits: nibble j / 8 of scales[j % 8]; its high 2:
 * bits 2 (j / 4) of scales[8 + j % 4], to bits 4, 5; minus 32: bits 5..7 = not bit 5 (the
 * same bytes as ggml's kmask unpacking less 32, in 7 uops where shifts and masks took 15). */
static inline __m256i s_q3_scales2(const quant_block_q3_K *xa, const quant_block_q3_K *xb)
{
    const __m256i Q = s_two128(xa->scales + 12 - 16, xb->scales + 12 - 16);
    /* qwords 0 and 1 both scales[0..7]: low nibbles (j < 8), high nibbles (j >= 8) */
    const __m256i lo = _mm256_gf2p8affine_epi64_epi8(
        _mm256_shuffle_epi8(Q, _mm256_setr_epi8(4, 5, 6, 7, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11,
                                                4, 5, 6, 7, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10,
                                                11)),
        _mm256_setr_epi64x((long long)(S_ROW(0, 0) | S_ROW(1, 1) | S_ROW(2, 2) | S_ROW(3, 3)),
                           (long long)(S_ROW(0, 4) | S_ROW(1, 5) | S_ROW(2, 6) | S_ROW(3, 7)),
                           (long long)(S_ROW(0, 0) | S_ROW(1, 1) | S_ROW(2, 2) | S_ROW(3, 3)),
                           (long long)(S_ROW(0, 4) | S_ROW(1, 5) | S_ROW(2, 6) | S_ROW(3, 7))),
        0);
    /* byte j: scales[8 + j % 4]; dword j / 4 rotated so bits 2 (j / 4), + 1 sit at 4, 5 */
    const __m256i hi = _mm256_rolv_epi32(_mm256_shuffle_epi8(Q, _mm256_set1_epi32(0x0F0E0D0C)),
                                         _mm256_setr_epi32(4, 2, 0, 30, 4, 2, 0, 30));
    const __m256i hs = _mm256_gf2p8affine_epi64_epi8(
        hi, _mm256_set1_epi64x((long long)(S_ROW(4, 4) | S_ROW(5, 5) | S_ROW(6, 5) | S_ROW(7, 5))),
        0xE0);
    return _mm256_or_si256(lo, hs);
}

/* Q3_K's integer dwords (16, unfolded) of super-block h of a pair, before the -4 term. ts:
 * the pair's scales as words, 128-bit lane j holding sub-blocks j, 4 + j, 8 + j, 12 + j of
 * a, then of b: vector m's scales (lane j: sub-block 4 m + j) are one in-lane vpshufb
 * (vpermw, which they took before, is two uops here). */
static inline __attribute__((always_inline)) __m512i s_q3(const quant_block_q3_K *x,
                                                         const quant_block_q8_K *y, __m512i ts,
                                                         int h)
{
    const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->hmask));
    const __m512i v0 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->qs));
    const __m512i v1 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qs + 32)));
    __m512i s = _mm512_setzero_si512();
    /* vector m as Q2_K's; level = field | chunk's hmask bit (bit 2 m, 2 m + 1) << 2 */
#define S_Q3(v, m, sh)                                                                           \
    do {                                                                                         \
        const __m512i q = _mm512_or_si512(                                                       \
            _mm512_gf2p8affine_epi64_epi8(v, S_MAT(S_FIELD(sh), S_FIELD((sh) + 2)), 0),          \
            _mm512_gf2p8affine_epi64_epi8(hm, S_MAT(S_ROW(2, 2 * (m)), S_ROW(2, 2 * (m) + 1)),   \
                                          0));                                                   \
        const __m512i sc = _mm512_shuffle_epi8(                                                  \
            ts, _mm512_set1_epi16((short)(0x0100 + 0x0202 * (4 * h + (m)))));                    \
        s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(q, _mm512_loadu_si512(y->qs + 64 * (m))), \
                                sc);                                                             \
    } while (0)
    S_Q3(v0, 0, 0);
    S_Q3(v0, 1, 4);
    S_Q3(v1, 2, 0);
    S_Q3(v1, 3, 4);
#undef S_Q3
    return s;
}

static inline __attribute__((always_inline)) __m512 s_q3_pair(const quant_block_q3_K *xa,
                                                             const quant_block_q3_K *xb,
                                                             const quant_block_q8_K *ya,
                                                             const quant_block_q8_K *yb,
                                                             __m512 acc, __mmask16 k)
{
    const __m512i sc16 = _mm512_cvtepi8_epi16(s_q3_scales2(xa, xb)); /* [a's 16 | b's 16] */
    /* word 8 j + 4 h + m of ts: word 16 h + 4 m + j of sc16 */
    const __m512i ts = _mm512_permutexvar_epi16(
        _mm512_set_epi16(31, 27, 23, 19, 15, 11, 7, 3, 30, 26, 22, 18, 14, 10, 6, 2, 29, 25, 21, 17,
                         13, 9, 5, 1, 28, 24, 20, 16, 12, 8, 4, 0),
        sc16);
    __m512i s = s_fold2(s_q3(xa, ya, ts, 0), s_q3(xb, yb, ts, 1));
    /* levels 0..7 for values -4..3: lane k takes back 4 (sc[2k] bsums[2k] + sc[2k+1] ...) */
    s = _mm512_sub_epi32(
        s, _mm512_slli_epi32(_mm512_madd_epi16(sc16, s_two(ya->bsums, yb->bsums)), 2));
    uint16_t ha, hb;
    memcpy(&ha, &xa->d, 2);
    memcpy(&hb, &xb->d, 2);
    return s_fma(s, s_dd(ha, hb, ya->d, yb->d), 0, 0, acc, k);
}

/* ---------------------------------------------------------------- rows */

/* Pairs b, b + 1 into lanes (b % 4) * 8 + k: a group of four fills acc01 and acc23; a row's
 * odd last super-block goes in alone (its pair partner is itself, masked off). */
static inline __attribute__((always_inline)) float s_dot(int q3, uint64_t n, const void *w,
                                                         const void *act)
{
    const quant_block_q8_K *y = act;
    const size_t bb = q3 ? sizeof(quant_block_q3_K) : sizeof(quant_block_q2_K);
    const uint8_t *p = w;
    const uint64_t nb = n / QUANT_QK_K;
    __m512 a01 = _mm512_setzero_ps(), a23 = a01;
#define S_PAIR(acc, i, j, k)                                                                     \
    acc = q3 ? s_q3_pair((const quant_block_q3_K *)(p + (i) * bb),                               \
                         (const quant_block_q3_K *)(p + (j) * bb), &y[b + (i)], &y[b + (j)], acc, \
                         k)                                                                      \
             : s_q2_pair((const quant_block_q2_K *)(p + (i) * bb),                               \
                         (const quant_block_q2_K *)(p + (j) * bb), &y[b + (i)], &y[b + (j)], acc, \
                         k)
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP, p += QUANT_QB_GROUP * bb) {
        quant_prefetch(p, (unsigned)(QUANT_QB_GROUP * bb));
        S_PAIR(a01, 0, 1, 0xFFFF);
        S_PAIR(a23, 2, 3, 0xFFFF);
    }
    const uint64_t r = nb - b;
    if (r >= 2)
        S_PAIR(a01, 0, 1, 0xFFFF);
    if (r == 1)
        S_PAIR(a01, 0, 0, 0x00FF);
    if (r == 3)
        S_PAIR(a23, 2, 2, 0x00FF);
#undef S_PAIR
    float a[QUANT_LANES];
    _mm512_storeu_ps(a, a01);
    _mm512_storeu_ps(a + 16, a23);
    return quant_reduce32_avx(a);
}

float quant_dot_q2_K_gfni(uint64_t n, const void *w, const void *act)
{
    return s_dot(0, n, w, act);
}

float quant_dot_q3_K_gfni(uint64_t n, const void *w, const void *act)
{
    return s_dot(1, n, w, act);
}

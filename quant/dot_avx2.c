/* dot_avx2.c — AVX2 + FMA + F16C dot products, lane for lane the scalar order of quant.h. quant/
 *
 * Compiled for those extensions with a target pragma (the rest of swarm is built for the
 * baseline x86-64), and only called after dot.c has asked cpuid that the CPU has them.
 * Four 8-lane accumulators are the 32 lanes; a row's leftover elements finish in the same
 * lanes (the scalar tail), its leftover blocks as one partial pass (part_avx2.h), then one
 * reduction tree.
 */
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include <string.h>

#include "quant/part_avx2.h"
#include "quant/quant_int.h"
#include "quant/reduce_avx.h"

/* Exact widening of one IEEE half (F16C). */
static inline float s_h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

static inline void s_store4(float *a, __m256 a0, __m256 a1, __m256 a2, __m256 a3)
{
    _mm256_storeu_ps(a, a0);
    _mm256_storeu_ps(a + 8, a1);
    _mm256_storeu_ps(a + 16, a2);
    _mm256_storeu_ps(a + 24, a3);
}

float quant_dot_f32_avx2(uint64_t n, const void *wv, const void *act)
{
    const float *w = wv, *x = act;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    float a[QUANT_LANES];
    uint64_t i = 0;
    for (; i + QUANT_LANES <= n; i += QUANT_LANES) {
        quant_prefetch(w + i, QUANT_LANES * 4);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    s_store4(a, a0, a1, a2, a3);
    quant_tail_f32(w, x, i, n, a);
    return quant_reduce32_avx(a);
}

static inline __m256 s_f16x8(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

float quant_dot_f16_avx2(uint64_t n, const void *wv, const void *act)
{
    const uint16_t *w = wv;
    const float *x = act;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    float a[QUANT_LANES];
    uint64_t i = 0;
    for (; i + QUANT_LANES <= n; i += QUANT_LANES) {
        quant_prefetch(w + i, QUANT_LANES * 2);
        a0 = _mm256_fmadd_ps(s_f16x8(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(s_f16x8(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(s_f16x8(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(s_f16x8(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    s_store4(a, a0, a1, a2, a3);
    quant_tail_f16(w, x, i, n, a);
    return quant_reduce32_avx(a);
}

/* bf16 is the top half of an f32: widen to 32 bits and shift left 16 (exact). */
static inline __m256 s_bf16x8(const uint16_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

float quant_dot_bf16_avx2(uint64_t n, const void *wv, const void *act)
{
    const uint16_t *w = wv;
    const float *x = act;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    float a[QUANT_LANES];
    uint64_t i = 0;
    for (; i + QUANT_LANES <= n; i += QUANT_LANES) {
        quant_prefetch(w + i, QUANT_LANES * 2);
        a0 = _mm256_fmadd_ps(s_bf16x8(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(s_bf16x8(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(s_bf16x8(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(s_bf16x8(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    s_store4(a, a0, a1, a2, a3);
    quant_tail_bf16(w, x, i, n, a);
    return quant_reduce32_avx(a);
}

/* Eight exact int32 sums of 4 products each (quad q = bytes 4q..4q+3) of two vectors of 32
 * signed bytes, as ggml's mul_sum_i8_pairs: |x| (unsigned) times y carrying x's sign, pairs
 * summed to int16 by maddubs, pairs of those to int32. The int16 step cannot saturate:
 * |x| <= 128 and |y| <= 127 (activations come from quantize_row_q8_0_ref), 2*128*127 < 2^15. */
static inline __m256i s_quads_signed(__m256i x, __m256i y)
{
    const __m256i ax = _mm256_sign_epi8(x, x);
    const __m256i sy = _mm256_sign_epi8(y, x);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

/* Eight blocks' 8 partial sums each (q[k]: block k) folded to one exact sum per block, lane
 * k = block k: in-lane horizontal adds give quads 0..3 (low half) and 4..7 (high half) of
 * four blocks side by side, and one cross-half add finishes. Integer sums are exact, so the
 * folding order is free. */
static inline __m256i s_fold8(const __m256i q[8])
{
    const __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(q[0], q[1]),
                                         _mm256_hadd_epi32(q[2], q[3]));
    const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(q[4], q[5]),
                                         _mm256_hadd_epi32(q[6], q[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20),
                            _mm256_permute2x128_si256(h0, h1, 0x31));
}

/* The weight scales of blocks x[0..7] widened (exact), lane j = block j; lanes j >= k zero
 * (those blocks not read: a row's partial last pass). */
#define S_DW8(x, k) _mm256_cvtph_ps(_mm_setr_epi16(S_D(x, 0, k), S_D(x, 1, k), S_D(x, 2, k),   \
                                                   S_D(x, 3, k), S_D(x, 4, k), S_D(x, 5, k),   \
                                                   S_D(x, 6, k), S_D(x, 7, k)))
#define S_D(x, j, k) ((j) < (k) ? (short)(x)[j].d : (short)0)

/* Eight Q8_0 blocks' exact sums; of a partial pass the first kp, the others 0 (not read). */
static inline __attribute__((always_inline)) __m256i s_q8_isum8(const quant_block_q8_0 *x,
                                                               const int8_t *yq, int kp)
{
    __m256i q[8];
    #pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        q[k] = k < kp ? s_quads_signed(_mm256_loadu_si256((const __m256i *)x[k].qs),
                                       _mm256_loadu_si256((const __m256i *)(yq + 32 * k)))
                      : _mm256_setzero_si256();
    return s_fold8(q);
}

/* Four Q4_0 blocks' quad sums, two blocks a vector (their 16 nibble bytes side by side; the
 * activation's grouped copy qs4 has the same order, and bias8 the quads' -8 * sums):
 * unsigned nibbles times signed bytes (maddubs: 2 * 15 * 127 < 2^15, no saturation), pairs to
 * int32; low plus high quads gives four partial sums per block, blocks 0, 1 in c[0] (lanes
 * 0..3, 4..7), 2, 3 in c[1]. */
static inline __attribute__((always_inline)) void s_q4_group(const quant_block_q4_0 *x,
                                                            const int8_t *q, const int32_t *b8,
                                                            int kg, __m256i c[2])
{
    if (kg <= 0) { /* past a partial pass's blocks: nothing read */
        c[0] = c[1] = _mm256_setzero_si256();
        return;
    }
    const __m256i m = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi16(1);
    const __m256i v01 = quant_ld2x16(x[0].qs, x[1].qs, 0, kg);
    const __m256i v23 = quant_ld2x16(x[2].qs, x[3].qs, 2, kg);
    const __m256i nib[4] = { _mm256_and_si256(v01, m), _mm256_and_si256(v23, m),
                             _mm256_and_si256(_mm256_srli_epi16(v01, 4), m),
                             _mm256_and_si256(_mm256_srli_epi16(v23, 4), m) };
    /* a group of kg < 4 (a row's last) has its kg blocks' elements 0..15, then their 16..31
     * (quant.h's qs4); bias8 is whole for every group */
    const __m256i yv[4] = { quant_ld32(q, 0, kg), quant_ld32(q + 32, 2, kg),
                            quant_ld32(q + 16 * kg, 0, kg), quant_ld32(q + 16 * kg + 32, 2, kg) };
    __m256i h[4];
    #pragma GCC unroll 8
    for (int i = 0; i < 4; i++)
        h[i] = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(nib[i], yv[i]), one),
                                _mm256_loadu_si256((const __m256i *)(b8 + 8 * i)));
    c[0] = _mm256_add_epi32(h[0], h[2]);
    c[1] = _mm256_add_epi32(h[1], h[3]);
}

/* Eight Q4_0 blocks' exact sums, lane k = block k: two groups' partial sums folded by in-lane
 * horizontal adds (blocks 0, 2, 4, 6 in the low half, 1, 3, 5, 7 in the high), then one
 * permute to block order. */
static inline __attribute__((always_inline)) __m256i s_q4_isum8(const quant_block_q4_0 *x,
                                                               const int8_t *q, const int32_t *b8,
                                                               int kp)
{
    __m256i c[4];
    s_q4_group(x, q, b8, kp < 4 ? kp : 4, c);
    s_q4_group(x + 4, q + 128, b8 + 32, kp - 4, c + 2);
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(c[0], c[1]),
                                        _mm256_hadd_epi32(c[2], c[3]));
    return _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One pass of sixteen blocks from block b (kp of them: 16 but in a row's last pass) into
 * acc[0] (lanes b % 16 = 0..7) and acc[1] (8..15): each block's exact sum, one fma with its
 * scale product d_w * d_x (an f32 multiply, as the scalar code's). In a partial pass only the
 * kp blocks' lanes change, by the fma the scalar tail (quant_tail_q8_0 / _q4_0) gives them. */
static inline __attribute__((always_inline)) void s_pass(int q4, const void *w,
                                                        const quant_act_q8 *y, uint64_t b, int kp,
                                                        __m256 acc[2])
{
    const quant_block_q4_0 *x4 = (const quant_block_q4_0 *)w + b;
    const quant_block_q8_0 *x8 = (const quant_block_q8_0 *)w + b;
    #pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const uint64_t o = 8 * (uint64_t)h;
        const int k = kp - 8 * h > 8 ? 8 : kp - 8 * h;
        const __m256 dw = q4 ? S_DW8(x4 + o, k) : S_DW8(x8 + o, k);
        const __m256 d = _mm256_mul_ps(dw, quant_ldps_k(y->d + b + o, k));
        const __m256i si = q4 ? s_q4_isum8(x4 + o, y->qs4 + (b + o) * 32, y->bias8 + (b + o) * 8, k)
                              : s_q8_isum8(x8 + o, y->qs + (b + o) * QUANT_QK, k);
        const __m256 sf = _mm256_cvtepi32_ps(si);
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        acc[h] = kp >= QUANT_QB_BLANES ? _mm256_fmadd_ps(sf, d, acc[h])
                                       : quant_fma_keep(sf, d, acc[h], quant_lanes_below(k, lane));
    }
}

/* quant.h's order for Q8_0 and Q4_0: sixteen blocks a pass into two 8-lane accumulators (lane
 * b % 16), a row's leftover blocks as one partial pass (part_avx2.h), the 16-lane tree. */
static inline __attribute__((always_inline)) float s_dot16(int q4, uint64_t n, const void *w,
                                                          const void *act)
{
    const size_t bb = q4 ? sizeof(quant_block_q4_0) : sizeof(quant_block_q8_0);
    const quant_act_q8 y = quant_act_view(act, n);
    const uint64_t nb = n / QUANT_QK;
    __m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
    float a[QUANT_QB_BLANES];
    uint64_t b = 0;
    for (; b + QUANT_QB_BLANES <= nb; b += QUANT_QB_BLANES) {
        quant_prefetch((const char *)w + b * bb, (unsigned)(QUANT_QB_BLANES * bb));
        s_pass(q4, w, &y, b, QUANT_QB_BLANES, acc);
    }
    if (b < nb)
        s_pass(q4, w, &y, b, (int)(nb - b), acc);
    _mm256_storeu_ps(a, acc[0]);
    _mm256_storeu_ps(a + 8, acc[1]);
    return quant_reduce16_avx(a);
}

float quant_dot_q8_0_avx2(uint64_t n, const void *w, const void *act)
{
    return s_dot16(0, n, w, act);
}

float quant_dot_q4_0_avx2(uint64_t n, const void *w, const void *act)
{
    return s_dot16(1, n, w, act);
}

/* ---------------------------------------------------------------- activation quantization */

/* roundf (halves away from zero) exactly, 8 lanes: t = trunc(v); v - t is exact (the
 * fraction of a float is a float), so comparing |v - t| >= 0.5 and stepping t one away from
 * zero is precisely roundf. (A cvtps with the default rounding would send halves to even:
 * ggml's own AVX2 quantize_row_q8_0 does that and so differs from the reference on ties.) */
static inline __m256 s_roundf8(__m256 v)
{
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
    const __m256 frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
    const __m256 up = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ),
                                    _mm256_or_ps(sign, _mm256_set1_ps(1.0f)));
    return _mm256_add_ps(t, up);
}

int quant_act_q8_avx2(const float *x, uint64_t n, void *act)
{
    const quant_act_q8 v = quant_act_view(act, n);
    const uint64_t nb = n / QUANT_QK;
    int8_t *qs = (int8_t *)v.qs, *qs4 = (int8_t *)v.qs4;
    float *dd = (float *)v.d;
    int32_t *b8 = (int32_t *)v.bias8, *b128 = (int32_t *)v.bias128;
    memset(b8, 0, (nb + 3) / 4 * 128); /* lanes of a short last group's absent blocks */
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (uint64_t b = 0; b < nb; b++) {
        const float *px = x + b * QUANT_QK;
        __m256 v0 = _mm256_loadu_ps(px), v1 = _mm256_loadu_ps(px + 8);
        __m256 v2 = _mm256_loadu_ps(px + 16), v3 = _mm256_loadu_ps(px + 24);
        /* Non-finite values go back to the scalar path, which names them (checked per
         * element: maxps drops a NaN operand). amax: max is exact and order-free once every
         * value is finite. */
        const __m256 a0 = _mm256_and_ps(v0, absmask), a1 = _mm256_and_ps(v1, absmask);
        const __m256 a2 = _mm256_and_ps(v2, absmask), a3 = _mm256_and_ps(v3, absmask);
        const __m256 inf = _mm256_set1_ps(__builtin_inff());
        const __m256 bad = _mm256_or_ps(
            _mm256_or_ps(_mm256_cmp_ps(a0, inf, _CMP_NLT_UQ), _mm256_cmp_ps(a1, inf, _CMP_NLT_UQ)),
            _mm256_or_ps(_mm256_cmp_ps(a2, inf, _CMP_NLT_UQ), _mm256_cmp_ps(a3, inf, _CMP_NLT_UQ)));
        if (_mm256_movemask_ps(bad))
            return -1;
        __m256 m = _mm256_max_ps(_mm256_max_ps(a0, a1), _mm256_max_ps(a2, a3));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        /* quantize_row_q8_0_ref's arithmetic, in its order. */
        const float amax = _mm_cvtss_f32(m4);
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        dd[b] = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m256 mul = _mm256_set1_ps(id);
        __m256i i0 = _mm256_cvttps_epi32(s_roundf8(_mm256_mul_ps(v0, mul)));
        __m256i i1 = _mm256_cvttps_epi32(s_roundf8(_mm256_mul_ps(v1, mul)));
        __m256i i2 = _mm256_cvttps_epi32(s_roundf8(_mm256_mul_ps(v2, mul)));
        __m256i i3 = _mm256_cvttps_epi32(s_roundf8(_mm256_mul_ps(v3, mul)));
        /* |q| <= 127: the saturating packs do not saturate; they interleave 128-bit lanes,
         * which the final permute undoes (element order 0..31). */
        __m256i q = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        q = _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(qs + b * QUANT_QK), q);
        /* The grouped copy for Q4_0: elements 0..15 and 16..31 to their halves of the group. */
        const uint64_t g = b / 4, p = b % 4, k = nb - 4 * g < 4 ? nb - 4 * g : 4;
        _mm_storeu_si128((__m128i *)(qs4 + g * 128 + p * 16), _mm256_castsi256_si128(q));
        _mm_storeu_si128((__m128i *)(qs4 + g * 128 + k * 16 + p * 16),
                         _mm256_extracti128_si256(q, 1));
        /* Quad sums: 1 * q (maddubs: unsigned 1 times signed q), pairs to int32. */
        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q),
                                            _mm256_set1_epi16(1));
        _mm256_storeu_si256((__m256i *)(b128 + b * 8),
                            _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s, 7)));
        const __m256i s8 = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s, 3));
        _mm_storeu_si128((__m128i *)(b8 + g * 32 + 4 * p), _mm256_castsi256_si128(s8));
        _mm_storeu_si128((__m128i *)(b8 + g * 32 + 16 + 4 * p), _mm256_extracti128_si256(s8, 1));
    }
    return 0;
}

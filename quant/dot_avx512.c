/* dot_avx512.c — AVX-512 (F+BW+VL+VNNI) dot products, lane for lane the order of quant.h. quant/
 *
 * Two 16-lane accumulators are the 32 lanes (z0 = lanes 0..15, z1 = 16..31). For the
 * quantized types a group of 4 blocks fills them: blocks b, b+1 in z0 and b+2, b+3 in z1,
 * each block's 8 quads in 8 lanes, which is exactly what vpdpbusd produces (one int32 per 4
 * adjacent bytes, exact: no int16 step, so nothing to saturate). The activation form keeps
 * its quants contiguous (quant.h), so two blocks' activations are one 64-byte load. A row's
 * leftover blocks go one at a time into their 8 lanes with the 256-bit forms (AVX512VL).
 */
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#include <immintrin.h>

#include "quant/quant_int.h"
#include "quant/reduce_avx.h"

static inline void s_store2(float *a, __m512 z0, __m512 z1)
{
    _mm512_storeu_ps(a, z0);
    _mm512_storeu_ps(a + 16, z1);
}

float quant_dot_f32_avx512(uint64_t n, const void *wv, const void *act)
{
    const float *w = wv, *x = act;
    __m512 z0 = _mm512_setzero_ps(), z1 = z0;
    float a[QUANT_LANES];
    uint64_t i = 0;
    for (; i + QUANT_LANES <= n; i += QUANT_LANES) {
        quant_prefetch(w + i, QUANT_LANES * 4);
        z0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), z0);
        z1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), z1);
    }
    s_store2(a, z0, z1);
    quant_tail_f32(w, x, i, n, a);
    return quant_reduce32_avx(a);
}

static inline __m512 s_f16x16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

float quant_dot_f16_avx512(uint64_t n, const void *wv, const void *act)
{
    const uint16_t *w = wv;
    const float *x = act;
    __m512 z0 = _mm512_setzero_ps(), z1 = z0;
    float a[QUANT_LANES];
    uint64_t i = 0;
    for (; i + QUANT_LANES <= n; i += QUANT_LANES) {
        quant_prefetch(w + i, QUANT_LANES * 2);
        z0 = _mm512_fmadd_ps(s_f16x16(w + i), _mm512_loadu_ps(x + i), z0);
        z1 = _mm512_fmadd_ps(s_f16x16(w + i + 16), _mm512_loadu_ps(x + i + 16), z1);
    }
    s_store2(a, z0, z1);
    quant_tail_f16(w, x, i, n, a);
    return quant_reduce32_avx(a);
}

static inline __m512 s_bf16x16(const uint16_t *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

float quant_dot_bf16_avx512(uint64_t n, const void *wv, const void *act)
{
    const uint16_t *w = wv;
    const float *x = act;
    __m512 z0 = _mm512_setzero_ps(), z1 = z0;
    float a[QUANT_LANES];
    uint64_t i = 0;
    for (; i + QUANT_LANES <= n; i += QUANT_LANES) {
        quant_prefetch(w + i, QUANT_LANES * 2);
        z0 = _mm512_fmadd_ps(s_bf16x16(w + i), _mm512_loadu_ps(x + i), z0);
        z1 = _mm512_fmadd_ps(s_bf16x16(w + i + 16), _mm512_loadu_ps(x + i + 16), z1);
    }
    s_store2(a, z0, z1);
    quant_tail_bf16(w, x, i, n, a);
    return quant_reduce32_avx(a);
}

/* The scale products d_w * d_x of blocks b..b+3 (4 f32 multiplies, as the scalar code does
 * one at a time), laid out for z0 (blocks b, b+1: 8 lanes each) and z1 (b+2, b+3). */
static inline void s_scales4(__m128i h, const float *dx, __m512 *d01, __m512 *d23)
{
    const __m512 d = _mm512_castps128_ps512(_mm_mul_ps(_mm_cvtph_ps(h), _mm_loadu_ps(dx)));
    const __m512i i01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    *d01 = _mm512_permutexvar_ps(i01, d);
    *d23 = _mm512_permutexvar_ps(_mm512_add_epi32(i01, _mm512_set1_epi32(2)), d);
}

/* Four blocks' f16 scales in one vector, by four scalar loads (Q8_0, and Q4_0's tiles): for
 * Q8_0 (136-byte groups, so two loads and a vpermt2w) the permute was slower streaming from
 * DRAM (0.69-0.74 of the read bound against 0.83-0.86, 2026-12-01, before the prefetch). */
static inline __m128i s_dw4_q4(const quant_block_q4_0 *x)
{
    return _mm_setr_epi16((short)x[0].d, (short)x[1].d, (short)x[2].d, (short)x[3].d, 0, 0, 0, 0);
}

/* Q4_0's four scales from one 64-byte load of the group (72 bytes: the load stays inside it)
 * and one word permute (words 0, 9, 18, 27), where the scalar loads cost ~8 shuffle-port uops
 * (vpinsrw, vmovd, vpunpck): with the broadcast loads below, a Q4_0 row in cache is 8-13%
 * faster (1 thread, 512 x 2048, alternating runs in one process, 2026-12-01: 16.9-18.3 GB/s
 * against 15.6-16.2); streaming from DRAM, with the prefetch, both are at the read bound. */
static inline __m128i s_dw4_q4_perm(const quant_block_q4_0 *x)
{
    const __m512i ix = _mm512_setr_epi32(9 << 16 | 0, 27 << 16 | 18, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0);
    return _mm512_castsi512_si128(_mm512_permutexvar_epi16(ix, _mm512_loadu_si512(x)));
}

static inline __m128i s_dw4_q8(const quant_block_q8_0 *x)
{
    return _mm_setr_epi16((short)x[0].d, (short)x[1].d, (short)x[2].d, (short)x[3].d, 0, 0, 0, 0);
}

static inline __m512i s_join(const void *lo, const void *hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                              _mm256_loadu_si256((const __m256i *)hi), 1);
}

/* Two Q8_0 blocks' quads: vpdpbusd wants unsigned bytes, so the weights go in as x + 128
 * (x ^ 0x80) and the accumulator starts at -128 * the activation's quad sums: exactly
 * sum x * y, with no intermediate step that could saturate. */
static inline __m512 s_q8_quads2(const quant_block_q8_0 *x, const int8_t *yq, const int32_t *b128)
{
    const __m512i xu = _mm512_xor_si512(s_join(x[0].qs, x[1].qs), _mm512_set1_epi8((char)0x80));
    return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_loadu_si512(b128), xu,
                                                  _mm512_loadu_si512(yq)));
}

/* Four Q4_0 blocks' quads (quant.h's lanes for Q4_0): their 16 nibble bytes side by side
 * (a broadcast load is a load, with no shuffle uop, and a masked merge runs on either vector
 * port, where vinserti32x4 needs the one shuffle port);
 * masked, the low nibbles are the four blocks' elements 0..15 (lanes 0..15 after vpdpbusd),
 * shifted and masked the high ones 16..31 (lanes 16..31) — the order of the activation's
 * grouped copy qs4, one 64-byte load each. Accumulators start at -8 * the quad sums. */
static inline void s_q4_quads4(const quant_block_q4_0 *x, const int8_t *q, const int32_t *b8,
                               __m512 *lo, __m512 *hi)
{
    __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)x[0].qs));
    v = _mm512_mask_broadcast_i32x4(v, 0x00F0, _mm_loadu_si128((const __m128i *)x[1].qs));
    v = _mm512_mask_broadcast_i32x4(v, 0x0F00, _mm_loadu_si128((const __m128i *)x[2].qs));
    v = _mm512_mask_broadcast_i32x4(v, 0xF000, _mm_loadu_si128((const __m128i *)x[3].qs));
    const __m512i m = _mm512_set1_epi8(0x0F);
    *lo = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_loadu_si512(b8), _mm512_and_si512(v, m),
                                                 _mm512_loadu_si512(q)));
    *hi = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_loadu_si512(b8 + 16),
                                                 _mm512_and_si512(_mm512_srli_epi16(v, 4), m),
                                                 _mm512_loadu_si512(q + 64)));
}

/* One block of a short last group (k < 4 blocks), 128 bits at a time. */
static inline void s_q4_tail(float *a, const quant_block_q4_0 *x, uint64_t b, uint64_t k,
                             const quant_act_q8 *y)
{
    const uint64_t g = b / 4, p = b % 4;
    const __m128i t = _mm_loadu_si128((const __m128i *)x->qs), m = _mm_set1_epi8(0x0F);
    const __m128 d = _mm_set1_ps(_cvtsh_ss(x->d) * y->d[b]);
    const int8_t *q = y->qs4 + g * 128;
    const int32_t *b8 = y->bias8 + g * 32;
    const __m128i ylo = _mm_loadu_si128((const __m128i *)(q + p * 16));
    __m128i s = _mm_dpbusd_epi32(_mm_loadu_si128((const __m128i *)(b8 + 4 * p)),
                                 _mm_and_si128(t, m), ylo);
    _mm_storeu_ps(a + 4 * p, _mm_fmadd_ps(_mm_cvtepi32_ps(s), d, _mm_loadu_ps(a + 4 * p)));
    s = _mm_dpbusd_epi32(_mm_loadu_si128((const __m128i *)(b8 + 16 + 4 * p)),
                         _mm_and_si128(_mm_srli_epi16(t, 4), m),
                         _mm_loadu_si128((const __m128i *)(q + k * 16 + p * 16)));
    _mm_storeu_ps(a + 16 + 4 * p,
                  _mm_fmadd_ps(_mm_cvtepi32_ps(s), d, _mm_loadu_ps(a + 16 + 4 * p)));
}

/* One leftover block's quads (256-bit forms), into its 8 lanes of a[]. */
static inline void s_tail(float *a, uint64_t b, __m256i xu, const quant_act_q8 *y,
                          const int32_t *bias, uint16_t dw)
{
    float *lane = a + (b % QUANT_QB_GROUP) * QUANT_QB_LANES;
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(dw) * y->d[b]);
    const __m256i s = _mm256_dpbusd_epi32(_mm256_loadu_si256((const __m256i *)(bias + b * 8)), xu,
                                          _mm256_loadu_si256((const __m256i *)(y->qs + b * 32)));
    _mm256_storeu_ps(lane, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, _mm256_loadu_ps(lane)));
}

float quant_dot_q8_0_avx512(uint64_t n, const void *wv, const void *act)
{
    const quant_block_q8_0 *x = wv;
    const quant_act_q8 y = quant_act_view(act, n);
    const uint64_t nb = n / QUANT_QK;
    __m512 z0 = _mm512_setzero_ps(), z1 = z0, d01, d23;
    float a[QUANT_LANES];
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP) {
        quant_prefetch(x + b, QUANT_QB_GROUP * sizeof *x);
        s_scales4(s_dw4_q8(x + b), y.d + b, &d01, &d23);
        z0 = _mm512_fmadd_ps(s_q8_quads2(x + b, y.qs + b * 32, y.bias128 + b * 8), d01, z0);
        z1 = _mm512_fmadd_ps(s_q8_quads2(x + b + 2, y.qs + b * 32 + 64, y.bias128 + b * 8 + 16),
                             d23, z1);
    }
    s_store2(a, z0, z1);
    for (; b < nb; b++) {
        const __m256i xu = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x[b].qs),
                                            _mm256_set1_epi8((char)0x80));
        s_tail(a, b, xu, &y, y.bias128, x[b].d);
    }
    return quant_reduce32_avx(a);
}

float quant_dot_q4_0_avx512(uint64_t n, const void *wv, const void *act)
{
    const quant_block_q4_0 *x = wv;
    const quant_act_q8 y = quant_act_view(act, n);
    const uint64_t nb = n / QUANT_QK;
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512 z0 = _mm512_setzero_ps(), z1 = z0, lo, hi;
    float a[QUANT_LANES];
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP) {
        quant_prefetch(x + b, QUANT_QB_GROUP * sizeof *x);
        const __m128i h = s_dw4_q4_perm(x + b);
        const __m512 d4 = _mm512_castps128_ps512(_mm_mul_ps(_mm_cvtph_ps(h),
                                                            _mm_loadu_ps(y.d + b)));
        const __m512 d = _mm512_permutexvar_ps(idx, d4);
        s_q4_quads4(x + b, y.qs4 + b * 32, y.bias8 + b * 8, &lo, &hi);
        z0 = _mm512_fmadd_ps(lo, d, z0);
        z1 = _mm512_fmadd_ps(hi, d, z1);
    }
    s_store2(a, z0, z1);
    for (; b < nb; b++)
        s_q4_tail(a, x + b, b, nb % QUANT_QB_GROUP, &y);
    return quant_reduce32_avx(a);
}

/* ---------------------------------------------------------------- tiles: 2 rows x 4 positions */

/* For batched products (quant_matmat): two weight rows against four activations at once, so
 * each weight vector (converted or unpacked once) serves four positions and each activation
 * vector two rows. Every (row, position) pair keeps its own 32 lanes and receives exactly the
 * operations the one-row kernels above give it, in the same order: the bits are theirs. */

enum { S_F32, S_F16, S_BF16 };

static inline __attribute__((always_inline)) __m512 s_wload(int kind, const void *w, uint64_t i)
{
    if (kind == S_F32)
        return _mm512_loadu_ps((const float *)w + i);
    return kind == S_F16 ? s_f16x16((const uint16_t *)w + i) : s_bf16x16((const uint16_t *)w + i);
}

static inline __attribute__((always_inline)) void
s_tile_float(int kind, uint64_t n, const void *const *w, const void *const *act, float *out)
{
    const float *x[QUANT_TILE_POS];
    __m512 c[QUANT_TILE_ROWS][QUANT_TILE_POS][2];
    for (int p = 0; p < QUANT_TILE_POS; p++) {
        x[p] = act[p];
        for (int r = 0; r < QUANT_TILE_ROWS; r++)
            c[r][p][0] = c[r][p][1] = _mm512_setzero_ps();
    }
    uint64_t i = 0;
    for (; i + QUANT_LANES <= n; i += QUANT_LANES) {
        const __m512 a0 = s_wload(kind, w[0], i), a1 = s_wload(kind, w[0], i + 16);
        const __m512 b0 = s_wload(kind, w[1], i), b1 = s_wload(kind, w[1], i + 16);
#pragma GCC unroll 4
        for (int p = 0; p < QUANT_TILE_POS; p++) {
            const __m512 u0 = _mm512_loadu_ps(x[p] + i), u1 = _mm512_loadu_ps(x[p] + i + 16);
            c[0][p][0] = _mm512_fmadd_ps(a0, u0, c[0][p][0]);
            c[0][p][1] = _mm512_fmadd_ps(a1, u1, c[0][p][1]);
            c[1][p][0] = _mm512_fmadd_ps(b0, u0, c[1][p][0]);
            c[1][p][1] = _mm512_fmadd_ps(b1, u1, c[1][p][1]);
        }
    }
    for (int r = 0; r < QUANT_TILE_ROWS; r++) {
        for (int p = 0; p < QUANT_TILE_POS; p++) {
            float a[QUANT_LANES];
            s_store2(a, c[r][p][0], c[r][p][1]);
            if (kind == S_F32)
                quant_tail_f32(w[r], x[p], i, n, a);
            else if (kind == S_F16)
                quant_tail_f16(w[r], x[p], i, n, a);
            else
                quant_tail_bf16(w[r], x[p], i, n, a);
            out[r * QUANT_TILE_POS + p] = quant_reduce32_avx(a);
        }
    }
}

void quant_tile_f32_avx512(uint64_t n, const void *const *w, const void *const *act, float *out)
{
    s_tile_float(S_F32, n, w, act, out);
}

void quant_tile_f16_avx512(uint64_t n, const void *const *w, const void *const *act, float *out)
{
    s_tile_float(S_F16, n, w, act, out);
}

void quant_tile_bf16_avx512(uint64_t n, const void *const *w, const void *const *act, float *out)
{
    s_tile_float(S_BF16, n, w, act, out);
}

void quant_tile_q8_0_avx512(uint64_t n, const void *const *w, const void *const *act, float *out)
{
    const quant_block_q8_0 *xr[QUANT_TILE_ROWS] = { w[0], w[1] };
    quant_act_q8 y[QUANT_TILE_POS];
    __m512 c[QUANT_TILE_ROWS][QUANT_TILE_POS][2];
    const uint64_t nb = n / QUANT_QK;
    const __m512i i01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i i23 = _mm512_add_epi32(i01, _mm512_set1_epi32(2));
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    for (int p = 0; p < QUANT_TILE_POS; p++) {
        y[p] = quant_act_view(act[p], n);
        for (int r = 0; r < QUANT_TILE_ROWS; r++)
            c[r][p][0] = c[r][p][1] = _mm512_setzero_ps();
    }
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP) {
#pragma GCC unroll 2
        for (int r = 0; r < QUANT_TILE_ROWS; r++) {
            const quant_block_q8_0 *x = xr[r] + b;
            const __m128 dw = _mm_cvtph_ps(s_dw4_q8(x));
            const __m512i u01 = _mm512_xor_si512(s_join(x[0].qs, x[1].qs), bias);
            const __m512i u23 = _mm512_xor_si512(s_join(x[2].qs, x[3].qs), bias);
#pragma GCC unroll 4
            for (int p = 0; p < QUANT_TILE_POS; p++) {
                const __m512 d = _mm512_castps128_ps512(_mm_mul_ps(dw, _mm_loadu_ps(y[p].d + b)));
                const int8_t *q = y[p].qs + b * 32;
                const int32_t *b128 = y[p].bias128 + b * 8;
                const __m512 s01 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(
                    _mm512_loadu_si512(b128), u01, _mm512_loadu_si512(q)));
                const __m512 s23 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(
                    _mm512_loadu_si512(b128 + 16), u23, _mm512_loadu_si512(q + 64)));
                c[r][p][0] = _mm512_fmadd_ps(s01, _mm512_permutexvar_ps(i01, d), c[r][p][0]);
                c[r][p][1] = _mm512_fmadd_ps(s23, _mm512_permutexvar_ps(i23, d), c[r][p][1]);
            }
        }
    }
    for (int r = 0; r < QUANT_TILE_ROWS; r++) {
        for (int p = 0; p < QUANT_TILE_POS; p++) {
            float a[QUANT_LANES];
            s_store2(a, c[r][p][0], c[r][p][1]);
            for (uint64_t t = b; t < nb; t++) {
                const __m256i xu = _mm256_xor_si256(
                    _mm256_loadu_si256((const __m256i *)xr[r][t].qs), _mm256_set1_epi8((char)0x80));
                s_tail(a, t, xu, &y[p], y[p].bias128, xr[r][t].d);
            }
            out[r * QUANT_TILE_POS + p] = quant_reduce32_avx(a);
        }
    }
}

void quant_tile_q4_0_avx512(uint64_t n, const void *const *w, const void *const *act, float *out)
{
    const quant_block_q4_0 *xr[QUANT_TILE_ROWS] = { w[0], w[1] };
    quant_act_q8 y[QUANT_TILE_POS];
    __m512 c[QUANT_TILE_ROWS][QUANT_TILE_POS][2];
    const uint64_t nb = n / QUANT_QK;
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i m = _mm512_set1_epi8(0x0F);
    for (int p = 0; p < QUANT_TILE_POS; p++) {
        y[p] = quant_act_view(act[p], n);
        for (int r = 0; r < QUANT_TILE_ROWS; r++)
            c[r][p][0] = c[r][p][1] = _mm512_setzero_ps();
    }
    uint64_t b = 0;
    for (; b + QUANT_QB_GROUP <= nb; b += QUANT_QB_GROUP) {
#pragma GCC unroll 2
        for (int r = 0; r < QUANT_TILE_ROWS; r++) {
            const quant_block_q4_0 *x = xr[r] + b;
            const __m128 dw = _mm_cvtph_ps(s_dw4_q4(x));
            __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)x[0].qs));
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)x[1].qs), 1);
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)x[2].qs), 2);
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)x[3].qs), 3);
            const __m512i lo = _mm512_and_si512(v, m);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
#pragma GCC unroll 4
            for (int p = 0; p < QUANT_TILE_POS; p++) {
                const __m512 d = _mm512_permutexvar_ps(
                    idx, _mm512_castps128_ps512(_mm_mul_ps(dw, _mm_loadu_ps(y[p].d + b))));
                const int8_t *q = y[p].qs4 + b * 32;
                const int32_t *b8 = y[p].bias8 + b * 8;
                const __m512 sl = _mm512_cvtepi32_ps(
                    _mm512_dpbusd_epi32(_mm512_loadu_si512(b8), lo, _mm512_loadu_si512(q)));
                const __m512 sh = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(
                    _mm512_loadu_si512(b8 + 16), hi, _mm512_loadu_si512(q + 64)));
                c[r][p][0] = _mm512_fmadd_ps(sl, d, c[r][p][0]);
                c[r][p][1] = _mm512_fmadd_ps(sh, d, c[r][p][1]);
            }
        }
    }
    for (int r = 0; r < QUANT_TILE_ROWS; r++) {
        for (int p = 0; p < QUANT_TILE_POS; p++) {
            float a[QUANT_LANES];
            s_store2(a, c[r][p][0], c[r][p][1]);
            for (uint64_t t = b; t < nb; t++)
                s_q4_tail(a, xr[r] + t, t, nb % QUANT_QB_GROUP, &y[p]);
            out[r * QUANT_TILE_POS + p] = quant_reduce32_avx(a);
        }
    }
}

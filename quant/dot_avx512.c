/* dot_avx512.c — AVX-512 (F+BW+VL+VNNI) dot products, lane for lane the order of quant.h. quant/
 *
 * Two 16-lane accumulators are the 32 lanes (z0 = lanes 0..15, z1 = 16..31). For the
 * quantized types a group of 4 blocks fills them: blocks b, b+1 in z0 and b+2, b+3 in z1,
 * each block's 8 quads in 8 lanes, which is exactly what vpdpbusd produces (one int32 per 4
 * adjacent bytes, exact: no int16 step, so nothing to saturate). The activation form keeps
 * its quants contiguous (quant.h), so two blocks' activations are one 64-byte load. A row's
 * leftover blocks run through the same code as one partial pass, masked (part_avx512.h).
 */
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#include <immintrin.h>

#include "quant/part_avx512.h"
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

static inline __m512i s_join(const void *lo, const void *hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                              _mm256_loadu_si256((const __m256i *)hi), 1);
}

/* Pairs of adjacent int32 lanes of a then of b, summed: lane m < 8 is a[2m] + a[2m+1], lane
 * m >= 8 is b[2m-16] + b[2m-15]. Integer sums are exact, so how the 8 (or 4) partial sums of a
 * block are folded is free: three rounds of this turn 8 vectors of quad sums (two blocks each)
 * into one vector of 16 block sums, block order kept. */
static inline __m512i s_pairsum(__m512i a, __m512i b)
{
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                         30);
    const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, ie, b),
                            _mm512_permutex2var_epi32(a, io, b));
}

/* Two Q8_0 blocks' quads: vpdpbusd wants unsigned bytes, so the weights go in as x + 128
 * (x ^ 0x80) and the accumulator starts at -128 * the activation's quad sums: exactly
 * sum x * y, with no intermediate step that could saturate. kp: of the two, those present
 * (2 but in a row's last pass); an absent one's quads are 0 and it is not read. */
static inline __attribute__((always_inline)) __m512i s_q8_quads2(const quant_block_q8_0 *x,
                                                                const int8_t *yq,
                                                                const int32_t *b128, int kp)
{
    if (kp <= 0) /* past a partial pass's blocks: nothing read */
        return _mm512_setzero_si512();
    const __m256i x0 = _mm256_loadu_si256((const __m256i *)x[0].qs);
    const __m512i xw = kp >= 2 ? s_join(x[0].qs, x[1].qs) : _mm512_zextsi256_si512(x0);
    const __m512i xu = _mm512_xor_si512(xw, _mm512_set1_epi8((char)0x80));
    const __m512i b = kp >= 2 ? _mm512_loadu_si512(b128) : _mm512_maskz_loadu_epi32(0x00FF, b128);
    return _mm512_dpbusd_epi32(b, xu, quant_ld64_k(yq, 32 * kp));
}

/* The 16 f16 scales of blocks x[0..15] in block order. Q8_0's blocks are 34 bytes: four
 * blocks' scales (words 0, 17, 34, 51 of 136 bytes) by one word permute of two loads. kk:
 * the blocks present (16 but in a row's last pass); the loads stop at the last one's end. */
static inline __attribute__((always_inline)) __m512 s_dw16_q8(const quant_block_q8_0 *x, int kk)
{
    const __m512i ix = _mm512_setr_epi32(17 << 16 | 0, 51 << 16 | 34, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 0);
    const int r = (int)sizeof *x * kk; /* the bytes of the pass present */
    __m128i h[4];
    #pragma GCC unroll 8
    for (int i = 0; i < 4; i++) {
        const char *p = (const char *)(x + 4 * i);
        const int o = 4 * i * (int)sizeof *x;
        h[i] = _mm512_castsi512_si128(_mm512_permutex2var_epi16(
            quant_ld64_k(p, r - o), ix, quant_ld64_k(p + 64, r - o - 64)));
    }
    const __m256i hw = _mm256_setr_m128i(_mm_unpacklo_epi64(h[0], h[1]),
                                         _mm_unpacklo_epi64(h[2], h[3]));
    return _mm512_cvtph_ps(hw);
}

/* Q4_0's blocks are 18 bytes: eight blocks' scales are words 0, 9, ..., 63 of 144 bytes
 * (kk as s_dw16_q8). */
static inline __attribute__((always_inline)) __m512 s_dw16_q4(const quant_block_q4_0 *x, int kk)
{
    const __m512i ix = _mm512_setr_epi32(9 << 16 | 0, 27 << 16 | 18, 45 << 16 | 36, 63 << 16 | 54,
                                         0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const char *p = (const char *)x;
    const int r = (int)sizeof *x * kk;
    const __m512i a = _mm512_permutex2var_epi16(quant_ld64_k(p, r), ix,
                                                quant_ld64_k(p + 64, r - 64));
    const __m512i b = _mm512_permutex2var_epi16(quant_ld64_k(p + 144, r - 144), ix,
                                                quant_ld64_k(p + 208, r - 208));
    return _mm512_cvtph_ps(_mm256_setr_m128i(_mm512_castsi512_si128(a),
                                             _mm512_castsi512_si128(b)));
}

/* Sixteen Q8_0 blocks' exact sums, lane l = block l (0 past kk, the blocks present). */
static inline __attribute__((always_inline)) __m512i s_q8_isum16(const quant_block_q8_0 *x,
                                                                const int8_t *yq,
                                                                const int32_t *b128, int kk)
{
    __m512i c[4];
    #pragma GCC unroll 8
    for (int i = 0; i < 4; i++)
        c[i] = s_pairsum(s_q8_quads2(x + 4 * i, yq + 128 * i, b128 + 32 * i, kk - 4 * i),
                         s_q8_quads2(x + 4 * i + 2, yq + 128 * i + 64, b128 + 32 * i + 16,
                                     kk - 4 * i - 2));
    return s_pairsum(s_pairsum(c[0], c[1]), s_pairsum(c[2], c[3]));
}

/* Sixteen Q4_0 blocks' exact sums, lane l = block l: per group of four, their 16 nibble bytes
 * side by side (a broadcast load is a load, with no shuffle uop, and a masked merge runs on
 * either vector port); masked, the low nibbles are the blocks' elements 0..15, shifted and
 * masked the high ones 16..31 — the order of the activation's grouped copy qs4, one 64-byte
 * load each, the accumulators starting at -8 * the quad sums (bias8). Low plus high is four
 * partial sums per block, lanes 4k..4k+3 for block k of the group. Of a row's last pass
 * only the kk blocks present are read: a last group of kg < 4 has its blocks' elements 0..15,
 * then their 16..31 (quant.h's qs4), and bias8 is whole for every group. */
static inline __attribute__((always_inline)) __m512i s_q4_isum16(const quant_block_q4_0 *x,
                                                                const int8_t *q,
                                                                const int32_t *b8, int kk)
{
    const __m512i m = _mm512_set1_epi8(0x0F);
    __m512i c[4];
    #pragma GCC unroll 8
    for (int i = 0; i < 4; i++) {
        const int kg = kk - 4 * i > 4 ? 4 : kk - 4 * i;
        if (kg <= 0) { /* past a partial pass's blocks: nothing read */
            c[i] = _mm512_setzero_si512();
            continue;
        }
        const quant_block_q4_0 *g = x + 4 * i;
        __m512i v = _mm512_broadcast_i32x4(quant_ld16_k(g[0].qs, 0, kg));
        v = _mm512_mask_broadcast_i32x4(v, 0x00F0, quant_ld16_k(g[1].qs, 1, kg));
        v = _mm512_mask_broadcast_i32x4(v, 0x0F00, quant_ld16_k(g[2].qs, 2, kg));
        v = _mm512_mask_broadcast_i32x4(v, 0xF000, quant_ld16_k(g[3].qs, 3, kg));
        const int8_t *gq = q + 128 * i;
        const __m512i lo = _mm512_dpbusd_epi32(_mm512_loadu_si512(b8 + 32 * i),
                                               _mm512_and_si512(v, m), quant_ld64_k(gq, 16 * kg));
        const __m512i hi = _mm512_dpbusd_epi32(_mm512_loadu_si512(b8 + 32 * i + 16),
                                               _mm512_and_si512(_mm512_srli_epi16(v, 4), m),
                                               quant_ld64_k(gq + 16 * kg, 16 * kg));
        c[i] = _mm512_add_epi32(lo, hi);
    }
    return s_pairsum(s_pairsum(c[0], c[1]), s_pairsum(c[2], c[3]));
}

/* One pass of sixteen blocks from block b (kk of them: 16 but in a row's last pass) into z,
 * quant.h's order for Q8_0 and Q4_0: block b's exact sum in lane b % 16, one fma per lane
 * with the 16 scale products (16 f32 multiplies, as the scalar code does one at a time). In
 * a partial pass only the kk blocks' lanes change, each by the fma the scalar tail
 * (quant_tail_q8_0 / _q4_0) gives it, and nothing past the row or the activation is read:
 * the scalar tail cost as much per block as ~60 vector ones, and a 2880-wide row (gpt-oss's,
 * 90 blocks) left 10 of them to it. */
static inline __attribute__((always_inline)) __m512 s_pass(int q4, const void *w,
                                                          const quant_act_q8 *y, uint64_t b,
                                                          int kk, __m512 z)
{
    const quant_block_q4_0 *x4 = (const quant_block_q4_0 *)w + b;
    const quant_block_q8_0 *x8 = (const quant_block_q8_0 *)w + b;
    const __mmask16 lm = kk >= QUANT_QB_BLANES ? 0xFFFF : (__mmask16)((1u << kk) - 1);
    const __m512 dx = kk >= QUANT_QB_BLANES ? _mm512_loadu_ps(y->d + b)
                                            : _mm512_maskz_loadu_ps(lm, y->d + b);
    const __m512 d = _mm512_mul_ps(q4 ? s_dw16_q4(x4, kk) : s_dw16_q8(x8, kk), dx);
    const __m512i s = q4 ? s_q4_isum16(x4, y->qs4 + b * 32, y->bias8 + b * 8, kk)
                         : s_q8_isum16(x8, y->qs + b * 32, y->bias128 + b * 8, kk);
    return kk >= QUANT_QB_BLANES ? _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, z)
                                 : _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(s), d, z, lm);
}

/* Sixteen blocks a pass, a row's leftover ones as one partial pass, the 16-lane tree. */
static inline __attribute__((always_inline)) float s_dot16(int q4, uint64_t n, const void *w,
                                                          const void *act)
{
    const size_t bb = q4 ? sizeof(quant_block_q4_0) : sizeof(quant_block_q8_0);
    const quant_act_q8 y = quant_act_view(act, n);
    const uint64_t nb = n / QUANT_QK;
    __m512 z = _mm512_setzero_ps();
    float a[QUANT_QB_BLANES];
    uint64_t b = 0;
    for (; b + QUANT_QB_BLANES <= nb; b += QUANT_QB_BLANES) {
        quant_prefetch((const char *)w + b * bb, (unsigned)(QUANT_QB_BLANES * bb));
        z = s_pass(q4, w, &y, b, QUANT_QB_BLANES, z);
    }
    if (b < nb)
        z = s_pass(q4, w, &y, b, (int)(nb - b), z);
    _mm512_storeu_ps(a, z);
    return quant_reduce16_avx(a);
}

float quant_dot_q8_0_avx512(uint64_t n, const void *w, const void *act)
{
    return s_dot16(0, n, w, act);
}

/* quant_dot_q8_0_avx512 for P positions of one row: the row read once, front to back (the
 * one-position kernel's stream and prefetch), its quads biased and its scales widened once,
 * then each position's sums, scale product and fma exactly as that kernel does them, so out[p]
 * has the bits of the one-position dot. For decode passes of a few sessions, bound by reading
 * the weights (gemm_avx512.c). */
static inline __attribute__((always_inline)) void
s_q8_dotn(uint64_t n, const quant_block_q8_0 *x, const void *const *act, float *out, const int P)
{
    const uint64_t nb = n / QUANT_QK;
    quant_act_q8 y[QUANT_Q8_DOTN];
    __m512 z[QUANT_Q8_DOTN];
    #pragma GCC unroll 8
    for (int p = 0; p < P; p++) {
        y[p] = quant_act_view(act[p], n);
        z[p] = _mm512_setzero_ps();
    }
    uint64_t b = 0;
    for (; b + QUANT_QB_BLANES <= nb; b += QUANT_QB_BLANES) {
        quant_prefetch(x + b, QUANT_QB_BLANES * sizeof *x);
        const __m512 dw = s_dw16_q8(x + b, QUANT_QB_BLANES);
        __m512i xu[8];
        #pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            xu[i] = _mm512_xor_si512(s_join(x[b + 2 * i].qs, x[b + 2 * i + 1].qs),
                                     _mm512_set1_epi8((char)0x80));
        #pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
            const int8_t *yq = y[p].qs + b * 32;
            const int32_t *b128 = y[p].bias128 + b * 8;
            __m512i c[4];
            #pragma GCC unroll 8
            for (int i = 0; i < 4; i++)
                c[i] = s_pairsum(
                    _mm512_dpbusd_epi32(_mm512_loadu_si512(b128 + 32 * i), xu[2 * i],
                                        _mm512_loadu_si512(yq + 128 * i)),
                    _mm512_dpbusd_epi32(_mm512_loadu_si512(b128 + 32 * i + 16), xu[2 * i + 1],
                                        _mm512_loadu_si512(yq + 128 * i + 64)));
            const __m512i si = s_pairsum(s_pairsum(c[0], c[1]), s_pairsum(c[2], c[3]));
            const __m512 d = _mm512_mul_ps(dw, _mm512_loadu_ps(y[p].d + b));
            z[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), d, z[p]);
        }
    }
    #pragma GCC unroll 8
    for (int p = 0; p < P; p++) {
        float a[QUANT_QB_BLANES];
        if (b < nb) /* the leftover blocks as the one-position kernel does them */
            z[p] = s_pass(0, x, &y[p], b, (int)(nb - b), z[p]);
        _mm512_storeu_ps(a, z[p]);
        out[p] = quant_reduce16_avx(a);
    }
}

void quant_dotn_q8_0_avx512(uint64_t n, const void *w, const void *const *act, int np, float *out)
{
    switch (np) {
    case 4: s_q8_dotn(n, w, act, out, 4); break;
    case 3: s_q8_dotn(n, w, act, out, 3); break;
    case 2: s_q8_dotn(n, w, act, out, 2); break;
    default: s_q8_dotn(n, w, act, out, 1); break;
    }
}

float quant_dot_q4_0_avx512(uint64_t n, const void *w, const void *act)
{
    return s_dot16(1, n, w, act);
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

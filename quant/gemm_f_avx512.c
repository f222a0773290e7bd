/* gemm_f_avx512.c — batched F16 and BF16 kernels on AVX-512: register tiles of weight rows x
 * positions, lane for lane quant.h's order for the float types. quant/
 *
 * Element i of a pair goes into lane i % 32 by one fmaf, in element order, then
 * quant_reduce32's tree: the row kernels' (dot_avx512.c) operations exactly. A weight vector
 * is widened once (vcvtph2ps, or a 16-bit shift for BF16) for S_P positions; an activation
 * vector is read once per S_R rows (a memory operand of the fma). The activation form of a
 * float type is the floats themselves, so the panel is the batch's activations as they are.
 *
 * BF16 dot products (vdpbf16ps) are not used: they multiply BF16 by BF16, so the activations
 * would have to be rounded to BF16 and each pair of products summed before the lane's add;
 * that is another order, and decoding (one position, quant_matvec) would have to take it too
 * for a position's bits to stay the same alone and in a batch. F16 weights keep f32 products.
 */
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
#include <immintrin.h>
#include <string.h>

#include "quant/gemm.h"
#include "quant/quant_int.h"
#include "quant/reduce_avx.h"

/* Rows x positions per tile: S_R * S_P * 2 accumulators and S_R * 2 widened weight vectors in
 * the 32 registers. tests/tools/gemm_time, 5632 x 2048, batch 64, 1 thread, CPU us per
 * position, two runs each (2026-12-02, load average ~9), f16 / bf16: 4x2 184-188 / 156-161,
 * 5x2 196-214 / 194-198, 6x2 217-267 / 192-227, 2x4 267-307 / 251-256, 3x4 275-289 /
 * 250-263 (spills), 4x3 273-280 / 269-288 (spills), 3x2 302-314, 8x1 294-331, 6x1 272-282;
 * matvec.c's 2x4 tiles 306-379 / 292-372. F32 (8 KiB rows) gained nothing at any shape
 * (0.73-1.05x, with an S_F32 case of s_tile): F32 keeps the tiles. -D to try others. */
#ifndef S_R
#define S_R 4
#endif
#ifndef S_P
#define S_P 2
_Static_assert(S_P >= 1 && S_P <= 8, "QUANT_GEMM_RUN covers widths 1..8");
#endif

/* The decode tile's shape (s_run_few below). */
#define S_PD 4
#ifndef S_RD
#define S_RD 2
#endif
/* s_tile's register arrays: room for both shapes */
#define S_AR (S_R > S_RD ? S_R : S_RD)
#define S_AP (S_P > S_PD ? S_P : S_PD)

enum { S_F32, S_F16, S_BF16 };

static uint64_t s_panel_bytes(uint64_t n, uint64_t B)
{
    (void)B;
    return n && n % QUANT_LANES == 0 ? 64 : 0; /* no panel: the activations are read in place */
}

static void s_pack(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab, uint8_t *panel,
                   uint64_t b0, uint64_t b1)
{
    (void)n, (void)B, (void)act, (void)ab, (void)panel, (void)b0, (void)b1;
}

static inline __attribute__((always_inline)) __m512 s_w(int kind, const void *w, uint64_t i)
{
    if (kind == S_F32)
        return _mm512_loadu_ps((const float *)w + i);
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    if (kind == S_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* pf: prefetch each row's weights QUANT_PREFETCH bytes ahead, as the row kernels do (the
 * decode tile streams its rows from DRAM once; the prompt tiles re-read theirs from cache). */
static inline __attribute__((always_inline)) void
s_tile(int kind, const quant_gemm_args *a, uint64_t r, uint64_t b, const int R, const int P,
       const int pf)
{
    const unsigned wb = kind == S_F32 ? QUANT_LANES * 4 : QUANT_LANES * 2; /* row bytes a step */
    const uint64_t n = a->n;
    const uint8_t *w[S_AR];
    const float *x[S_AP];
    __m512 c[S_AR][S_AP][2];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        w[i] = a->W + (r + (uint64_t)i) * a->row_bytes;
#pragma GCC unroll 8
        for (int p = 0; p < P; p++)
            c[i][p][0] = c[i][p][1] = _mm512_setzero_ps();
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; p++)
        x[p] = (const float *)(a->act + (b + (uint64_t)p) * a->act_bytes);
    for (uint64_t e = 0; e < n; e += QUANT_LANES) {
        __m512 w0[S_AR], w1[S_AR];
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            if (pf)
                quant_prefetch(w[i] + e * (wb / QUANT_LANES), wb);
            w0[i] = s_w(kind, w[i], e);
            w1[i] = s_w(kind, w[i], e + 16);
        }
#pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
            const __m512 x0 = _mm512_loadu_ps(x[p] + e), x1 = _mm512_loadu_ps(x[p] + e + 16);
#pragma GCC unroll 8
            for (int i = 0; i < R; i++) {
                c[i][p][0] = _mm512_fmadd_ps(w0[i], x0, c[i][p][0]);
                c[i][p][1] = _mm512_fmadd_ps(w1[i], x1, c[i][p][1]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
            float l[QUANT_LANES];
            _mm512_storeu_ps(l, c[i][p][0]);
            _mm512_storeu_ps(l + 16, c[i][p][1]);
            a->Y[(b + (uint64_t)p) * a->ldy + r + (uint64_t)i] = quant_reduce32_avx(l);
        }
}

#define S_TILE_OF(K, NAME)                                                                     \
    static inline __attribute__((always_inline)) void NAME(const quant_gemm_args *a,           \
                                                           uint64_t r, uint64_t b, const int R, \
                                                           const int P)                        \
    {                                                                                          \
        s_tile(K, a, r, b, R, P, 0);                                                           \
    }
S_TILE_OF(S_F16, s_tile16)
S_TILE_OF(S_BF16, s_tileb16)

QUANT_GEMM_RUN(s_tiles16, s_tile16)
QUANT_GEMM_RUN(s_tilesb16, s_tileb16)

/* A decode pass (the sessions of one continuous batch: B <= S_PD positions) is bound by
 * reading the weights, not by the fmas: the S_R x S_P driver above walks a row group once per
 * S_P positions, and the second walk (from L2) did not overlap the first's DRAM reads: bench-quant
 * --batch 4 --pool 1024M, 5632 x 2048 F16, 1 thread, 2026-12-02 (Xeon, AVX-512): 1681 us a
 * position against 3422 us for one matvec, so 4 sessions cost 1.97x one. Here every position
 * is in one tile of S_RD rows (S_RD * B * 2 accumulators, at most 16), each weight vector read
 * and widened once for all of them; the rows past the last tile by the row kernel. Same bits:
 * a pair's lanes see the same fmas in the same order whatever the tile. */
_Static_assert(S_PD >= 2 && S_PD <= 4 && S_RD * S_PD * 2 + 2 * S_RD <= 28, "decode tile");

static inline __attribute__((always_inline)) void
s_run_few(int kind, const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1)
{
    const uint64_t np = b1 - b0;
    uint64_t r = r0;
    for (; r + S_RD <= r1; r += S_RD) {
        switch (np) {
        case 4: s_tile(kind, a, r, b0, S_RD, 4, 1); break;
        case 3: s_tile(kind, a, r, b0, S_RD, 3, 1); break;
        case 2: s_tile(kind, a, r, b0, S_RD, 2, 1); break;
        default: s_tile(kind, a, r, b0, S_RD, 1, 1); break;
        }
    }
    for (; r < r1; r++)
        for (uint64_t p = b0; p < b1; p++)
            a->Y[p * a->ldy + r] = a->dot(a->n, a->W + r * a->row_bytes, a->act + p * a->act_bytes);
}

static void s_run16(const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1)
{
    if (b1 - b0 <= S_PD)
        s_run_few(S_F16, a, r0, r1, b0, b1);
    else
        s_tiles16(a, r0, r1, b0, b1);
}

static void s_runb16(const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1)
{
    if (b1 - b0 <= S_PD)
        s_run_few(S_BF16, a, r0, r1, b0, b1);
    else
        s_tilesb16(a, r0, r1, b0, b1);
}

const quant_gemm quant_gemm_f16_avx512 = { "avx512", s_panel_bytes, s_pack, s_run16 };
const quant_gemm quant_gemm_bf16_avx512 = { "avx512", s_panel_bytes, s_pack, s_runb16 };

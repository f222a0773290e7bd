/* gemm_k_avx2.c — batched Q4_K, Q5_K and Q6_K kernels for AVX2 + FMA + F16C (no AVX-512):
 * dot_k_avx2.c's row kernel with each weight super-block unpacked once for a tile of
 * positions. quant/
 *
 * Without it an AVX2 prompt on a K-quant file went one position at a time through the row
 * kernel, which unpacks the 6-bit scales, the nibbles (and Q5_K's fifth bits, Q6_K's high
 * bits) and broadcasts the 8 scales again for every position: bench-llm --isa avx2, Q4_K_M
 * pp128, was 0.49x llama.cpp's haswell build on 1 thread and 0.37x on 2
 * (2026-12-03-avx2-llamacpp.md), where Q4_0 with its batched kernel was 1.33-1.43x.
 *
 * The arithmetic per (row, position) is the row kernel's, so the bits are: integer lanes k of
 * vpmaddubsw then vpmaddwd by the chunk's scale (exact int32, so the order of the 8 chunks is
 * free), the min term as one vpmaddwd of the bsums by the mins (Q6_K: the offset 32 (sc bsums)
 * subtracted from the lanes), then per super-block b into lanes (b % 4) * 8 the same
 * fmaf(isum, d_w * d_x) and, Q4_K / Q5_K, fmaf(mins, -(dmin_w * d_x)), and quant_reduce32's
 * tree (reduce_avx.h). The float accumulators of a tile live in memory (S_R x S_P x 32 floats);
 * the registers hold the S_R x S_P integer sums, a chunk's levels and scale vector per row and
 * the activation chunk. The panel is the batch's Q8_K blocks reordered super-block-major
 * (positions side by side per super-block), so a tile's activations are one stream.
 * gemm_time KIND=avx2, batch 64, 1 thread, CPU us a position, row kernels -> this (2026-12-03,
 * the shared 2-vCPU Xeon at 2.3 GHz, load 1.8 from a CI run): 5632 x 2048 Q4_K 511 -> 263,
 * Q5_K 756 -> 297, Q6_K 902 -> 267; 2048 x 5632 504 -> 254, 766 -> 291, 909 -> 263. A
 * position's super-block is then ~15 cycles, of which the integer sums' 8 vpmaddubsw, 8 vpmaddwd
 * and 8 vpaddd and the float part's ~7 vector uops need ~10 on the three vector ports.
 * Tried, within 1-3% or slower (2026-12-03-k2gemm.md): 2 rows x 4 or 6 positions, 10 or 12
 * positions, the chunks as a rolled loop from memory (no spills), d_w * d_x as one vector a
 * tile, records padded to cache lines. Q4_K_M pp128 --isa avx2 against llama.cpp's haswell
 * build, alternating with main's binary: 0.39-0.42 -> 0.76-0.87 (1 thread), 0.41-0.43 ->
 * 0.81-0.82 (2 threads).
 */
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>
#include <string.h>

#include "quant/gemm.h"
#include "quant/kq_avx2.h"
#include "quant/reduce_avx.h"

#define S_R 1 /* rows a tile */
#define S_P 8 /* positions a tile */
#define S_REC sizeof(quant_block_q8_K)

static uint64_t s_panel_bytes(uint64_t n, uint64_t B)
{
    return n / QUANT_QK_K * B * S_REC;
}

/* Super-block s of position b at record s * B + b. */
static void s_pack(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab, uint8_t *panel,
                   uint64_t b0, uint64_t b1)
{
    const uint64_t nb = n / QUANT_QK_K;
    for (uint64_t b = b0; b < b1; b++)
        for (uint64_t s = 0; s < nb; s++)
            memcpy(panel + (s * B + b) * S_REC, act + b * ab + s * S_REC, S_REC);
}

/* One row's super-block, unpacked: the 8 chunks' levels (0..15, 0..31, 0..63), each chunk's
 * scale as int16 words (Q6_K: its two sub-blocks' in the two 128-bit halves), the mins as
 * words each twice (Q6_K: the 16 signed scales), d_w and dmin_w. */
typedef struct {
    __m256i q[8], sc[8], m;
    float d, dmin;
} s_wb;

static inline __attribute__((always_inline)) void s_unpack45(const void *blk, int q5, s_wb *u)
{
    const quant_block_q4_K *x4 = blk;
    const quant_block_q5_K *x5 = blk;
    const uint8_t *qs = q5 ? x5->qs : x4->qs;
    uint32_t utmp[4];
    kq_avx2_scales(x4->scales, utmp);
    const uint8_t *sc = (const uint8_t *)utmp;
    const __m128i m = _mm_loadl_epi64((const __m128i *)(sc + 8));
    u->m = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
    __m256i qh = _mm256_setzero_si256();
    if (q5)
        qh = _mm256_loadu_si256((const __m256i *)x5->qh);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        __m256i lo, hi;
        kq_avx2_levels45(qs, qh, q5, j, &lo, &hi);
        u->q[2 * j] = lo;
        u->q[2 * j + 1] = hi;
        u->sc[2 * j] = _mm256_set1_epi16((short)sc[2 * j]);
        u->sc[2 * j + 1] = _mm256_set1_epi16((short)sc[2 * j + 1]);
    }
    u->d = _cvtsh_ss(x4->d);
    u->dmin = _cvtsh_ss(x4->dmin);
}

static inline __attribute__((always_inline)) void s_unpack6(const quant_block_q6_K *x, s_wb *u)
{
    u->m = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
#pragma GCC unroll 2
    for (int n = 0; n < 2; n++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * n));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * n + 32));
        const __m256i h = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * n));
#pragma GCC unroll 4
        for (int w = 0; w < 4; w++) {
            const int c = 4 * n + w;
            u->q[c] = kq_avx2_level6(l0, l1, h, w);
            u->sc[c] = _mm256_set_m128i(_mm_set1_epi16(x->scales[2 * c + 1]),
                                        _mm_set1_epi16(x->scales[2 * c]));
        }
    }
    u->d = _cvtsh_ss(x->d);
    u->dmin = 0;
}

/* Rows r .. r + R - 1 against positions b .. b + P - 1. */
static inline __attribute__((always_inline)) void s_tile(quant_type t, const quant_gemm_args *a,
                                                         uint64_t r, uint64_t b, const int R,
                                                         const int P)
{
    const size_t bb = t == QUANT_Q4_K   ? sizeof(quant_block_q4_K)
                      : t == QUANT_Q5_K ? sizeof(quant_block_q5_K)
                                        : sizeof(quant_block_q6_K);
    const uint64_t nb = a->n / QUANT_QK_K;
    float acc[S_R][S_P][QUANT_LANES] __attribute__((aligned(32)));
    memset(acc, 0, sizeof acc);
    for (uint64_t s = 0; s < nb; s++) {
        const uint64_t g = s % QUANT_QB_GROUP;
        const quant_block_q8_K *y = (const quant_block_q8_K *)(a->panel + (s * a->B + b) * S_REC);
        s_wb u[S_R];
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            const uint8_t *x = a->W + (r + (uint64_t)i) * a->row_bytes + s * bb;
            if (t == QUANT_Q6_K)
                s_unpack6((const quant_block_q6_K *)x, &u[i]);
            else
                s_unpack45(x, t == QUANT_Q5_K, &u[i]);
        }
        __m256i is[S_R][S_P];
#pragma GCC unroll 8
        for (int p = 0; p < P; p++)
#pragma GCC unroll 4
            for (int i = 0; i < R; i++)
                is[i][p] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++)
#pragma GCC unroll 8
            for (int p = 0; p < P; p++) {
                const __m256i yv = _mm256_loadu_si256((const __m256i *)(y[p].qs + 32 * c));
#pragma GCC unroll 4
                for (int i = 0; i < R; i++) {
                    is[i][p] = _mm256_add_epi32(
                        is[i][p],
                        _mm256_madd_epi16(_mm256_maddubs_epi16(u[i].q[c], yv), u[i].sc[c]));
                    /* the sum stays in its register (as gemm_x_avx2.c's): left free, gcc
                     * reassociates the adds and spills the products to the stack first */
                    __asm__("" : "+x"(is[i][p]));
                }
            }
#pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)y[p].bsums);
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                float *l = acc[i][p] + 8 * g;
                const __m256i mi = _mm256_madd_epi16(bs, u[i].m);
                const float d = u[i].d * y[p].d;
                if (t == QUANT_Q6_K) {
                    const __m256i sv = _mm256_sub_epi32(is[i][p], _mm256_slli_epi32(mi, 5));
                    _mm256_store_ps(l, _mm256_fmadd_ps(_mm256_cvtepi32_ps(sv), _mm256_set1_ps(d),
                                                       _mm256_load_ps(l)));
                } else {
                    const float dm = -(u[i].dmin * y[p].d);
                    __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[i][p]), _mm256_set1_ps(d),
                                               _mm256_load_ps(l));
                    v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mi), _mm256_set1_ps(dm), v);
                    _mm256_store_ps(l, v);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int p = 0; p < P; p++)
            a->Y[(b + (uint64_t)p) * a->ldy + r + (uint64_t)i] = quant_reduce32_avx(acc[i][p]);
}

#define S_TILE4(a, r, b, R, P) s_tile(QUANT_Q4_K, a, r, b, R, P)
#define S_TILE5(a, r, b, R, P) s_tile(QUANT_Q5_K, a, r, b, R, P)
#define S_TILE6(a, r, b, R, P) s_tile(QUANT_Q6_K, a, r, b, R, P)
QUANT_GEMM_RUN(s_run4, S_TILE4)
QUANT_GEMM_RUN(s_run5, S_TILE5)
QUANT_GEMM_RUN(s_run6, S_TILE6)

const quant_gemm quant_gemm_q4_K_avx2 = { "avx2", s_panel_bytes, s_pack, s_run4, NULL };
const quant_gemm quant_gemm_q5_K_avx2 = { "avx2", s_panel_bytes, s_pack, s_run5, NULL };
const quant_gemm quant_gemm_q6_K_avx2 = { "avx2", s_panel_bytes, s_pack, s_run6, NULL };

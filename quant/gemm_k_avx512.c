/* gemm_k_avx512.c — batched Q4_K, Q5_K and Q6_K kernels on AVX-512 (BW + VNNI): register
 * tiles of weight rows x positions over a repacked Q8_K panel, lane for lane kquant.c's
 * order (the one-row kernels are dot_k_avx512.c's). quant/
 *
 * One tile for the three types (s4_tile): each super-block of K4_R rows is unpacked once
 * (levels with each quad twice, scales, mins, d_w and dmin_w times the tile's d_x) and serves
 * a tile of K4_P = 24 positions in 12 pairs; a vector holds a pair's two positions interleaved
 * by quads, so the int32 lanes of vpmaddubsw then vpmaddwd / vpdpwssd by the chunk's scale are
 * the pair's kquant.c lanes with no fold (exact integers, so any grouping is the same). Float
 * per pair and super-block: the row kernel's fmaf(isum, d_w * d_x, lane) and, for Q4_K / Q5_K,
 * fmaf(-mins, dmin_w * d_x, lane), into the lanes (b % 4) * 8 of the pair's 32 (kept in
 * memory), then quant_reduce32's tree. The types differ only in the unpacking: Q5_K is Q4_K's
 * (its panel too) with the qh fifth bits or'ed in (s5_unpack), Q6_K its 6-bit levels, 16
 * signed scales and kquant.c's offset term (s6_unpack, s4_pack6).
 * gemm_time, batch 512, 1 thread, CPU us a position (2026-12-03, the shared 2-vCPU Xeon):
 * Q4_K 5632 x 2048 145-148 -> 120-124, 2048 x 5632 145-149 -> 122-188 (one disturbed run),
 * Q6_K 145 -> 135 and 149 -> 144 (minima of three; the earlier 2 x 8 tile, folded per
 * position, before the arrows); Q5_K, which kept that tile until it moved here (medians of
 * three, 8 runs a side alternating, 3 disturbed ones left out: 2026-12-03-q5tile.md):
 * 5632 x 2048 154-161 -> 128-131, 2048 x 5632 155-170 -> 130-136.
 */
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#include <immintrin.h>
#include <string.h>

#include "quant/gemm.h"

/* The 6-bit scale unpacking (8 scales in bytes 0-7, 8 mins in 8-15) is dot_k_avx512.c's,
 * repeated here (static there) so that file stays as it is. */
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

/* Positions in pairs (s4_tile): a pair's two positions interleaved by quads in each 512-bit
 * vector ([p quad 0 | p + 1 quad 0 | p quad 1 | ...] of one 32-value chunk), against the
 * row's chunk with each quad twice (vpermd). The int32 lanes are then the pair's kquant.c lanes
 * (lane 2k: p's lane k, the chunk's values 4k..4k+3 summed over the 8 chunks; 2k + 1: p + 1's)
 * with no fold: 8 vpmaddubsw and 8 vpmaddwd / vpdpwssd a pair (a 16-lane vector a position
 * would need 2 shuffles and an add a pair to fold to 8 lanes, and the float work twice),
 * and the lanes' multipliers are the pair's (d_w d_p, d_w d_p+1) repeated, one 64-bit broadcast:
 * d_w times the tile's d_x (two vmulps a row and super-block) is formed once before the pair
 * loop and read as the fma's {1to8} operand, the same IEEE product the row kernel forms.
 * The mins' integers m_k (b_2k + b_2k+1) become float(m_k) * float(b_2k + b_2k+1), exact (both
 * integers, the product below 2^24), one vmulps where vpmaddwd + vcvtdq2ps were two. The
 * row's levels stay in registers for the tile's pairs; the pair loop is a run-time loop (nothing
 * in it depends on its count), so a tile is wider than the 8 positions QUANT_GEMM_RUN covers.
 * The chunk's scale goes in as a dword broadcast from memory ({1to16} on vpdpwssd).
 * Panel: per tile of K4_P positions and super-block a block of K4_PP pair records (8 x 64
 * bytes of quants, 16 floats of bsum pairs, interleaved like the lanes) and the tile's d_x (32
 * floats); a tile's blocks lie one after another, so a row tile reads its tile's panel as one
 * stream (gemm_time, 2048 x 5632, batch 512: tiles of 16 positions 138-141 us a position laid
 * out by super-block, 130-141 laid out by tile). */
#define K4_REC 576
#define K4_BSP 512
#ifndef K4_P
#define K4_P 24 /* positions per tile (even, at most 32) */
#endif
_Static_assert(K4_P >= 2 && K4_P <= 32 && K4_P % 2 == 0, "K4_P: whole pairs, 32 d_x at most");
#define K4_PP (K4_P / 2)
#define K4_DX (K4_PP * K4_REC)
#define K4_BLK (K4_DX + 128)
#ifndef K4_R
#define K4_R 2 /* rows per tile */
#endif

static uint64_t s4_panel_bytes(uint64_t n, uint64_t B)
{
    const uint64_t nb = n / QUANT_QK_K;
    return nb ? (B + K4_P - 1) / K4_P * nb * K4_BLK : 0;
}

/* Position b: tile b / K4_P, pair (b % K4_P) / 2, interleave slot b % 2. An odd B's last
 * pair gets a zero second position (its sums are computed and dropped); the d_x past a tile's
 * last position are zero too (the products before the pair loop read all 32). */
static inline void s4_pack(int q6, uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab,
                           uint8_t *panel, uint64_t b0, uint64_t b1)
{
    const uint64_t nb = n / QUANT_QK_K;
    for (uint64_t b = b0; b < b1; b++) {
        const quant_block_q8_K *y = (const quant_block_q8_K *)(act + b * ab);
        const uint64_t q = b % K4_P, h = q % 2;
        const int last = b + 1 == B;
        for (uint64_t s = 0; s < nb; s++) {
            uint8_t *blk = panel + ((b / K4_P) * nb + s) * K4_BLK, *o = blk + q / 2 * K4_REC;
            for (int v = 0; v < 8; v++)
                for (int k = 0; k < 8; k++) {
                    memcpy(o + 64 * v + 8 * k + 4 * h, y[s].qs + 32 * v + 4 * k, 4);
                    if (last && !h)
                        memset(o + 64 * v + 8 * k + 4, 0, 4);
                }
            for (int k = 0; k < 8; k++) {
                const float bp = (float)(y[s].bsums[2 * k] + y[s].bsums[2 * k + 1]);
                if (q6)
                    memcpy(o + K4_BSP + 8 * k + 4 * h, y[s].bsums + 2 * k, 4);
                else
                    memcpy(o + K4_BSP + 8 * k + 4 * h, &bp, 4);
                if (last && !h)
                    memset(o + K4_BSP + 8 * k + 4, 0, 4);
            }
            memcpy(blk + K4_DX + 4 * q, &y[s].d, 4);
            if (last || q == K4_P - 1)
                memset(blk + K4_DX + 4 * (q + 1), 0, 4 * (31 - q));
        }
    }
}

static void s4_pack4(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab, uint8_t *panel,
                     uint64_t b0, uint64_t b1)
{
    s4_pack(0, n, B, act, ab, panel, b0, b1);
}

/* Q6_K's records: the bsum pairs as int16 words (b_2k, b_2k+1) in the lane of quad k, for
 * the offset term's vpmaddwd by the scale pairs (kquant.c's s_lanes). */
static void s4_pack6(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab, uint8_t *panel,
                     uint64_t b0, uint64_t b1)
{
    s4_pack(1, n, B, act, ab, panel, b0, b1);
}

/* One Q4_K / Q5_K row's super-block for s4_tile: the 8 chunks' levels (each quad twice) in
 * registers; in memory the 8 scales as word pairs, the mins as floats (each twice), and
 * d_w and dmin_w times the tile's 32 d_x. */
typedef struct {
    __m512i q[8];
} s4_lv;
/* 64-byte aligned as a type, so every element of an array of them is (the vectors below are
 * stored and loaded aligned; 928 bytes of members would put the second row's at +32). */
typedef struct {
    _Alignas(64) int32_t sc6[8][16]; /* Q6_K: chunk c's scale words, 2c lanes 0-7, 2c + 1 8-15 */
    float dd[32], dm[32];
    float mf[16];
    int32_t m6[16]; /* Q6_K: the scale pair (2k, 2k + 1) in lanes 2k and 2k + 1 */
    uint32_t sc[8];
} s4_aux;

/* qs: the nibbles (a Q5_K block's lie past its qh). */
static inline __attribute__((always_inline)) void s4_unpack(const quant_block_q4_K *x,
                                                            const uint8_t *qs,
                                                            const uint8_t *dx, s4_lv *u,
                                                            s4_aux *a)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m128i scm = s_unpack_v(x->scales);
    _mm512_store_ps(a->mf, _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_cvtepi32_ps(
                                                           _mm256_cvtepu8_epi32(_mm_srli_si128(scm, 8))))));
    const __m128i w = _mm_cvtepu8_epi16(scm);
    _mm_store_si128((__m128i *)a->sc, _mm_unpacklo_epi16(w, w));
    _mm_store_si128((__m128i *)(a->sc + 4), _mm_unpackhi_epi16(w, w));
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        const __m512i v = _mm512_permutexvar_epi32(
            dup, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(qs + 32 * m))));
        u->q[2 * m] = _mm512_and_si512(v, m4);
        u->q[2 * m + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
    const __m512 dw = _mm512_set1_ps(_cvtsh_ss(x->d)), dmw = _mm512_set1_ps(_cvtsh_ss(x->dmin));
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {
        const __m512 d = _mm512_load_ps(dx + 64 * k);
        _mm512_store_ps(a->dd + 16 * k, _mm512_mul_ps(dw, d));
        _mm512_store_ps(a->dm + 16 * k, _mm512_mul_ps(dmw, d));
    }
}

/* One Q5_K row's super-block: Q4_K's (the same scales, mins and nibbles: levels, aux and the
 * activation panel are s4_unpack's and s4_pack4's), then the fifth bits, levels 0..31. qh holds
 * element l of every chunk in byte l, chunk c's bit in bit c; duplicated by quads like the
 * nibbles, chunk c's goes to bit 4 by a 16-bit shift (4 - c left, c - 4 right: bit 4 of each
 * byte comes from the same byte, the rest masked off) and an or (vpternlogd): with qh's load
 * and vpermd ~16 instructions a row and super-block (s_run5's code is ~270 bytes longer than
 * s_run4's for 2 rows), against the ~260 of its 12 pairs (~22 each). */
static inline __attribute__((always_inline)) void s5_unpack(const quant_block_q5_K *x,
                                                            const uint8_t *dx, s4_lv *u,
                                                            s4_aux *a)
{
    s4_unpack((const quant_block_q4_K *)x, x->qs, dx, u, a);
    const __m512i m10 = _mm512_set1_epi8(0x10);
    const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i h = _mm512_permutexvar_epi32(
        dup, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x->qh)));
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        const __m512i b = c < 4 ? _mm512_slli_epi16(h, 4 - c)
                          : c > 4 ? _mm512_srli_epi16(h, c - 4) : h;
        u->q[c] = _mm512_ternarylogic_epi32(u->q[c], b, m10, 0xF8); /* q | (b & 0x10) */
    }
}

/* One Q6_K row's super-block: s4_unpack's for the 6-bit levels (chunk 4h + j: ql's nibbles and
 * qh's bits 2j, 2j + 1 of half h, element order) and the 16 signed scales. */
static inline __attribute__((always_inline)) void s6_unpack(const quant_block_q6_K *x,
                                                            const uint8_t *dx, s4_lv *u,
                                                            s4_aux *a)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
    _mm512_store_si512(a->m6, _mm512_permutexvar_epi32(dup, _mm512_castsi256_si512(sc16)));
    const __m512i z = _mm512_cvtepu16_epi32(sc16);
    const __m512i wp = _mm512_or_si512(z, _mm512_slli_epi32(z, 16));
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++)
        _mm512_store_si512(a->sc6[c],
                           _mm512_permutexvar_epi32(
                               _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(2 * c),
                                                       _mm512_set1_epi32(2 * c + 1)),
                               wp));
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i l0 = _mm512_permutexvar_epi32(
            dup, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(x->ql + 64 * h))));
        const __m512i l1 = _mm512_permutexvar_epi32(
            dup,
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32))));
        const __m512i qh = _mm512_permutexvar_epi32(
            dup, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(x->qh + 32 * h))));
        u->q[4 * h] = _mm512_or_si512(_mm512_and_si512(l0, m4),
                                      _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30));
        u->q[4 * h + 1] = _mm512_or_si512(_mm512_and_si512(l1, m4),
                                          _mm512_and_si512(_mm512_slli_epi16(qh, 2), m30));
        u->q[4 * h + 2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4),
                                          _mm512_and_si512(qh, m30));
        u->q[4 * h + 3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4),
                                          _mm512_and_si512(_mm512_srli_epi16(qh, 2), m30));
    }
    const __m512 dw = _mm512_set1_ps(_cvtsh_ss(x->d));
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++)
        _mm512_store_ps(a->dd + 16 * k, _mm512_mul_ps(dw, _mm512_load_ps(dx + 64 * k)));
}

static inline __m512 s4_bcst2(const float *p)
{
    double d;
    memcpy(&d, p, sizeof d);
    return _mm512_castpd_ps(_mm512_set1_pd(d));
}

/* quant_reduce32's tree for a pair's interleaved lanes: reduce_avx.h's additions (t = (g0 +
 * g1) + (g2 + g3), t[j] + t[j+4], u[j] + u[j+2], v[0] + v[1] per position) with the lane
 * distances doubled; p's sum in element 0, p + 1's in element 1. */
static inline __m512 s4_reduce_pair(const float acc[QUANT_QB_GROUP][16])
{
    const __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_load_ps(acc[0]), _mm512_load_ps(acc[1])),
                                   _mm512_add_ps(_mm512_load_ps(acc[2]), _mm512_load_ps(acc[3])));
    const __m512 u = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m512 v = _mm512_add_ps(u, _mm512_shuffle_f32x4(u, u, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));
}

/* Rows r .. r + R - 1 against positions b .. b + P - 1 (b a multiple of K4_P; P odd: the last
 * pair's second position is computed and dropped). */
static inline __attribute__((always_inline)) void s4_tile(quant_type t, const quant_gemm_args *a,
                                                          uint64_t r, uint64_t b, const int R,
                                                          uint64_t P)
{
    const size_t bb = t == QUANT_Q4_K   ? sizeof(quant_block_q4_K)
                      : t == QUANT_Q5_K ? sizeof(quant_block_q5_K)
                                        : sizeof(quant_block_q6_K);
    const uint64_t nb = a->n / QUANT_QK_K, npp = (P + 1) / 2;
    float acc[K4_R][K4_PP][QUANT_QB_GROUP][16] __attribute__((aligned(64)));
    memset(acc, 0, sizeof acc);
    s4_aux aux[K4_R] __attribute__((aligned(64)));
    const uint8_t *pb = a->panel + (b / K4_P) * nb * K4_BLK;
    for (uint64_t s = 0; s < nb; s++, pb += K4_BLK) {
        const uint64_t g = s % QUANT_QB_GROUP;
        s4_lv u[K4_R];
#pragma GCC unroll 4
        for (int i = 0; i < R; i++)
        {
            const uint8_t *x = a->W + (r + (uint64_t)i) * a->row_bytes + s * bb;
            if (t == QUANT_Q6_K)
                s6_unpack((const quant_block_q6_K *)x, pb + K4_DX, &u[i], &aux[i]);
            else if (t == QUANT_Q5_K)
                s5_unpack((const quant_block_q5_K *)x, pb + K4_DX, &u[i], &aux[i]);
            else
                s4_unpack((const quant_block_q4_K *)x, ((const quant_block_q4_K *)x)->qs,
                          pb + K4_DX, &u[i], &aux[i]);
        }
        /* the scales back from memory: vpbroadcastd from memory is a load, where the compiler
         * otherwise extracts each from a register (vpextrd + vpbroadcastd, 3 port-0/5 uops) */
        __asm__ volatile("" : : "r"(aux) : "memory");
        for (uint64_t j = 0; j < npp; j++) {
            const uint8_t *o = pb + j * K4_REC;
            const __m512 bs = _mm512_load_ps(o + K4_BSP);
            const __m512i bs6 = _mm512_load_si512(o + K4_BSP);
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                /* two chains of 4 (chunks 0-3, 4-7) and one add: half the latency of one
                 * chain of 8 for one more uop (gemm_time 136 against 138 us a position) */
                __m512i sh[2];
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    sh[h] = _mm512_madd_epi16(
                        _mm512_maddubs_epi16(u[i].q[4 * h], _mm512_load_si512(o + 256 * h)),
                        t == QUANT_Q6_K ? _mm512_load_si512(aux[i].sc6[4 * h])
                                        : _mm512_set1_epi32((int)aux[i].sc[4 * h]));
#pragma GCC unroll 3
                    for (int c = 4 * h + 1; c < 4 * h + 4; c++)
                        sh[h] = _mm512_dpwssd_epi32(
                            sh[h], _mm512_maddubs_epi16(u[i].q[c], _mm512_load_si512(o + 64 * c)),
                            t == QUANT_Q6_K ? _mm512_load_si512(aux[i].sc6[c])
                                            : _mm512_set1_epi32((int)aux[i].sc[c]));
                }
                float *l = acc[i][j][g];
                __m512i sv = _mm512_add_epi32(sh[0], sh[1]);
                if (t == QUANT_Q6_K) /* kquant.c's offset: 32 (s_2k b_2k + s_2k+1 b_2k+1) */
                    sv = _mm512_sub_epi32(
                        sv, _mm512_slli_epi32(
                                _mm512_madd_epi16(bs6, _mm512_load_si512(aux[i].m6)), 5));
                __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sv), s4_bcst2(aux[i].dd + 2 * j),
                                           _mm512_load_ps(l));
                if (t != QUANT_Q6_K)
                    v = _mm512_fnmadd_ps(_mm512_mul_ps(bs, _mm512_load_ps(aux[i].mf)),
                                         s4_bcst2(aux[i].dm + 2 * j), v);
                _mm512_store_ps(l, v);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        for (uint64_t j = 0; j < npp; j++) {
            float *y = a->Y + (b + 2 * j) * a->ldy + r + (uint64_t)i;
            const __m512 sums = s4_reduce_pair(acc[i][j]);
            y[0] = _mm512_cvtss_f32(sums);
            if (2 * j + 1 < P)
                y[a->ldy] = _mm_cvtss_f32(_mm_movehdup_ps(_mm512_castps512_ps128(sums)));
        }
}

/* QUANT_GEMM_RUN's order (positions outermost, rows in tiles of K4_R, the rows past the last
 * tile by the row kernel) in tiles of K4_P positions; positions before the first multiple of
 * K4_P (none from matvec.c, which runs from 0) go by the row kernel. */
static inline __attribute__((always_inline)) void
s4_run(quant_type t, const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1)
{
    for (; b0 < b1 && b0 % K4_P; b0++)
        for (uint64_t r = r0; r < r1; r++)
            a->Y[b0 * a->ldy + r] =
                a->dot(a->n, a->W + r * a->row_bytes, a->act + b0 * a->act_bytes);
    for (uint64_t b = b0; b < b1; b += K4_P) {
        const uint64_t np = b1 - b < K4_P ? b1 - b : K4_P;
        uint64_t r = r0;
        for (; r + K4_R <= r1; r += K4_R)
            s4_tile(t, a, r, b, K4_R, np);
        for (; r < r1; r++)
            for (uint64_t p = b; p < b + np; p++)
                a->Y[p * a->ldy + r] =
                    a->dot(a->n, a->W + r * a->row_bytes, a->act + p * a->act_bytes);
    }
}

static void s_run4(const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1)
{
    s4_run(QUANT_Q4_K, a, r0, r1, b0, b1);
}

static void s_run5(const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1)
{
    s4_run(QUANT_Q5_K, a, r0, r1, b0, b1);
}

static void s_run6(const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1)
{
    s4_run(QUANT_Q6_K, a, r0, r1, b0, b1);
}

const quant_gemm quant_gemm_q4_K_avx512 = { "avx512-vnni", s4_panel_bytes, s4_pack4, s_run4, NULL };
const quant_gemm quant_gemm_q5_K_avx512 = { "avx512-vnni", s4_panel_bytes, s4_pack4, s_run5, NULL };
const quant_gemm quant_gemm_q6_K_avx512 = { "avx512-vnni", s4_panel_bytes, s4_pack6, s_run6, NULL };
